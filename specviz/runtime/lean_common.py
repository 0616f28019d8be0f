"""What the lean forwards share (``lean_llama``, ``lean_gemma``): matmuls with their addends folded in (several rows
through the packed oneDNN path), RMSNorm and RoPE as transformers compute them, a row-exact attention for half
precision, and the check that nobody instruments a model's forward."""
from __future__ import annotations

import weakref
from itertools import chain

import torch
import torch.nn.functional as F
from torch.nn.modules import module as nn_module

from . import native, packed_linear, quant
from .forwards import HEAD_HOOKS

_MODULES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> (its modules' children, its modules)


QUIET_HOOKS = ("output_capturing_hook", *HEAD_HOOKS)  # transformers' own, and the head's timer while it runs


def instrumented(model) -> bool:
    """Whether calling the model runs anything beyond its modules' own forwards (transformers' output-capture
    hooks do nothing unless hidden states or attentions are asked for, which CachedLM never does). Every module's
    hooks are read on every call; the tree of modules is walked again only where a module's children changed (a
    decoding run asks this a few times: the walk cost about 2 ms a time on the bundled target)."""
    hooks = [*nn_module._global_forward_hooks.values(), *nn_module._global_forward_pre_hooks.values()]
    for m in modules(model):
        if m._forward_hooks or m._forward_pre_hooks:
            hooks += [*m._forward_hooks.values(), *m._forward_pre_hooks.values()]
    return "forward" in vars(model) or any(getattr(h, "__name__", "") not in QUIET_HOOKS for h in hooks)


def modules(model) -> list:
    """model.modules() as a list, kept per model (without the model itself, which the cache must not hold) and walked
    again when any module's children were added, removed or replaced."""
    hit = _MODULES.get(model)
    if hit is None or hit[0] != _children([model, *hit[1]]):
        rest = list(model.modules())[1:]
        hit = _MODULES[model] = (_children([model, *rest]), rest)
    return [model, *hit[1]]


def _children(found: list) -> list:
    return list(chain.from_iterable(m._modules.values() for m in found))  # compared by identity


def linear(x: torch.Tensor, w_t: torch.Tensor, b: torch.Tensor | None, residual: torch.Tensor | None = None):
    """residual + x @ W_t + b: in C over the weight packed once where ``native`` is built (fp32 on a CPU), else the
    addends folded into the matmul (addmm), several rows through oneDNN's packed weights where this host timed that
    faster (``packed_linear``). A quantized W (``quant.QuantLinear``, a GGUF's own blocks) runs in C on its bytes."""
    if isinstance(w_t, quant.QuantLinear):
        return quant.linear(x, w_t, b, residual)
    if native.fits(x, w_t, b, residual):
        return native.linear(x, w_t, b, residual)
    # stays for hosts without the C stack (no compiler, SPECVIZ_NATIVE=0): oneDNN where timed faster here, else addmm
    out = packed_linear.linear(x, w_t, b, residual)
    return out if out is not None else packed_linear.plain(x, w_t, b, residual)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """LlamaRMSNorm bit for bit (normalised in float32, cast back, then scaled) in 1-3 ops instead of 7; rows of a
    float32 matrix in C where ``native`` is built (the same arithmetic, summed in another order)."""
    if x.dim() == 2 and weight.dim() == 1 and native.fits(x, weight):
        return native.rms_norm(x, weight.contiguous(), eps)
    if x.dtype == torch.float32:
        return F.rms_norm(x, weight.shape, weight, eps)
    return F.rms_norm(x.float(), weight.shape, None, eps).to(x.dtype) * weight


def rope_tables(cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A rotary embedding's (1, n, hd) cos and sin as ``rope_`` takes them: (n, hd) each, sin signed
    (-sin[:hd/2], sin[hd/2:]) so that rotate_half becomes a roll."""
    half = sin.shape[-1] // 2
    return cos[0], torch.cat((-sin[0, :, :half], sin[0, :, half:]), dim=-1)


_ROPE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # rotary module -> {(capacity, dtype, device): tables}


@torch.inference_mode()
def rope_for(rotary, like: torch.Tensor, cols: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``rope_tables`` of transformers' own RoPE at positions 0..capacity-1, in ``like``'s dtype, once per capacity
    (every run of a model starts at the same capacity)."""
    tables = _ROPE.setdefault(rotary, {})
    key = (len(cols), like.dtype, like.device)
    if key not in tables:
        tables[key] = rope_tables(*rotary(like, cols[None]))
    return tables[key]


def rope_(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """apply_rotary_pos_emb in place and bit for bit on x (n, heads, hd), cos and sin (n, 1, hd):
    x cos + rotate_half(x) sin, where rotate_half(x) sin = roll(x, hd/2) sin_signed and
    sin_signed = (-sin[:hd/2], sin[hd/2:]) (negation is exact)."""
    rotated = x.roll(x.shape[-1] // 2, -1) * sin
    return x.mul_(cos).add_(rotated)


def row_exact_attention(q, k, v, mask, scale: float) -> torch.Tensor:
    """Attention whose every row is bit-identical however many rows a call holds and wherever the masked keys
    sit (a verify pass, a token tree, one token at a time): scores and the value sum as plain half-precision
    matmuls (row-exact where the CPU's bf16 matmuls are: the bundled target's shapes with AVX512-BF16, not every
    shape or CPU), the softmax in float32, row by row. sdpa's fused CPU kernel is not: in bf16 it rounded a row
    differently with 1 or 11 rows, which changed the bundled pair's greedy text in 7 of 10 prompts."""
    scores = (q @ k.transpose(-1, -2)).float().mul_(scale)
    if mask is not None:
        scores.masked_fill_(~mask, float("-inf"))
    return scores.softmax(-1).to(v.dtype) @ v
