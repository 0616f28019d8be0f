"""A Gemma-3 GGUF as shipped, decoded by specviz's own C stack from numpy (no torch): one sequence, the interface of
``llamacpp_seq.Sequence`` that ``specviz.slim`` drives (``decode`` appends tokens and returns every row's logits,
``crop`` rolls back), so the slim decoder runs Gemma-3 on the default install's compiler alone.

The file is memory-mapped and its matrices stay its bytes (the tied head is the embedding table); every pass is one
call of ``stack.c``'s ``sv_gemma_layers`` on 8-bit activations (AVX-512 VNNI: where the CPU lacks it, the file is
refused in words and the torch forward or llama.cpp's is the way). The model's config is the one transformers built
from the file (``gguf.config``'s cache: layer kinds, RoPE bases, window, attention scale), read as plain JSON; the
RoPE tables are computed here in float64 and rounded to float32. The arithmetic is that of ``lean_gemma`` on the
C stack, so a row's logits are the same floats whatever other rows share its pass.
"""
from __future__ import annotations

import ctypes
import json
import math
import mmap
import os
import time
import weakref
from pathlib import Path

import numpy as np

from .cpus import StallWatch, usable_cpus
from .gguf_header import BLOCKS, GGUF_TYPES, Header
from .native import build
from .native.build import need

FIRST_CAPACITY = 256
MAX_TAPS = 8  # layers a pass can keep the output of (stack.c's SV_MAX_TAPS)
SLAB = 4096  # rows of a matrix regrouped at a time (whole groups of 16)
STALL, STALLS = 4.0, 3  # a pass this many times its fastest, this many times: one thread for a while


class Weights:
    """The file's matrices as the C structs point at them (kept alive here), its norms as float32 vectors."""

    def __init__(self, path: Path, config: dict):
        self.header, self.map = Header(path), np.memmap(path, dtype=np.uint8, mode="r")
        self.fd = os.open(path, os.O_RDONLY)  # the norms and the embedding rows are read with pread (not mapped)
        weakref.finalize(self, os.close, self.fd)
        self.keep: list = []
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as self.source:
            self._read(config)
        del self.source

    def _read(self, config: dict) -> None:
        d, nh, nkv, hd, inter = (config[k] for k in ("hidden_size", "num_attention_heads", "num_key_value_heads",
                                                     "head_dim", "intermediate_size"))
        need("output.weight" not in self.header.tensors, "this Gemma-3 GGUF has an untied output matrix; the C "
                                                          "stack reads tied ones")
        width = (nh + 2 * nkv) * hd
        layers = (build.GLayer * len(config["layer_types"]))()
        for i, (s, kind) in enumerate(zip(layers, config["layer_types"])):
            b = f"blk.{i}."
            for field, names, rows, cols in (("qkv", ("attn_q", "attn_k", "attn_v"), width, d),
                                             ("o", ("attn_output",), d, nh * hd),
                                             ("gu", ("ffn_gate", "ffn_up"), 2 * inter, d), ("down", ("ffn_down",), d, inter)):
                setattr(s, field, self.parts([b + n + ".weight" for n in names], rows, cols))
                setattr(s, "n" + field, len(names))
            for field, name, size in (("ln_in", "attn_norm", d), ("q_norm", "attn_q_norm", hd),
                                      ("k_norm", "attn_k_norm", hd), ("ln_post_attn", "post_attention_norm", d),
                                      ("ln_pre_mlp", "ffn_norm", d), ("ln_post_mlp", "post_ffw_norm", d)):
                setattr(s, field, self.vector(b + name + ".weight", size).ctypes.data)
            s.sliding = int(kind == "sliding_attention")
        self.layers = layers
        self.embed_kind, embed = self.matrix("token_embd.weight", None, d)
        self.vocab, self.embed_row_bytes = embed.shape
        self.embed_offset = self.header.tensors["token_embd.weight"][2]
        self.head = self.parts(["token_embd.weight"], self.vocab, d)
        self.norm = self.vector("output_norm.weight", d)

    def matrix(self, name: str, rows: int | None, cols: int) -> tuple[str, np.ndarray]:
        """(type, its bytes as (rows, row bytes)), checked: a type the 8-bit kernels read, these rows and columns."""
        need(name in self.header.tensors, f"{self.header.path.name} has no tensor {name!r}")
        t, shape, offset = self.header.tensors[name]
        kind = GGUF_TYPES.get(t)
        need(kind in build.INT8_TYPES, f"{name} is stored as GGML type {kind or t}; the C stack reads "
                                        f"{', '.join(build.INT8_TYPES)}")
        _, block, size = BLOCKS[kind]
        need(len(shape) == 2 and shape[0] == cols and (rows is None or shape[1] == rows) and cols % 64 == 0,
              f"{name} is {tuple(reversed(shape))}, not ({rows if rows is not None else 'rows'}, {cols}) of whole "
              f"chunks of 64")
        row_bytes = cols // block * size
        data = self.map[offset: offset + shape[1] * row_bytes]
        need(data.size == shape[1] * row_bytes, f"{name} runs past the end of the file")
        return kind, data.reshape(shape[1], row_bytes)

    def parts(self, names: list[str], rows: int, cols: int):
        """A QMat array of these matrices side by side (their rows adding to ``rows``), each regrouped by 16 rows
        where its type has that layout."""
        mats = [self.matrix(n, None, cols) for n in names]
        need(sum(m.shape[0] for _, m in mats) == rows, f"{', '.join(names)} hold "
                                                        f"{sum(m.shape[0] for _, m in mats)} rows, not {rows}")
        arr = (build.QMat * len(mats))(*[self.regrouped(n, cols) or build.QMat(m.ctypes.data, BLOCKS[kind][0],
                                                                                m.shape[0])
                                         for n, (kind, m) in zip(names, mats)])
        self.keep.append(arr)
        return ctypes.addressof(arr)

    def regrouped(self, name: str, cols: int):
        """The matrix regrouped by 16 rows (``build.REGROUPED``: Q5_0, Q8_0, Q4_K and Q6_K, the same weights read 16
        rows a vector operation) as a QMat, or None where its type has no such layout or its rows are not whole groups
        of 16. Read a slab at a time through the file mapping of its own that __init__ closes, each slab's pages given
        back once read, so the file's bytes and their regrouped copy are never both resident."""
        t, shape, offset = self.header.tensors[name]
        kind = GGUF_TYPES.get(t)
        if kind not in build.REGROUPED or shape[1] % 16 or shape[0] != cols or cols % build.REGROUPED[kind][1]:
            return None
        rtype, block, size, _ = build.REGROUPED[kind]
        rows, row_bytes, page = shape[1], cols // block * size, mmap.PAGESIZE
        out = np.empty((rows // 16, build.regrouped_bytes(kind, 16, cols)), dtype=np.uint8)  # a group of 16 rows a row
        for r0 in range(0, rows, SLAB):
            r1 = min(rows, r0 + SLAB)
            src = np.frombuffer(self.source, dtype=np.uint8, count=(r1 - r0) * row_bytes, offset=offset + r0 * row_bytes)
            build.regroup(kind, src.ctypes.data, r1 - r0, cols, out[r0 // 16:].ctypes.data)
            del src
            lo, hi = (offset + r0 * row_bytes) // page * page, (offset + r1 * row_bytes) // page * page
            if hi > lo:
                self.source.madvise(mmap.MADV_DONTNEED, lo, hi - lo)
        self.keep.append(out)
        return build.QMat(out.ctypes.data, rtype, rows)

    def embed_rows(self, ids: np.ndarray) -> np.ndarray:
        """Rows ``ids`` (n,) of the embedding table as the file stores them, (n, row bytes) uint8: read with pread, a
        run of consecutive ids at a time, so a lookup maps no page of the file (through the mapping the kernel maps
        the pages around each row looked up, 64 KB or a large folio, and a long run's lookups held ever more of the
        table resident)."""
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        need(len(ids) == 0 or (int(ids.min()) >= 0 and int(ids.max()) < self.vocab),
             f"embedding ids must lie in [0, {self.vocab})")
        out, rb = np.empty((len(ids), self.embed_row_bytes), dtype=np.uint8), self.embed_row_bytes
        order = np.argsort(ids, kind="stable")
        ranked = ids[order]
        starts = np.flatnonzero(np.r_[True, np.diff(ranked) != 1]) if len(ids) else np.zeros(0, np.int64)
        for a, b in zip(starts, np.r_[starts[1:], len(ids)]):
            first, count = int(ranked[a]), int(b - a)
            data = os.pread(self.fd, count * rb, self.embed_offset + first * rb)
            need(len(data) == count * rb, f"{self.header.path.name} ended inside its embedding table")
            out[order[a:b]] = np.frombuffer(data, dtype=np.uint8).reshape(count, rb)
        return out

    def vector(self, name: str, size: int) -> np.ndarray:
        need(name in self.header.tensors, f"{self.header.path.name} has no tensor {name!r}")
        t, shape, offset = self.header.tensors[name]
        need(t == 0 and tuple(shape) == (size,), f"{name} must be an F32 vector of {size}, not type {t} {shape}")
        data = os.pread(self.fd, 4 * size, offset)  # not through the mapping: a page touched there maps its neighbours
        need(len(data) == 4 * size, f"{name} runs past the end of the file")
        v = np.frombuffer(data, dtype=np.float32).copy()
        self.keep.append(v)
        return v


def rope_tables(base: float, hd: int, positions: int) -> tuple[np.ndarray, np.ndarray]:
    """Default RoPE's (positions, hd) cos and signed sin (-sin on the first half) as the C stack reads them."""
    inv = 1.0 / base ** (np.arange(0, hd, 2, dtype=np.float64) / hd)
    angles = np.outer(np.arange(positions, dtype=np.float64), inv)
    cos, sin = np.cos(angles), np.sin(angles)
    return (np.ascontiguousarray(np.concatenate([cos, cos], 1), dtype=np.float32),
            np.ascontiguousarray(np.concatenate([-sin, sin], 1), dtype=np.float32))


def check_config(config: dict) -> None:
    """What the C stack computes: Gemma-3 text layers of GELU-tanh, default RoPE, no soft-capping, causal."""
    rope = config.get("rope_parameters") or {}
    need(config.get("model_type") == "gemma3_text", f"the C stack runs Gemma-3 text models, not "
                                                     f"{config.get('model_type')!r}")
    need(config.get("hidden_activation") == "gelu_pytorch_tanh" and not config.get("final_logit_softcapping")
          and not config.get("attn_logit_softcapping") and not config.get("use_bidirectional_attention"),
          "this Gemma-3's activation, soft-capping or attention is not what the C stack computes")
    need(set(config["layer_types"]) <= set(rope) <= {"sliding_attention", "full_attention"} and
          all(rope[k].get("rope_type", "default") == "default" for k in rope),
          "this Gemma-3's RoPE is scaled or its layer kinds unknown: the C stack computes default RoPE")
    need(config["head_dim"] <= build.MAX_HEAD_DIM, f"a head of {config['head_dim']} is over the C stack's "
                                                    f"{build.MAX_HEAD_DIM}")


class GemmaSequence:
    """One sequence of a Gemma-3 GGUF on the C stack: ``vocab``, ``limit`` (positions), ``decode``, ``crop``."""

    forward_name = "gemma-c"  # as a trace names the forward its target ran on

    def __init__(self, path, config: dict, *, threads: int | None = None, limit: int | None = None,
                 weights: Weights | None = None, taps: tuple[int, ...] = ()):
        """``weights``: another sequence's of the same file and config (``twin``), shared instead of read again.
        ``taps``: layers (ascending) whose output, the residual stream after them, each pass keeps too (``tapped``:
        what a feature draft reading more than the last layer is trained on)."""
        so = build.lib()
        need(so is not None, f"the C stack is not built here: {build.unavailable()}")
        need(bool(so.sv_qlinear8_available()), "the C stack's Gemma-3 pass needs AVX-512 VNNI, which this CPU lacks")
        check_config(config)
        self.so, self.path, self.config = so, Path(path), config
        need(weights is None or isinstance(weights, Weights), "weights must be another GemmaSequence's (twin)")
        self.w = Weights(self.path, config) if weights is None else weights
        self.vocab, self.d = self.w.vocab, config["hidden_size"]
        nh, nkv, hd = config["num_attention_heads"], config["num_key_value_heads"], config["head_dim"]
        self.nkv, self.hd, self.window = nkv, hd, int(config["sliding_window"])
        self.dims = build.Dims(self.d, nh, nkv, hd, config["intermediate_size"], hd, float(config["rms_norm_eps"]),
                               float(config["query_pre_attn_scalar"]) ** -0.5)
        self.scale = np.float32(math.sqrt(self.d))
        self.bases = {k: float(v["rope_theta"]) for k, v in config["rope_parameters"].items()}
        self.limit = int(limit or config.get("max_position_embeddings") or 8192)
        self.asked_threads = threads  # as given (None: the usable CPUs), for twins: self.threads may fall to one
        self.threads = int(threads or usable_cpus())
        need(min(self.limit, self.threads) > 0, "limit and threads must be positive")
        layers = len(config["layer_types"])
        need(isinstance(taps, (tuple, list)) and len(taps) <= MAX_TAPS and all(
            isinstance(t, (int, np.integer)) and 0 <= t < layers for t in taps) and list(taps) == sorted(set(taps)),
             f"taps must be at most {MAX_TAPS} distinct layers in [0, {layers}), ascending; got {taps!r}")
        self.taps = np.asarray(taps, dtype=np.int32)
        self.length = self.capacity = 0
        self.head_seconds: float | None = None  # the last pass's head time (a round's record splits it out)
        self.stalls = StallWatch(STALL, STALLS)
        self._reserve(min(self.limit, FIRST_CAPACITY))

    @classmethod
    def from_gguf(cls, path, **kw) -> GemmaSequence:
        """The file's sequence, its config from the cache ``gguf.described`` keeps (built once, with transformers)."""
        from .gguf import described

        path = Path(path)
        config = json.loads((described(path.parent, path.name) / "config.json").read_text())
        return cls(path, config, **kw)

    def twin(self, threads: int | None = None) -> GemmaSequence:
        """An empty sequence of the same file on the same weights (nothing read or copied again): one per concurrent
        run, each with its own cache."""
        return GemmaSequence(self.path, self.config, threads=threads or self.asked_threads, limit=self.limit, weights=self.w,
                             taps=tuple(int(t) for t in self.taps))

    def features(self, end: int | None = None) -> np.ndarray:
        """The final normed hidden state at each position held, (length, d) (the head's input: a feature draft's), or
        at the first ``end`` of them."""
        end = self.length if end is None else end
        need(0 <= end <= self.length, f"this sequence holds {self.length} positions; features of {end} asked")
        return self.hidden[:end]

    def tapped(self, end: int | None = None) -> np.ndarray:
        """The residual stream after each of ``taps``' layers at each position held, (length, len(taps), d), or at
        the first ``end`` of them."""
        end = self.length if end is None else end
        need(0 <= end <= self.length, f"this sequence holds {self.length} positions; taps of {end} asked")
        return self.kept_taps[:end]

    def get_seq_length(self) -> int:
        return self.length

    def crop(self, keep: int) -> None:
        need(keep >= 0, f"a sequence keeps 0 or more positions, not {keep}")
        self.length = min(self.length, keep)

    def _reserve(self, n: int) -> None:
        need(n <= self.limit, f"this sequence holds {self.limit} positions; {n} asked")
        if n <= self.capacity:
            return
        cap = min(self.limit, max(n, 2 * self.capacity, FIRST_CAPACITY))
        kv = np.zeros((len(self.w.layers), 2 * self.nkv, cap, self.hd), dtype=np.float32)
        if self.capacity:
            kv[:, :, : self.length] = self.kv[:, :, : self.length]
        hidden = np.zeros((cap, self.d), dtype=np.float32)
        kept = np.zeros((cap, len(self.taps), self.d), dtype=np.float32)
        if self.capacity:
            hidden[: self.length] = self.hidden[: self.length]
            kept[: self.length] = self.kept_taps[: self.length]
        self.kv, self.hidden, self.kept_taps, self.capacity = kv, hidden, kept, cap
        self.caches = (ctypes.c_void_p * len(kv))(*[kv[i].ctypes.data for i in range(len(kv))])
        self.rope = {k: rope_tables(b, self.hd, cap) for k, b in self.bases.items()}

    def decode(self, tokens, head_rows: int | None = None) -> np.ndarray:
        """Append tokens (n,); the logits after each, (n, V) float32, from one pass of the C stack. ``head_rows``: the
        logits of only the last that many rows, at least one (the features are every row's)."""
        tokens = np.asarray(tokens).reshape(-1)
        need(tokens.dtype.kind in "iu", f"tokens must be integer ids, got {tokens.dtype}")
        n, start = len(tokens), self.length
        if n == 0:
            return np.zeros((0, self.vocab), dtype=np.float32)
        rows = n if head_rows is None else head_rows
        need(isinstance(rows, (int, np.integer)) and 1 <= rows <= n, f"head_rows must be 1..{n}, got {head_rows!r}")
        need(int(tokens.min()) >= 0 and int(tokens.max()) < self.vocab,
              f"token ids must lie in [0, {self.vocab}), got {int(tokens.min())}..{int(tokens.max())}")
        self._reserve(start + n)
        x = self.embed(tokens.astype(np.int64))
        h, logits = self.hidden[start: start + n], np.empty((rows, self.vocab), np.float32)
        head = build.GHead(self.w.head, self.w.norm.ctypes.data, 1, self.vocab, n - rows, h.ctypes.data,
                           logits.ctypes.data, 0.0, self.taps.ctypes.data, len(self.taps),
                           self.kept_taps[start: start + n].ctypes.data)
        full = self.rope.get("full_attention") or self.rope["sliding_attention"]
        local = self.rope.get("sliding_attention") or full
        t0 = time.perf_counter()
        done = self.so.sv_gemma_layers(ctypes.byref(self.dims), self.w.layers, self.caches, len(self.w.layers),
                                       x.ctypes.data, n, start, self.capacity, full[0].ctypes.data, full[1].ctypes.data,
                                       local[0].ctypes.data, local[1].ctypes.data, self.window, ctypes.byref(head),
                                       self.threads)
        need(done != -2, "the C stack refused this Gemma-3's shapes or types")
        if done != 0:
            raise MemoryError("the C stack could not allocate its scratch memory")
        self._watch(n, time.perf_counter() - t0)
        self.length, self.head_seconds = start + n, head.seconds  # the final norm's and the head's share of the pass
        return logits

    def embed(self, ids: np.ndarray) -> np.ndarray:
        """The input embeddings of ids (n,): the file's rows times sqrt(d), (n, d) float32."""
        out, rows = np.empty((len(ids), self.d), dtype=np.float32), self.w.embed_rows(ids)
        at = np.arange(len(ids), dtype=np.int64)
        done = self.so.sv_qrows(rows.ctypes.data, BLOCKS[self.w.embed_kind][0], len(ids), self.d, at.ctypes.data,
                                len(ids), out.ctypes.data)
        need(done == 0, "the C lookup refused the embedding table")
        return out * self.scale

    def _watch(self, rows: int, seconds: float) -> None:
        """One thread once passes stall (threads spinning at barriers while one waits for a core held by other work),
        the threads asked for again some passes later (``StallWatch.threads``)."""
        self.threads = self.stalls.threads(rows, seconds, self.threads, int(self.asked_threads or usable_cpus()))
