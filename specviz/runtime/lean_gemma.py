"""A lean forward pass for Gemma-3 text models (Gemma3ForCausalLM), behind the same cache interface as
``lean_llama.LeanLlama``: the weights re-laid out once (q/k/v and gate/up merged, stored transposed), a pre-allocated
key/value cache written in place (rollback = moving the write position), several-row matmuls through the packed
oneDNN path (``packed_linear``): a verify pass of k + 1 rows reads every weight once, as a one-row pass does.

Gemma-3 differs from Llama in ways each handled here as transformers' ``modeling_gemma3`` computes it: embeddings
scaled by sqrt(hidden size); four RMSNorms a layer (input, after attention, before and after the MLP), each scaling
by (1 + w) in float32; RMSNorms of the queries and keys over the head dimension, before RoPE; attention scaled by
query_pre_attn_scalar^-1/2; a GELU-tanh MLP; layers of two kinds, "sliding_attention" (a window of the last
``sliding_window`` positions, RoPE base ``rope_parameters["sliding_attention"]``) and "full_attention" (all of them,
its own RoPE base). The logits match transformers' to float32 rounding (tests/runtime/test_lean_gemma.py).

A model loaded quantized from a GGUF (``quant_gguf.gemma_model``) carries its weights as ``model.quantized``: the
same ``Weights`` with ``quant.QuantLinear`` matrices (the embedding and the tied head one quantized table), which
``lean_common.linear`` computes on in C without a float copy.

Supported: ``model_type == "gemma3_text"`` with GELU-tanh MLPs, default RoPE, no logit soft-capping, causal attention,
on one device, not instrumented. An early exit ("gemma@4", ``specviz.drafts.early_exit``) runs here on its target's
re-laid-out layers, embedding and head (no copy; its own cache), or on a pruned head (``pruned_head``); an exit with
an adapter layer runs on transformers' forward.
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from . import heap, quant
from .lean_common import instrumented, linear, rope_, rope_tables
from .lean_llama import FIRST_CAPACITY
from .native import gemma as native_gemma
from .native.library import MAX_HEAD_DIM, Dims
from .pruned_head import PrunedHead, scatter
from .timing import head_clock

KINDS = ("sliding_attention", "full_attention")


def supports(model) -> bool:
    cfg = getattr(model, "config", None)
    rope = getattr(cfg, "rope_parameters", None) or {}
    devices = set((getattr(model, "hf_device_map", None) or {}).values())
    return (getattr(cfg, "model_type", None) == "gemma3_text" and cfg.hidden_activation == "gelu_pytorch_tanh"
            and not cfg.final_logit_softcapping and not cfg.attn_logit_softcapping
            and not getattr(cfg, "use_bidirectional_attention", False) and set(cfg.layer_types) <= set(KINDS)
            and all((rope.get(kind) or {}).get("rope_type", "default") == "default" for kind in KINDS)
            and len(devices) <= 1 and getattr(model, "exit_adapter", None) is None and not instrumented(model))


@dataclass(frozen=True)
class Block:
    """One Gemma-3 layer's weights: matrices transposed (``x @ W_t``), norms as their (1 + w) scales."""
    ln_in: torch.Tensor
    qkv_t: torch.Tensor
    q_norm: torch.Tensor
    k_norm: torch.Tensor
    o_t: torch.Tensor
    ln_post_attn: torch.Tensor
    ln_pre_mlp: torch.Tensor
    gu_t: torch.Tensor
    down_t: torch.Tensor
    ln_post_mlp: torch.Tensor
    sliding: bool


@dataclass(frozen=True)
class Weights:
    embed: torch.Tensor | quant.QuantMatrix  # (V, d), unscaled
    scale: torch.Tensor  # sqrt(d) in the model's dtype, as Gemma3TextScaledWordEmbedding multiplies
    blocks: tuple[Block, ...]
    norm: torch.Tensor
    head_t: torch.Tensor | quant.QuantLinear  # (d, V), or (d, V') for a pruned head; quantized: the embedding's rows
    head_ids: torch.Tensor | None = None  # a pruned head's token ids: its logits go there, -inf elsewhere
    vocab: int = 0


_WEIGHTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def gemma_norm(x: torch.Tensor, scale: torch.Tensor, eps: float) -> torch.Tensor:
    """Gemma3RMSNorm: normalised in float32, times (1 + w) in float32, cast back."""
    out = F.rms_norm(x.float(), scale.shape, scale, eps)
    return out if x.dtype == torch.float32 else out.to(x.dtype)


@torch.no_grad()
def lean_weights(model) -> Weights:
    source = getattr(model, "exit_of", None)
    if source is not None:  # an early exit: the target's first layers, laid out once for both
        base, head = lean_weights(source), model.get_output_embeddings()
        blocks = base.blocks[: len(model.model.layers)]
        if isinstance(head, PrunedHead) and isinstance(base.embed, quant.QuantMatrix):  # its rows of the table
            rows = quant.QuantLinear((quant.select_rows(base.embed, head.ids),))
            return Weights(base.embed, base.scale, blocks, base.norm, rows, head.ids, head.vocab_size)
        if isinstance(head, PrunedHead):
            return Weights(base.embed, base.scale, blocks, base.norm, head.rows_t, head.ids, head.vocab_size)
        return Weights(base.embed, base.scale, blocks, base.norm, base.head_t)
    if getattr(model, "quantized", None) is not None:  # a GGUF's own quantized weights (quant_gguf)
        return model.quantized
    fingerprint = tuple((p.data_ptr(), p._version, p.dtype) for p in model.parameters())
    hit = _WEIGHTS.get(model)
    if hit is None or hit[0] != fingerprint:
        hit = _WEIGHTS[model] = (fingerprint, _relayout(model))
    return hit[1]


def _one_plus(norm) -> torch.Tensor:
    return 1.0 + norm.weight.detach().float()


def _relayout(model) -> Weights:
    cfg, inner = model.config, model.model
    blocks = []
    for layer, kind in zip(inner.layers, cfg.layer_types):
        a, m = layer.self_attn, layer.mlp
        blocks.append(Block(
            _one_plus(layer.input_layernorm), torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight]).t()
            .contiguous(), _one_plus(a.q_norm), _one_plus(a.k_norm), a.o_proj.weight.t().contiguous(),
            _one_plus(layer.post_attention_layernorm), _one_plus(layer.pre_feedforward_layernorm),
            torch.cat([m.gate_proj.weight, m.up_proj.weight]).t().contiguous(), m.down_proj.weight.t().contiguous(),
            _one_plus(layer.post_feedforward_layernorm), kind == "sliding_attention"))
    embed = inner.embed_tokens.weight.detach()
    scale = torch.tensor(cfg.hidden_size ** 0.5, dtype=embed.dtype)
    head_t = model.get_output_embeddings().weight.detach().t().contiguous()
    return Weights(embed, scale, tuple(blocks), _one_plus(inner.norm), head_t)


def in_c(w: Weights, hd: int) -> bool:
    """Whether a pass of these weights runs as one C call (``native.gemma``): quantized, every matrix of a type and
    width the 8-bit kernels read, 8-bit activations chosen (``quant.activations``) and built here."""
    mats = [m for blk in w.blocks for m in (blk.qkv_t, blk.o_t, blk.gu_t, blk.down_t)] + [w.head_t]
    return (isinstance(w.embed, quant.QuantMatrix) and all(isinstance(m, quant.QuantLinear) and m.int8 for m in mats)
            and hd <= MAX_HEAD_DIM and native_gemma.available() and quant.activations() == "int8")


def embed(w: Weights, ids: torch.Tensor) -> torch.Tensor:
    """The embedding rows of ids (n,), unscaled: looked up in C where the table is quantized."""
    return quant.rows(w.embed, ids) if isinstance(w.embed, quant.QuantMatrix) else F.embedding(ids, w.embed)


def like(w: Weights) -> torch.Tensor:
    """A tensor of the forward's dtype and device (caches and RoPE tables are made like it)."""
    return w.embed if isinstance(w.embed, torch.Tensor) else w.norm


class TrimWhenFreed:
    """Hands the freed C heap back to the system when it is collected. Held as an object's last attribute, it is
    collected after that object's other attributes (CPython releases an instance's attributes in the order they were
    first set): after a lean forward's KV cache, whose ~10 MB (and a run's freed logits) glibc would otherwise keep
    resident (``heap``)."""

    def __del__(self):
        heap.give_back_freed_memory()


class LeanGemma3:
    """A Gemma-3 forward with its own pre-allocated KV cache, used like ``LeanLlama`` by CachedLM: ``forward``
    appends tokens and returns their logits, ``crop`` moves the write position back."""

    def __init__(self, model):
        cfg = model.config
        self.w, self.rotary = lean_weights(model), model.model.rotary_emb
        self.nh, self.nkv, self.hd = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        self.eps, self.scale, self.inter = cfg.rms_norm_eps, cfg.query_pre_attn_scalar ** -0.5, cfg.intermediate_size
        self.window = cfg.sliding_window
        self.dims = Dims(cfg.hidden_size, self.nh, self.nkv, self.hd, self.inter, self.hd, self.eps, self.scale)
        self.kinds = {kind == "sliding_attention": kind for kind in cfg.layer_types}  # only the kinds it has
        self.length = self.capacity = 0
        self._reserve(FIRST_CAPACITY)
        self.trim_when_freed = TrimWhenFreed()  # the last attribute: freed after the cache (see TrimWhenFreed)

    def get_seq_length(self) -> int:
        return self.length

    def in_c(self) -> bool:
        """Whether its passes run as one C call each (``in_c`` of its weights)."""
        return in_c(self.w, self.hd)

    def crop(self, keep: int) -> None:
        self.length = min(self.length, keep)

    def keep(self, start: int, slots: list[int]) -> None:
        raise ValueError("a Gemma-3 target has sliding-window layers: it cannot score a token tree")

    @torch.inference_mode()
    def forward(self, ids: torch.Tensor, positions=None, visible=None) -> torch.Tensor:
        if positions is not None or visible is not None:
            raise ValueError("a Gemma-3 target has sliding-window layers: it cannot score a token tree")
        start, end = self.length, self.length + ids.shape[-1]
        self._reserve(end)
        x = embed(self.w, ids) * self.w.scale
        if in_c(self.w, self.hd):  # every layer and the head in one C call
            logits = native_gemma.layers(self.w, self.dims, x, self.kv, start, self.rope, self.window)
            self.length = end
            return logits if self.w.head_ids is None else scatter(logits, self.w.head_ids, self.w.vocab)
        masks = self._masks(start, end)
        for blk, kv in zip(self.w.blocks, self.kv):
            x = self._layer(x, blk, kv, start, masks[blk.sliding])
        self.length = end
        with head_clock.timing():
            logits = linear(gemma_norm(x, self.w.norm, self.eps), self.w.head_t, None)
            return logits if self.w.head_ids is None else scatter(logits, self.w.head_ids, self.w.vocab)

    def _masks(self, start: int, end: int) -> dict:
        """{sliding: mask} for the new rows (g n, end), packed as ``_attend`` packs the query heads; None where a
        row sees every cached position (one new token within the window)."""
        g, n = self.nh // self.nkv, end - start
        rows, cols = self.cols[start:end, None], self.cols[None, :end]
        full = None if n == 1 else (cols <= rows).repeat(g, 1)
        if end <= self.window + 1 and n == 1:
            return {False: full, True: full}
        sliding = ((cols <= rows) & (cols > rows - self.window)).repeat(g, 1)
        return {False: full, True: sliding}

    def _layer(self, x, blk: Block, kv, start: int, mask) -> torch.Tensor:
        h = gemma_norm(x, blk.ln_in, self.eps)
        attn = self._attend(linear(h, blk.qkv_t, None), blk, kv, start, mask)
        x = x + gemma_norm(linear(attn, blk.o_t, None), blk.ln_post_attn, self.eps)
        gate_up = linear(gemma_norm(x, blk.ln_pre_mlp, self.eps), blk.gu_t, None)
        mlp = F.gelu(gate_up[:, : self.inter], approximate="tanh") * gate_up[:, self.inter:]
        return x + gemma_norm(linear(mlp, blk.down_t, None), blk.ln_post_mlp, self.eps)

    def _attend(self, qkv, blk: Block, kv, start: int, mask) -> torch.Tensor:
        n, nh, nkv, hd = qkv.shape[0], self.nh, self.nkv, self.hd
        qkv = qkv.view(n, nh + 2 * nkv, hd)
        q = gemma_norm(qkv[:, :nh], blk.q_norm, self.eps)
        k = gemma_norm(qkv[:, nh: nh + nkv], blk.k_norm, self.eps)
        cos, sin = self.rope[blk.sliding]
        rope_(q, cos[start: start + n, None], sin[start: start + n, None])
        rope_(k, cos[start: start + n, None], sin[start: start + n, None])
        kv[:nkv, start: start + n] = k.transpose(0, 1)
        kv[nkv:, start: start + n] = qkv[:, nh + nkv:].transpose(0, 1)
        q = q.transpose(0, 1).reshape(1, nkv, nh // nkv * n, hd)
        keys, values = kv[None, :nkv, : start + n], kv[None, nkv:, : start + n]
        out = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, scale=self.scale)
        return out.view(nh, n, hd).transpose(0, 1).reshape(n, nh * hd)

    def _reserve(self, n: int) -> None:
        """Room for n positions: keys then values per layer, and each layer kind's RoPE tables."""
        if n <= self.capacity:
            return
        cap, embed = max(n, 2 * self.capacity, FIRST_CAPACITY), like(self.w)
        kv = embed.new_zeros(len(self.w.blocks), 2 * self.nkv, cap, self.hd)
        if self.capacity:
            kv[..., : self.length, :] = self.kv[..., : self.length, :]
        self.kv, self.capacity = kv, cap
        self.cols = torch.arange(cap, device=embed.device)
        with torch.inference_mode():  # a config of one kind only has no rotary for the other
            self.rope = {sliding: rope_tables(*self.rotary(embed, self.cols[None], kind))
                         for sliding, kind in self.kinds.items()}
