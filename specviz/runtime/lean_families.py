"""The decoder families the lean Llama forward (``lean_llama.LeanLlama``) runs, how each lays out a layer's weights,
and in words why a model cannot run there.

One block layout covers them: x + attention(RMSNorm(x)), then x + down(silu(gate) * up)(RMSNorm(x)), RoPE on the
queries and keys. What differs is where the weights sit and two steps of the attention:
- ``llama`` (SmolLM is one), ``mistral``, ``qwen2``: separate q/k/v and gate/up projections (Qwen2's q/k/v with biases);
- ``qwen3``: the same, and an RMSNorm of each query and key head over the head dimension before RoPE (``q_norm``,
  ``k_norm``; q/k/v biases only where ``attention_bias``);
- ``phi3``: q/k/v fused in ``qkv_proj`` and gate/up in ``gate_up_proj``, each already in the order the lean forward
  keeps them (queries, keys, values; gate, then up); RoPE on the first ``partial_rotary_factor`` of every head's
  dimensions (the rest passes through), as transformers' ``apply_rotary_pos_emb`` does where cos is narrower.
Not run here (``refusal`` says which): sliding windows, a RoPE whose frequencies change with the length ("dynamic",
Phi-3's "longrope"), activations other than SiLU, tensor-parallel slicing (``pretraining_tp``), several devices, a
forward that someone instruments. CachedLM runs such a model on transformers' forward instead.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .lean_common import instrumented

FAMILIES = ("llama", "mistral", "qwen2", "qwen3", "phi3")
LENGTH_DEPENDENT_ROPE = ("dynamic", "longrope")


def refusal(model) -> str | None:
    """Why ``LeanLlama`` cannot run this model exactly as transformers would, in words; None where it can."""
    cfg = getattr(model, "config", None)
    family = getattr(cfg, "model_type", None)
    if family not in FAMILIES:
        return f"model_type {family!r} is not one of the lean Llama layout's families {FAMILIES}"
    rope = (getattr(cfg, "rope_parameters", None) or {}).get("rope_type", "default")
    reasons = [
        (window(cfg) is not None, f"{family} with a sliding window ({window(cfg)}): the lean path attends to every "
                                  "position"),
        (getattr(cfg, "hidden_act", None) != "silu", f"activation {getattr(cfg, 'hidden_act', None)!r}, not silu"),
        (rope in LENGTH_DEPENDENT_ROPE, f"RoPE {rope!r}, whose frequencies change with the length (the lean path "
                                        "builds its tables once)"),
        (getattr(cfg, "pretraining_tp", 1) != 1, "pretraining_tp > 1 (sliced projections)"),
        (len(set((getattr(model, "hf_device_map", None) or {}).values())) > 1, "weights on several devices"),
        (not hasattr(getattr(model, "model", None), "rotary_emb"), "no model.rotary_emb to build RoPE tables from"),
    ]
    for refused, why in reasons:
        if refused:
            return why
    if instrumented(model):
        return "its forward is instrumented (a patched forward or hooks would be skipped)"
    return None


def window(cfg) -> int | None:
    """The sliding window a config turns on (Mistral's and Phi-3's ``sliding_window``; Qwen2's and Qwen3's only when
    ``use_sliding_window``)."""
    if getattr(cfg, "model_type", None) in ("qwen2", "qwen3") and not getattr(cfg, "use_sliding_window", False):
        return None
    return getattr(cfg, "sliding_window", None)


@dataclass(frozen=True)
class Block:
    """One decoder layer's weights, transposed: ``x @ W_t`` with x (n, d)."""
    ln1: torch.Tensor    # (d,)
    qkv_t: torch.Tensor  # (d, (nh + 2 nkv) hd): q, k, v projections side by side
    qkv_b: torch.Tensor | None
    o_t: torch.Tensor    # (nh hd, d)
    o_b: torch.Tensor | None
    ln2: torch.Tensor    # (d,)
    gu_t: torch.Tensor   # (d, 2 I): gate and up projections side by side
    gu_b: torch.Tensor | None
    down_t: torch.Tensor  # (I, d)
    down_b: torch.Tensor | None
    q_norm: torch.Tensor | None = None  # (hd,) Qwen3's RMSNorm of each query head, before RoPE
    k_norm: torch.Tensor | None = None  # (hd,) and of each key head


def _t(*linears) -> torch.Tensor:
    return torch.cat([m.weight for m in linears]).t().contiguous()


def _b(*linears) -> torch.Tensor | None:
    biases = [m.bias for m in linears]
    return None if any(b is None for b in biases) else torch.cat(biases).contiguous()


def layer_weights(layer) -> Block:
    """A decoder layer of any of ``FAMILIES`` re-laid out (read off its modules: fused or separate projections,
    per-head norms where it has them)."""
    a, m = layer.self_attn, layer.mlp
    qkv = (a.qkv_proj,) if hasattr(a, "qkv_proj") else (a.q_proj, a.k_proj, a.v_proj)
    gate_up = (m.gate_up_proj,) if hasattr(m, "gate_up_proj") else (m.gate_proj, m.up_proj)
    norms = [getattr(a, name, None) for name in ("q_norm", "k_norm")]
    q_norm, k_norm = (None, None) if None in norms else (norms[0].weight.detach(), norms[1].weight.detach())
    return Block(layer.input_layernorm.weight.detach(), _t(*qkv), _b(*qkv), _t(a.o_proj), _b(a.o_proj),
                 layer.post_attention_layernorm.weight.detach(), _t(*gate_up), _b(*gate_up), _t(m.down_proj),
                 _b(m.down_proj), q_norm, k_norm)
