"""A lean forward pass for Llama models, behind the same cache interface as transformers' caches.

Why: at the bundled sizes (d 128-320, 1-5 tokens a call) a transformers forward is mostly per-call
overhead: module calls, a mask built per call, a cache grown by concatenation, repeated keys for
grouped-query attention. Here the model's own weights are re-laid out once (q/k/v and gate/up merged,
every matrix stored transposed and contiguous: ``x @ W_t``), keys and values go into a pre-allocated
cache written in place, and the RoPE tables are built once per capacity. RMSNorm and RoPE are
transformers' arithmetic bit for bit; the merged matmuls and the attention kernel round differently,
so the logits match transformers' to ~1e-5 in fp32 (the bundled target) and ~1e-15 in float64.

Rollback is overwrite-by-position: ``crop`` only moves the write position back.

In float32 on a CPU the layers, the final norm and the LM head run in C where ``native`` builds (``layers`` and
``through_head`` hand the whole stack to one call); the torch code below runs everything else (float64, half
precision, other devices, ``native.disabled()``) and is what the C stack is tested against.

Exactness of batched verification: fp32 kernels round a row differently with 1 or 5 rows (several rows go
through oneDNN over packed weights, ``packed_linear``), yet over 3100 verify rows of the bundled target no argmax
changed. In bf16 (AVX512-BF16) the GEMMs at the bundled shapes are row-exact but sdpa is not (the bundled pair's
greedy text left the target's own in 7 of 10 prompts), so half precision attends through ``row_exact_attention``
(0 of 10). bf16 is not the default: its rows are cheap (10 rows 1.3x one) but a one-token pass is no faster.
Supported: the families of ``lean_families`` (llama, mistral, qwen2, qwen3, phi3: one block layout) with SiLU MLPs,
no sliding window, a RoPE whose frequencies do not change with the length (not "dynamic" / "longrope"), on one
device, not instrumented with hooks; ``supports`` says whether a model qualifies (``lean_families.refusal`` says why
not), and CachedLM uses transformers otherwise. An early exit's pruned head (``pruned_head``) is scored here too.
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from . import native, packed_linear
from .lean_common import linear, modules, rms_norm, rope_, rope_for, row_exact_attention  # noqa: F401 (rms_norm: part of this API)
from .lean_families import FAMILIES as LLAMA_LIKE  # noqa: F401 (part of this API)
from .lean_families import Block, layer_weights, refusal
from .pruned_head import PrunedHead, scatter
from .timing import head_clock

FIRST_CAPACITY = 256  # cached positions allocated up front; doubled whenever a feed needs more


def supports(model) -> bool:
    """Whether ``LeanLlama`` can run this model exactly as transformers would (``refusal``: why not)."""
    return refusal(model) is None


@dataclass(frozen=True)
class Weights:
    embed: torch.Tensor   # (V, d)
    blocks: tuple[Block, ...]
    norm: torch.Tensor    # (d,)
    head_t: torch.Tensor  # (d, V), or (d, V') for a pruned head
    head_b: torch.Tensor | None
    head_ids: torch.Tensor | None = None  # a pruned head's token ids (V',): its logits go there, -inf elsewhere
    vocab: int = 0  # the full vocabulary a pruned head's logits are placed in


def head_logits(w: Weights, h: torch.Tensor) -> torch.Tensor:
    """The LM head of w over normed hidden states h (n, d): (n, V), -inf outside a pruned head's tokens."""
    out = linear(h, w.head_t, w.head_b)
    return out if w.head_ids is None else scatter(out, w.head_ids, w.vocab)


_WEIGHTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> (fingerprint, Weights)


def lean_weights(model) -> Weights:
    """The model's weights re-laid out, re-done only when a parameter changed (training bumps ``_version``,
    ``.to()`` moves ``data_ptr``), so building a CachedLM per decoding run stays cheap. Parameters made in
    inference mode keep no version counter: such models are re-laid out every time. An early exit of a model
    (``specviz.drafts.early_exit``) reuses that model's re-laid-out layers, embedding and head: only an exit adapter's
    layer is laid out anew, so the exit holds nothing more than its adapter."""
    source = getattr(model, "exit_of", None)
    if source is not None:
        return _exit_weights(model, source)
    params = [p for m in modules(model) for p in m._parameters.values() if p is not None]  # parameters(), walked once
    if any(p.is_inference() for p in params):
        return _relayout(model)
    fingerprint = tuple((p.data_ptr(), p._version, p.dtype) for p in params)
    hit = _WEIGHTS.get(model)
    if hit is None or hit[0] != fingerprint:
        hit = (fingerprint, _relayout(model))
        _WEIGHTS[model] = hit
    return hit[1]


def _exit_weights(model, source) -> Weights:
    base = lean_weights(source)
    layers, shared = list(model.model.layers), 0
    while shared < min(len(layers), len(base.blocks)) and layers[shared] is source.model.layers[shared]:
        shared += 1
    own = layers[shared:]  # an exit adapter
    with torch.no_grad():
        blocks = base.blocks[:shared] + tuple(layer_weights(layer) for layer in own)
    if shared < len(blocks) and not native.enabled():  # the path timed for its model's layers of the same shapes
        packed_linear.adopt(matmuls(blocks[shared:]), base.blocks[0].qkv_t)
    head = model.get_output_embeddings()
    if isinstance(head, PrunedHead):  # the exit scores part of the vocabulary
        return Weights(base.embed, blocks, base.norm, head.rows_t, head.rows_b, head.ids, head.vocab_size)
    return Weights(base.embed, blocks, base.norm, base.head_t, base.head_b)


@torch.no_grad()
def _relayout(model) -> Weights:
    blocks = [layer_weights(layer) for layer in model.model.layers]
    head = model.get_output_embeddings()
    bias = head.bias.detach() if getattr(head, "bias", None) is not None else None
    w = Weights(model.model.embed_tokens.weight.detach(), tuple(blocks), model.model.norm.weight.detach(),
                head.weight.detach().t().contiguous(), bias)
    if not native.enabled():  # the C stack runs every row count where it is built
        packed_linear.calibrate(matmuls(w.blocks) + [(w.head_t, w.head_b, False)])  # this host's faster path
    return w


def matmuls(blocks) -> list[tuple]:
    """The blocks' matmuls in the order a pass runs them, as ``packed_linear.calibrate`` times them."""
    return [step for blk in blocks for step in ((blk.qkv_t, blk.qkv_b, False), (blk.o_t, blk.o_b, True),
                                                (blk.gu_t, blk.gu_b, False), (blk.down_t, blk.down_b, True))]


class LeanLlama:
    """A Llama forward with its own pre-allocated KV cache, used like a transformers cache by CachedLM:
    ``forward`` appends tokens and returns their logits, ``crop`` moves the write position back,
    ``get_seq_length`` says how many positions are cached."""

    def __init__(self, model, weights: Weights | None = None):
        cfg, why = model.config, refusal(model)
        if why is not None and weights is None:
            raise ValueError(f"the lean Llama forward cannot run {type(model).__name__}: {why}")
        self.w = weights or lean_weights(model)  # given: other blocks of the same shape (a feature draft's layer)
        self.rotary = model.model.rotary_emb  # transformers' own RoPE, evaluated once per capacity
        self.nh, self.nkv = cfg.num_attention_heads, cfg.num_key_value_heads
        self.hd = getattr(cfg, "head_dim", None) or cfg.hidden_size // self.nh
        self.eps, self.scale, self.inter = cfg.rms_norm_eps, self.hd ** -0.5, cfg.intermediate_size
        self.length = self.capacity = 0
        self.features: torch.Tensor | None = None  # (capacity, d) normed last hidden states, once keep_features()
        self.features_from = 0
        self._native: dict[tuple, bool] = {}  # ids of a stack's blocks -> whether it runs in C (``native``)
        self._own = self._own_c = None  # this model's own (Block, cache) pairs, and as the C stack takes them
        self.reserve(FIRST_CAPACITY)
        self.dims = native.Dims(self.w.embed.shape[1], self.nh, self.nkv, self.hd, self.inter, self.cos.shape[-1],
                                self.eps, self.scale)  # as the C stack takes them

    def keep_features(self) -> None:
        """From now on keep every slot's final normed hidden state in ``features`` (what the LM head reads)."""
        if self.features is None:
            self.features = self.w.embed.new_zeros(self.capacity, self.w.embed.shape[1])
            self.features_from = self.length  # slots before it were written without

    def get_seq_length(self) -> int:
        return self.length

    def crop(self, keep: int) -> None:
        """Keep positions [0, keep): later writes overwrite the rest."""
        self.length = min(self.length, keep)

    @torch.inference_mode()
    def keep(self, start: int, slots: list[int]) -> None:
        """Keep slots [0, start) and then the given slots (a tree's accepted path), moved to start, start + 1, ...
        Their keys were rotated at their depth below the prefix, which is their position on the path."""
        self.kv[..., start: start + len(slots), :] = self.kv[..., slots, :]
        if self.features is not None:
            self.features[start: start + len(slots)] = self.features[slots]
        self.length = start + len(slots)

    @torch.inference_mode()
    def forward(self, ids: torch.Tensor, positions: torch.Tensor | None = None,
                visible: torch.Tensor | None = None) -> torch.Tensor:
        """Append ids (n,) at cache slots length..length+n-1; return the logits after each, (n, V). By default
        slot = position and the new tokens attend causally; a token tree passes each node's ``positions`` (n,)
        (its depth below the prefix) and ``visible`` (n, length + n), the slots each node attends to."""
        start, end = self.length, self.length + ids.shape[-1]
        self.reserve(end)
        h, logits = self.through_head(F.embedding(ids, self.w.embed), start, None, positions, visible)
        self.length = end
        if self.features is not None:  # a feature draft reads them (specviz.drafts.eagle)
            self.features[start:end] = h
        return logits

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        """The LM head over normed hidden states h (n, d): (n, V)."""
        return head_logits(self.w, h)

    def through_head(self, x: torch.Tensor, start: int, stack=None, positions: torch.Tensor | None = None,
                     visible: torch.Tensor | None = None, first: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """``layers`` (stack None: this model's own blocks and cache), then the final norm and the LM head: (every row
        normed (n, d), the logits of rows first..n-1). In C, all of it is one call."""
        if stack is None:
            self.reserve(start + x.shape[0])
        stack = self._stack(stack)
        if self.runs_native(stack):
            w = self.w
            out = native.layers(x, start, self._c_stack(stack), self.dims, self.cos, self.sin, positions, visible,
                                (w.norm, w.head_t, w.head_b, first))
            if out is not None:
                h, logits = out
                return h, (logits if w.head_ids is None else scatter(logits, w.head_ids, w.vocab))
        x = self._torch_layers(x, start, stack, positions, visible)
        with head_clock.timing():
            h = rms_norm(x, self.w.norm, self.eps)
            return h, self.logits(h[first:])

    def layers(self, x: torch.Tensor, start: int, stack, positions: torch.Tensor | None = None,
               visible: torch.Tensor | None = None) -> torch.Tensor:
        """Rows x (n, d) at slots start..start+n-1 through ``stack``, pairs (Block, its key/value cache (2 nkv,
        capacity, hd)), each writing its keys and values at those slots; the rows after the last block. The caches
        and this object's RoPE tables must hold start + n slots (``reserve``: done here for stack None, this model's
        own cache; the C stack refuses a pass past a cache's capacity); ``length`` is left as it is (an early exit
        writes into the target's first layers' cache this way, ahead of the target's verify pass)."""
        if stack is None:
            self.reserve(start + x.shape[0])
        stack = self._stack(stack)
        if self.runs_native(stack):
            out = native.layers(x, start, self._c_stack(stack), self.dims, self.cos, self.sin, positions, visible)
            if out is not None:
                return out
        return self._torch_layers(x, start, stack, positions, visible)

    def _torch_layers(self, x: torch.Tensor, start: int, stack: list, positions: torch.Tensor | None,
                      visible: torch.Tensor | None) -> torch.Tensor:
        """``layers`` on torch's operators (the C stack's reference, and what runs where it cannot)."""
        n = x.shape[0]
        end = start + n
        at = slice(start, end) if positions is None else positions
        cos, sin = self.cos[at, None], self.sin[at, None]  # (n, 1, hd)
        mask = None  # one new token attends to every cached one; n tokens attend causally among themselves
        if visible is not None:
            mask = visible.repeat(self.nh // self.nkv, 1)
        elif n > 1:  # rows follow the packed queries in _attend: group member r, token i at row r n + i
            mask = (self.cols[:end] <= self.cols[start:end, None]).repeat(self.nh // self.nkv, 1)  # (g n, end)
        for blk, kv in stack:
            attn = self._attend(linear(rms_norm(x, blk.ln1, self.eps), blk.qkv_t, blk.qkv_b), blk, kv, start,
                                mask, cos, sin)
            x = linear(attn, blk.o_t, blk.o_b, residual=x)
            gate_up = linear(rms_norm(x, blk.ln2, self.eps), blk.gu_t, blk.gu_b)  # (n, 2 I)
            x = linear(F.silu(gate_up[:, : self.inter]) * gate_up[:, self.inter:], blk.down_t, blk.down_b, residual=x)
        return x

    def in_c(self) -> bool:
        """Whether this model's own layers run in C (``native``)."""
        return self.runs_native(self._stack(None))

    def _stack(self, stack) -> list:
        """(Block, cache) pairs: this model's own (None; the same list until the cache is reallocated) or given."""
        if stack is not None:
            return list(stack)
        if self._own is None:
            self._own = list(zip(self.w.blocks, self.kv))
        return self._own

    def _c_stack(self, stack: list):
        """The pairs as the C stack takes them: this model's own built once per cache allocation."""
        if stack is not self._own:
            return stack
        if self._own_c is None:
            self._own_c = native.Stack(stack, self.dims)
        return self._own_c

    def runs_native(self, stack) -> bool:
        """Whether this stack of (Block, cache) pairs runs in C (``native``: float32 on the CPU, the library built)."""
        if not native.enabled():
            return False
        key = tuple(id(blk) for blk, _ in stack)
        if key not in self._native:
            blocks = [blk for blk, _ in stack]
            self._native[key] = native.supports_stack(blocks, self.kv.dtype, self.hd, self.cos.shape[-1]) and \
                self.w.embed.dtype == torch.float32
        return self._native[key]

    def _attend(self, qkv: torch.Tensor, blk: Block, kv: torch.Tensor, start: int, mask, cos, sin) -> torch.Tensor:
        """Attention of n new positions given their q/k/v projections (n, (nh + 2 nkv) hd) over the cache's
        positions [0, start + n), after writing their keys and values to kv (2 nkv, capacity, hd)."""
        n, nh, nkv, hd = qkv.shape[0], self.nh, self.nkv, self.hd
        qkv = qkv.view(n, nh + 2 * nkv, hd)  # heads: nh queries, nkv keys, nkv values
        if blk.q_norm is not None:  # Qwen3: each query and key head normed over hd, before RoPE
            qkv[:, :nh] = rms_norm(qkv[:, :nh], blk.q_norm, self.eps)
            qkv[:, nh: nh + nkv] = rms_norm(qkv[:, nh: nh + nkv], blk.k_norm, self.eps)
        rope_(qkv[:, : nh + nkv, : cos.shape[-1]], cos, sin)  # Phi-3's partial rotary: the first dims only
        kv[:, start: start + n] = qkv[:, nh:].transpose(0, 1)  # keys and values side by side: one write
        # the g = nh / nkv query heads sharing a key/value head are packed as g n rows of one head, as
        # transformers' pack_gqa does: no repeated keys, and sdpa's fused CPU kernel takes 4-D input
        q = qkv[:, :nh].transpose(0, 1).reshape(1, nkv, nh // nkv * n, hd)
        k, v = kv[None, :nkv, : start + n], kv[None, nkv:, : start + n]
        if kv.dtype in (torch.bfloat16, torch.float16):
            out = row_exact_attention(q, k, v, mask, self.scale)
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=self.scale)  # (1, nkv, g n, hd)
        return out.view(nh, n, hd).transpose(0, 1).reshape(n, nh * hd)

    def reserve(self, n: int) -> None:
        """Room for n positions: keys then values (layers, 2 nkv, capacity, hd), RoPE tables (capacity, hd),
        reallocated at double the size when full (the cached positions [0, length) are copied over). ``forward`` and
        a pass over this model's own cache reserve what they write; a caller writing other caches sized from this
        one (``layers`` with a stack) reserves first."""
        if n <= self.capacity:
            return
        cap, embed = max(n, 2 * self.capacity, FIRST_CAPACITY), self.w.embed
        kv = embed.new_empty(len(self.w.blocks), 2 * self.nkv, cap, self.hd)  # a slot is written before it is read
        if self.capacity:
            kv[..., : self.length, :] = self.kv[..., : self.length, :]
        if self.features is not None:
            self.features = torch.cat([self.features, self.features.new_zeros(cap - self.capacity, self.features.shape[1])])
        self.kv, self.capacity = kv, cap
        self._own = self._own_c = None  # built again over the new cache
        self.cols = torch.arange(cap, device=embed.device)
        self.cos, self.sin = rope_for(self.rotary, embed, self.cols)

