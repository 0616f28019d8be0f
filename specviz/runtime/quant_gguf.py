"""A GGUF's tensors as ``quant.QuantMatrix`` views of the file (memory-mapped, no float copy), and a Gemma-3 model
that runs on them through ``lean_gemma.LeanGemma3``.

The header is read by ``gguf_header`` (no torch). The model returned is
``gguf_shell.QuantGemma`` (not transformers' Gemma3ForCausalLM: importing its modelling stack alone held about 100 MB
resident), one zero-stride placeholder as its tied embedding (so its device reads as the CPU and its vocabulary size
is right); its weights are ``model.quantized`` (``lean_gemma.Weights`` of ``QuantLinear`` matrices), which the lean
forward runs: every pass goes through it.

The norms' weights are used as the file stores them: llama.cpp's converter writes Gemma's (1 + w), which is the
scale the lean forward multiplies by (transformers subtracts 1 on load and adds it back in float32, which can differ
by one rounding).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from . import quant
from .gguf_header import GGUF_TYPES, Header  # noqa: F401 (GGUF_TYPES: the types read, for callers)


class Tensors:
    """The GGUF's tensors over one copy-on-write memory map of the file (pages shared with the page cache)."""

    def __init__(self, path: Path):
        self.header = Header(path)
        self.map = np.memmap(path, dtype=np.uint8, mode="c")

    def matrix(self, name: str) -> quant.QuantMatrix:
        t, shape, offset = self._info(name)
        if len(shape) != 2:
            raise ValueError(f"{name} is not a matrix (shape {shape})")
        cols, rows = shape
        if t not in GGUF_TYPES:
            raise ValueError(f"{name} is stored as GGML type {t}, which is not read here (read: "
                             f"{', '.join(GGUF_TYPES.values())})")
        kind = GGUF_TYPES[t]
        size = rows * quant.row_bytes(kind, cols)
        data = torch.from_numpy(self.map[offset: offset + size].reshape(rows, -1))
        return quant.QuantMatrix(data, kind, rows, cols)

    def vector(self, name: str) -> torch.Tensor:
        """A float32 vector (a norm's weight), copied out of the map."""
        t, shape, offset = self._info(name)
        if t != 0 or len(shape) != 1:
            raise ValueError(f"{name} must be an F32 vector, not GGML type {t} of shape {shape}")
        return torch.from_numpy(self.map[offset: offset + 4 * shape[0]].view(np.float32).copy())

    def _info(self, name: str):
        if name not in self.header.tensors:
            raise ValueError(f"{self.header.path.name} has no tensor {name!r}")
        return self.header.tensors[name]


def gemma_weights(tensors: Tensors, config):
    """``lean_gemma.Weights`` over the file's quantized matrices: q, k, v side by side, gate and up side by side, the
    embedding and the LM head one tied matrix."""
    from .lean_gemma import Block, Weights

    blocks = []
    for i, kind in enumerate(config.layer_types):
        m, v = (lambda s, i=i: tensors.matrix(f"blk.{i}.{s}.weight")), \
            (lambda s, i=i: tensors.vector(f"blk.{i}.{s}.weight"))
        blocks.append(Block(
            v("attn_norm"), quant.QuantLinear((m("attn_q"), m("attn_k"), m("attn_v"))), v("attn_q_norm"),
            v("attn_k_norm"), quant.QuantLinear((m("attn_output"),)), v("post_attention_norm"), v("ffn_norm"),
            quant.QuantLinear((m("ffn_gate"), m("ffn_up"))), quant.QuantLinear((m("ffn_down"),)), v("post_ffw_norm"),
            kind == "sliding_attention"))
    if "output.weight" in tensors.header.tensors:
        raise ValueError("this Gemma-3 GGUF has an untied output matrix; the quantized forward reads tied ones")
    embed = tensors.matrix("token_embd.weight")
    scale = torch.tensor(config.hidden_size ** 0.5, dtype=torch.float32)
    return Weights(embed, scale, tuple(blocks), tensors.vector("output_norm.weight"), quant.QuantLinear((embed,)))


def gemma_model(path: Path, config):
    """A Gemma-3 causal LM for ``config`` (``gguf_shell.QuantGemma``: no transformers model, no float weights)
    running on the GGUF's quantized weights (``model.quantized``) through the lean forward."""
    from .gguf_shell import QuantGemma

    return QuantGemma(config, gemma_weights(Tensors(path), config), path).eval()


def resident_bytes(weights) -> int:
    """Bytes of the quantized matrices a forward streams (the tied table counted once)."""
    seen, total = set(), 0
    for blk in weights.blocks:
        for lin in (blk.qkv_t, blk.o_t, blk.gu_t, blk.down_t):
            for p in lin.parts:
                if id(p) not in seen:
                    seen.add(id(p))
                    total += p.nbytes
    return total + weights.embed.nbytes
