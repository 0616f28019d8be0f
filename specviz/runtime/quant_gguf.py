"""A GGUF's tensors as ``quant.QuantMatrix`` views of the file (memory-mapped, no float copy), and a Gemma-3 model
that runs on them through ``lean_gemma.LeanGemma3``.

The header is read here directly (GGUF v2/v3: metadata, then tensor infos, then aligned data): the ``gguf`` package's
reader builds a numpy view per metadata item, and a 262,144-token vocabulary made it take 30-90 s; skipping the
vocabulary's strings takes well under a second. The model returned is
``gguf_shell.QuantGemma`` (not transformers' Gemma3ForCausalLM: importing its modelling stack alone held about 100 MB
resident), one zero-stride placeholder as its tied embedding (so its device reads as the CPU and its vocabulary size
is right); its weights are ``model.quantized`` (``lean_gemma.Weights`` of ``QuantLinear`` matrices), which the lean
forward runs: every pass goes through it.

The norms' weights are used as the file stores them: llama.cpp's converter writes Gemma's (1 + w), which is the
scale the lean forward multiplies by (transformers subtracts 1 on load and adds it back in float32, which can differ
by one rounding).
"""
from __future__ import annotations

import mmap
import os
import struct
from pathlib import Path

import numpy as np
import torch

from . import quant

GGUF_TYPES = {0: "F32", 1: "F16", 6: "Q5_0", 8: "Q8_0", 12: "Q4_K", 14: "Q6_K"}  # those read here, by GGML id
_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}


class Header:
    """A GGUF's metadata (scalars and short arrays; the vocabulary's long arrays are skipped: ``skipped`` names
    them) and its tensors' (type id, shape (ne0, ne1, ...), absolute byte offset)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        with open(self.path, "rb") as f:
            if os.fstat(f.fileno()).st_size < 24:
                raise ValueError(f"{self.path.name} is not a GGUF file (shorter than a GGUF header)")
            self.buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        try:
            self._read()
        except (struct.error, ValueError, UnicodeDecodeError, OverflowError) as e:
            raise ValueError(f"{self.path.name} is not a readable GGUF file ({e})") from e
        finally:
            self.buf.close()

    def _read(self) -> None:
        if self.buf[:4] != b"GGUF":
            raise ValueError("no GGUF magic")
        version, n_tensors, n_kv = struct.unpack_from("<IQQ", self.buf, 4)
        if version not in (2, 3):
            raise ValueError(f"GGUF version {version}; versions 2 and 3 are read")
        self.at, self.fields, self.skipped, self.tensors = 24, {}, [], {}
        for _ in range(n_kv):
            key = self._string()
            kind = self._u32()
            value = self._value(kind, key)
            if value is not None:
                self.fields[key] = value
        infos = []
        for _ in range(n_tensors):
            name, dims = self._string(), self._u32()
            shape = struct.unpack_from(f"<{dims}Q", self.buf, self.at)
            self.at += 8 * dims
            ggml_type, offset = struct.unpack_from("<IQ", self.buf, self.at)
            self.at += 12
            infos.append((name, ggml_type, tuple(int(s) for s in shape), offset))
        align = int(self.fields.get("general.alignment", 32))
        start = (self.at + align - 1) // align * align
        self.tensors = {name: (t, shape, start + offset) for name, t, shape, offset in infos}

    def _u32(self) -> int:
        (v,) = struct.unpack_from("<I", self.buf, self.at)
        self.at += 4
        return v

    def _string(self) -> str:
        (n,) = struct.unpack_from("<Q", self.buf, self.at)
        s = self.buf[self.at + 8: self.at + 8 + n]
        self.at += 8 + n
        return s.decode("utf-8", "replace")

    def _value(self, kind: int, key: str):
        if kind == 8:
            return self._string()
        if kind in _SCALARS:
            fmt = "<" + _SCALARS[kind]
            (v,) = struct.unpack_from(fmt, self.buf, self.at)
            self.at += struct.calcsize(fmt)
            return v
        if kind != 9:
            raise ValueError(f"metadata {key!r} has an unknown type {kind}")
        item, n = struct.unpack_from("<IQ", self.buf, self.at)
        self.at += 12
        if item in _SCALARS and item != 7:
            size = struct.calcsize("<" + _SCALARS[item])
            values = np.frombuffer(self.buf, dtype="<" + _SCALARS[item], count=n, offset=self.at)
            self.at += size * n
            if n <= 4096:
                return values.tolist()
        else:
            for _ in range(n):
                self._value(item, key)
            if n <= 4096:
                return None  # short arrays of strings are not needed here
        self.skipped.append(key)
        return None


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
