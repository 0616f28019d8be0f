"""The forward pass run by llama.cpp (optional: ``pip install llama-cpp-python gguf``), behind the cache interface
``CachedLM`` uses: ``forward(ids)`` appends tokens and returns every row's logits, ``crop(keep)`` rolls back by
removing the sequence's positions from ``keep`` on in llama.cpp's KV cache, ``get_seq_length()``.

specviz keeps every decision and record: llama.cpp computes logits (and, for a feature draft, the final normed hidden
states: its "embeddings" with no pooling), the decoder samples, accepts and rolls back in torch as on any other
path. The weights are the model's own, written once to a GGUF (``gguf_write``: float32, no tokenizer). The KV cache
is float16, llama.cpp's own default (what llama-server and llama-bench run; on a 2-vCPU Xeon its one-token decode of
the bundled target took 3.5 ms against 4.4 ms with a float32 cache, 2026-12-02); ``SPECVIZ_LLAMACPP_KV=f32`` keeps
it in float32. Every run on this forward, its baseline included, uses the same cache, so greedy text here equals
the target's own greedy text on this forward. Chains only: a token tree needs attention masks this path does not
take (use the lean path).

Contexts are pooled per model: a CachedLM takes one (its memory cleared) and gives it back when it is collected.
``LLAMA_CPP_LIB_PATH`` points llama-cpp-python at another build of libllama (llama-cpp-python's own variable).
"""
from __future__ import annotations

import ctypes
import os
import time
import weakref

import numpy as np
import torch

from . import gguf_write

STALL = 8.0  # a decode this many times slower than the fastest of its row count: its threads waited on each other
STALLS = 2   # so many such decodes in a run, and it goes on one thread (one alone can be any scheduler's hiccup)
_MODELS: dict[str, object] = {}  # GGUF path -> llama_model pointer, loaded once per process
_POOLS: dict[tuple, list] = {}   # (GGUF path, KV type) -> free llama_context pointers
KV_ENV, KV_TYPES = "SPECVIZ_LLAMACPP_KV", ("f16", "f32")  # the KV cache's precision (f16: llama.cpp's default)
_state: dict = {}


def available() -> str | None:
    """None where llama-cpp-python and gguf import, else what to install."""
    try:
        _lib()
        import gguf  # noqa: F401
    except (ImportError, OSError) as e:
        return f"the llama.cpp forward needs llama-cpp-python and gguf (pip install llama-cpp-python gguf): {e}"
    return None


def supports(model) -> str | None:
    """None where ``model`` can run on llama.cpp here, else the reason."""
    return available() or gguf_write.supports(model)


def _lib():
    if "lib" not in _state:
        import llama_cpp

        llama_cpp.llama_backend_init()
        _state["quiet"] = llama_cpp.llama_log_callback(lambda level, text, data: None)  # kept: ctypes calls it
        llama_cpp.llama_log_set(_state["quiet"], ctypes.c_void_p())
        _state["lib"] = llama_cpp
    return _state["lib"]


def _model(path: str):
    lc = _lib()
    if path not in _MODELS:
        params = lc.llama_model_default_params()
        params.n_gpu_layers = 0
        ptr = lc.llama_model_load_from_file(path.encode(), params)
        if not ptr:
            raise ValueError(f"llama.cpp could not load {path}")
        _MODELS[path] = ptr
    return _MODELS[path]


def kv_type() -> str:
    """The KV cache's precision from ``SPECVIZ_LLAMACPP_KV`` (default f16, llama.cpp's own); ValueError if unknown."""
    kv = os.environ.get(KV_ENV, "").strip().lower() or KV_TYPES[0]
    if kv not in KV_TYPES:
        raise ValueError(f"{KV_ENV} must be one of {KV_TYPES}, got {kv!r}")
    return kv


def _context(path: str, n_ctx: int, threads: int, kv: str):
    pool = _POOLS.setdefault((path, kv), [])
    lc = _lib()
    while pool:
        ctx, size = pool.pop()
        if size >= n_ctx:
            lc.llama_set_n_threads(ctx, threads, threads)
            lc.llama_memory_clear(lc.llama_get_memory(ctx), False)
            return ctx, size
        lc.llama_free(ctx)
    p = lc.llama_context_default_params()
    p.n_ctx = p.n_batch = n_ctx
    p.n_ubatch = min(n_ctx, 512)
    p.n_seq_max, p.n_threads, p.n_threads_batch = 1, threads, threads
    p.type_k = p.type_v = lc.GGML_TYPE_F16 if kv == "f16" else lc.GGML_TYPE_F32
    p.embeddings = True  # the final normed hidden state beside the logits (pooling "none" for a causal model)
    p.pooling_type = lc.LLAMA_POOLING_TYPE_NONE
    p.no_perf = True
    ctx = lc.llama_init_from_model(_model(path), p)
    if not ctx:
        raise ValueError(f"llama.cpp could not make a context of {n_ctx} positions for {path}")
    return ctx, n_ctx


def _give_back(key: tuple, ctx, size: int) -> None:
    _POOLS.setdefault(key, []).append((ctx, size))


class LlamaCppForward:
    """One sequence in a llama.cpp context over ``model``'s weights. ``features`` (kept once ``keep_features`` is
    called, as ``lean_llama.LeanLlama`` keeps them) are the final normed hidden states a feature draft reads."""

    def __init__(self, model):
        reason = supports(model)
        if reason:
            raise ValueError(reason)
        self.lc = _lib()
        self.path = str(gguf_write.gguf_for_cached(model))
        self.capacity = int(model.config.max_position_embeddings)
        self.threads = torch.get_num_threads()
        self.kv = kv_type()
        self.ctx, size = _context(self.path, self.capacity, self.threads, self.kv)
        weakref.finalize(self, _give_back, (self.path, self.kv), self.ctx, size)
        self.mem = self.lc.llama_get_memory(self.ctx)
        self.vocab, self.d = int(model.config.vocab_size), int(model.config.hidden_size)
        self.batch = self.lc.llama_batch_init(self.capacity, 0, 1)
        weakref.finalize(self, self.lc.llama_batch_free, self.batch)
        self.length = 0
        self.features: torch.Tensor | None = None
        self.features_from = 0
        self.fastest: dict[int, float] = {}  # rows -> the fastest decode of that many rows seen
        self.stalls = 0

    def keep_features(self) -> None:
        if self.features is None:
            self.features = torch.zeros(self.capacity, self.d)
            self.features_from = self.length

    def get_seq_length(self) -> int:
        return self.length

    def crop(self, keep: int) -> None:
        if keep < self.length:
            self.lc.llama_memory_seq_rm(self.mem, 0, keep, -1)
            self.length = keep

    def keep(self, start: int, slots: list[int]) -> None:
        raise ValueError("token trees need the torch forward (path 'lean' or 'dynamic'): llama.cpp runs chains here")

    def _reserve(self, n: int) -> None:
        if n > self.capacity:
            raise ValueError(f"this context holds {self.capacity} positions (the model's max_position_embeddings); "
                             f"{n} asked")

    def forward(self, ids: torch.Tensor, positions=None, visible=None) -> torch.Tensor:
        """Append ids (n,); the logits after each, (n, V), from ONE llama_decode of all n rows."""
        if visible is not None:
            self.keep(0, [])
        n, start = int(ids.shape[-1]), self.length
        self._reserve(start + n)
        b = self.batch
        b.n_tokens = n
        for i, t in enumerate(ids.tolist()):
            b.token[i], b.pos[i], b.n_seq_id[i], b.logits[i] = t, start + i, 1, 1
            b.seq_id[i][0] = 0
        t0 = time.perf_counter()
        rc = self.lc.llama_decode(self.ctx, b)
        self._watch(n, time.perf_counter() - t0)
        if rc != 0:
            raise ValueError(f"llama.cpp's decode failed (code {rc}) at {start + n} positions")
        self.length = start + n
        logits = torch.from_numpy(np.ctypeslib.as_array(self.lc.llama_get_logits(self.ctx), (n, self.vocab)).copy())
        if self.features is not None:
            h = np.ctypeslib.as_array(self.lc.llama_get_embeddings(self.ctx), (n, self.d))
            self.features[start: start + n] = torch.from_numpy(h)
        return logits

    def _watch(self, rows: int, seconds: float) -> None:
        """One thread once decodes stall: where other work holds a core, llama.cpp's threads spin at their barriers
        while one of them waits for the CPU, and a decode costs 10-50x (the bundled target on 2 threads under a load
        of 4: 3 tokens/s against 171 on one thread, docs/LLAMACPP.md)."""
        best = self.fastest.get(rows)
        self.fastest[rows] = seconds if best is None else min(best, seconds)
        self.stalls += best is not None and seconds > STALL * best
        if self.stalls >= STALLS and self.threads > 1:
            self.threads = 1
            self.lc.llama_set_n_threads(self.ctx, 1, 1)
