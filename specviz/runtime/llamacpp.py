"""The forward pass run by llama.cpp (optional: ``pip install llama-cpp-python gguf``), behind the cache interface
``CachedLM`` uses: ``forward(ids)`` appends tokens and returns every row's logits, ``crop(keep)`` rolls back by
removing the sequence's positions from ``keep`` on in llama.cpp's KV cache, ``get_seq_length()``.

specviz keeps every decision and record: llama.cpp computes logits (and, for a feature draft, the final normed hidden
states: its "embeddings" with no pooling), the decoder samples, accepts and rolls back in torch as on any other
path. A model loaded from a GGUF file runs on that file as shipped (``source``: the quantized loader's
``gguf_path``, or the file ``from_file`` recorded), of any architecture llama.cpp reads, its quantized weights
llama.cpp's own; its architecture and vocabulary are checked against the model's config first. Any other model's
weights are written once to a GGUF (``gguf_write``: Llama blocks, float32, no tokenizer). The KV cache is float16,
llama.cpp's own default (what llama-server and llama-bench run; on a 2-vCPU Xeon its one-token decode of the bundled
target took 3.5 ms against 4.4 ms with a float32 cache, 2026-12-02); ``SPECVIZ_LLAMACPP_KV=f32`` keeps it in
float32. Every run on this forward, its baseline included, uses the same cache, so greedy text here equals the
target's own greedy text on this forward. Chains only: a token tree needs attention masks this path does not take
(use the lean path).

Per pass: one ``llama_decode`` of every row, the batch's token and position arrays written through numpy views made
once, the logits of all rows copied once from llama.cpp's output buffer into a new torch tensor (callers keep a
pass's logits while they run the next). A context starts at ``FIRST_CONTEXT`` positions (llama.cpp clears its whole
KV cache when it makes one: that memory is resident) and, when a sequence outgrows it, moves to one twice as large
up to the model's ``max_position_embeddings``, the sequence replayed there. Contexts are pooled per model file: a
CachedLM takes one (its memory cleared) and gives it back when it is collected. ``LLAMA_CPP_LIB_PATH`` points
llama-cpp-python at another build of libllama (llama-cpp-python's own variable).
"""
from __future__ import annotations

import ctypes
import os
import struct
import threading
import time
import weakref
from pathlib import Path

import numpy as np
import torch

from . import gguf_write

STALL = 8.0  # a decode this many times slower than the fastest of its row count: its threads waited on each other
STALLS = 2   # so many such decodes in a run, and it goes on one thread (one alone can be any scheduler's hiccup)
FIRST_CONTEXT = 1024  # positions of a sequence's first context (doubled, up to the model's limit, as it grows)
MAX_UBATCH = 512      # rows llama.cpp computes at once (its default): a longer pass is split inside llama_decode
_MODELS: dict[str, object] = {}  # GGUF path -> llama_model pointer, loaded once per process
_POOLS: dict[tuple, list] = {}   # (GGUF path, KV type) -> free llama_context pointers
KV_ENV, KV_TYPES = "SPECVIZ_LLAMACPP_KV", ("f16", "f32")  # the KV cache's precision (f16: llama.cpp's default)
_state: dict = {}  # the loaded library, or why it could not load
_LOCK = threading.Lock()


def available() -> str | None:
    """None where llama-cpp-python and gguf import, else what to install."""
    try:
        _lib()
        import gguf  # noqa: F401
    except (ImportError, OSError) as e:
        return f"the llama.cpp forward needs llama-cpp-python and gguf (pip install llama-cpp-python gguf): {e}"
    return None


def supports(model) -> str | None:
    """None where ``model`` can run on llama.cpp here, else the reason: on the GGUF it was loaded from (``source``),
    checked against its config, or on its weights written as one (Llama models)."""
    reason = available()
    if reason:
        return reason
    path = source(model)
    return gguf_write.supports(model) if path is None else file_refusal(model, path)


_FILES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> the GGUF file it was loaded from


def from_file(model, path):
    """Records that ``model`` was loaded from the GGUF at ``path``, so that its llama.cpp forward runs on that file as
    shipped (no float32 copy written). Checks the file's architecture and vocabulary against the model's config first
    (ValueError if they differ, or if the file is not a GGUF). Returns the model."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"no GGUF file at {path.name!r}")
    reason = file_refusal(model, path)
    if reason:
        raise ValueError(reason)
    _FILES[model] = path.resolve()
    return model


def source(model) -> Path | None:
    """The GGUF file ``model`` was loaded from: recorded by ``from_file``, else the quantized loader's
    ``model.gguf_path`` (``gguf_shell.QuantGemma``); None for a model not loaded from one."""
    try:
        hit = _FILES.get(model)
    except TypeError:  # not weakly referenceable: nothing recorded
        hit = None
    path = hit or getattr(model, "gguf_path", None)
    return Path(path) if path else None


# GGUF architectures whose name is not the transformers model_type without "_text" and underscores
ARCHITECTURES = {"mistral": "llama", "mixtral": "llama", "gemma3_text": "gemma3", "gemma3n_text": "gemma3n"}


def gguf_architecture(model_type: str) -> str:
    """The GGUF ``general.architecture`` a transformers ``model_type`` is written as (llama.cpp's converter's)."""
    if model_type in ARCHITECTURES:
        return ARCHITECTURES[model_type]
    return model_type.removesuffix("_text").replace("_", "")


def file_refusal(model, path: Path) -> str | None:
    """Why llama.cpp's forward of the GGUF at ``path`` is not ``model``'s (architecture, vocabulary), else None."""
    cfg = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    try:
        arch, vocab = gguf_identity(Path(path))
    except (OSError, ValueError, struct.error) as e:
        return f"{Path(path).name!r} is not a readable GGUF file ({type(e).__name__})"
    want = gguf_architecture(str(getattr(cfg, "model_type", "")))
    if arch != want:
        return f"{Path(path).name!r} is a GGUF of architecture {arch!r}; the model's config says {want!r}"
    if vocab != getattr(cfg, "vocab_size", None):
        return (f"{Path(path).name!r} holds a vocabulary of {vocab} tokens; the model's config says "
                f"{getattr(cfg, 'vocab_size', None)}")
    return None


_IDENTITIES: dict[tuple, tuple[str, int]] = {}  # (path, size, mtime) -> (architecture, vocabulary size)


def gguf_identity(path: Path) -> tuple[str, int]:
    """(general.architecture, vocabulary size: the token list's length) from a GGUF's header, read up to the token
    list only (its 262,144 strings are not parsed); remembered per file version."""
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    if key not in _IDENTITIES:
        with open(path, "rb") as f:
            _IDENTITIES[key] = _read_identity(f)
    return _IDENTITIES[key]


_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}  # GGUF scalar types: bytes


def _read_identity(f) -> tuple[str, int]:
    if f.read(4) != b"GGUF":
        raise ValueError("no GGUF magic")
    version, _, n_kv = struct.unpack("<IQQ", f.read(20))
    if version not in (2, 3):
        raise ValueError(f"GGUF version {version}")
    arch, vocab = None, None
    for _ in range(n_kv):
        key = f.read(struct.unpack("<Q", f.read(8))[0]).decode("utf-8", "replace")
        (kind,) = struct.unpack("<I", f.read(4))
        if key.endswith(".vocab_size") and kind in (4, 10):  # a file without a token list (gguf_write's) says so
            vocab = struct.unpack("<I" if kind == 4 else "<Q", f.read(_SIZES[kind]))[0]
        elif key == "tokenizer.ggml.tokens" and kind == 9:
            vocab = struct.unpack("<IQ", f.read(12))[1]
            if arch is not None:
                return arch, vocab
            _skip_array_rest(f, 8, vocab)
        elif key == "general.architecture" and kind == 8:
            arch = f.read(struct.unpack("<Q", f.read(8))[0]).decode("utf-8", "replace")
        else:
            _skip(f, kind)
    if arch is None or vocab is None:
        raise ValueError("no architecture or token list")
    return arch, vocab


def _skip(f, kind: int) -> None:
    if kind == 8:
        f.seek(struct.unpack("<Q", f.read(8))[0], 1)
    elif kind == 9:
        item, n = struct.unpack("<IQ", f.read(12))
        _skip_array_rest(f, item, n)
    elif kind in _SIZES:
        f.seek(_SIZES[kind], 1)
    else:
        raise ValueError(f"unknown metadata type {kind}")


def _skip_array_rest(f, item: int, n: int) -> None:
    if item in _SIZES:
        f.seek(_SIZES[item] * n, 1)
    else:
        for _ in range(n):
            _skip(f, item)


def _lib():
    """llama-cpp-python, its backend started once per process. ImportError, saying why, where it cannot load (not
    installed, or installed without its shared library): the first failure is remembered, so threads asking at once
    or later get the same answer, never a half-imported module."""
    with _LOCK:
        if "lib" not in _state:
            if "error" in _state:
                raise ImportError(_state["error"])
            try:
                import llama_cpp

                llama_cpp.llama_backend_init()
            except (ImportError, OSError, AttributeError) as e:
                _state["error"] = f"{type(e).__name__}: {e}"
                raise ImportError(_state["error"]) from e
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
            lc.llama_set_embeddings(ctx, False)
            lc.llama_memory_clear(lc.llama_get_memory(ctx), False)
            return ctx, size
        lc.llama_free(ctx)
    p = lc.llama_context_default_params()
    p.n_ctx = p.n_batch = n_ctx
    p.n_ubatch = min(n_ctx, MAX_UBATCH)
    p.n_seq_max, p.n_threads, p.n_threads_batch = 1, threads, threads
    p.type_k = p.type_v = lc.GGML_TYPE_F16 if kv == "f16" else lc.GGML_TYPE_F32
    p.embeddings = False  # turned on by keep_features: the final normed hidden states (no pooling) beside the logits
    p.pooling_type = lc.LLAMA_POOLING_TYPE_NONE
    p.no_perf = True
    ctx = lc.llama_init_from_model(_model(path), p)
    if not ctx:
        raise ValueError(f"llama.cpp could not make a context of {n_ctx} positions for {path}")
    return ctx, n_ctx


def _give_back(key: tuple, ctx, size: int) -> None:
    _POOLS.setdefault(key, []).append((ctx, size))


class LlamaCppForward:
    """One sequence in a llama.cpp context over ``model``'s GGUF (``source``) or its weights written as one.
    ``features`` (kept once ``keep_features`` is called, as ``lean_llama.LeanLlama`` keeps them) are the final normed
    hidden states a feature draft reads."""

    def __init__(self, model):
        reason = supports(model)  # the file's architecture and vocabulary checked before anything is loaded
        if reason:
            raise ValueError(reason)
        self.lc = _lib()
        shipped = source(model)
        self.path = str(shipped) if shipped is not None else str(gguf_write.gguf_for_cached(model))
        self.limit = int(model.config.max_position_embeddings)
        self.threads = torch.get_num_threads()
        self.kv = kv_type()
        self.vocab, self.d = int(model.config.vocab_size), int(model.config.hidden_size)
        self.tokens = np.zeros(self.limit, dtype=np.int32)  # the sequence so far: replayed into a larger context
        self.length = self.capacity = 0
        self.features: torch.Tensor | None = None
        self.features_from = 0
        self.fastest: dict[int, float] = {}  # rows -> the fastest decode of that many rows seen
        self.stalls = 0
        self._logits_at, self._logits = 0, np.zeros((0, self.vocab), dtype=np.float32)
        self._open(min(self.limit, FIRST_CONTEXT))

    def _open(self, n_ctx: int) -> None:
        """A context of at least n_ctx positions and a batch as large, the previous ones given back."""
        if self.capacity:
            self._release_ctx()
            self._release_batch()
        self.ctx, size = _context(self.path, n_ctx, self.threads, self.kv)
        self._release_ctx = weakref.finalize(self, _give_back, (self.path, self.kv), self.ctx, size)
        self.mem = self.lc.llama_get_memory(self.ctx)
        self.capacity, self._logits_at = size, 0
        self.batch = self.lc.llama_batch_init(size, 0, 1)
        self._release_batch = weakref.finalize(self, self.lc.llama_batch_free, self.batch)
        b = self.batch
        for i in range(size):  # every row: sequence 0, logits out (set once; each pass writes tokens and positions)
            b.n_seq_id[i], b.logits[i] = 1, 1
            b.seq_id[i][0] = 0
        self.token_view = np.ctypeslib.as_array(b.token, (size,))
        self.pos_view = np.ctypeslib.as_array(b.pos, (size,))
        if self.features is not None:
            self.lc.llama_set_embeddings(self.ctx, True)

    def keep_features(self) -> None:
        if self.features is None:
            self.features = torch.zeros(self.limit, self.d)
            self.features_from = self.length
            self.lc.llama_set_embeddings(self.ctx, True)

    def get_seq_length(self) -> int:
        return self.length

    def crop(self, keep: int) -> None:
        if keep < self.length:
            self.lc.llama_memory_seq_rm(self.mem, 0, keep, -1)
            self.length = keep

    def keep(self, start: int, slots: list[int]) -> None:
        raise ValueError("token trees need the torch forward (path 'lean' or 'dynamic'): llama.cpp runs chains here")

    def _reserve(self, n: int) -> None:
        """Room for n positions: a context twice as large (up to the model's limit), the sequence replayed there."""
        if n > self.limit:
            raise ValueError(f"this model holds {self.limit} positions (its max_position_embeddings); {n} asked")
        if n <= self.capacity:
            return
        size = self.capacity
        while size < n:
            size *= 2
        length, self.length = self.length, 0
        self._open(min(size, self.limit))
        if length:
            self._decode(length, self.tokens[:length])

    def forward(self, ids: torch.Tensor, positions=None, visible=None) -> torch.Tensor:
        """Append ids (n,); the logits after each, (n, V), from ONE llama_decode of all n rows."""
        if visible is not None:
            self.keep(0, [])
        n, start = int(ids.shape[-1]), self.length
        if n == 0:
            return torch.empty(0, self.vocab)
        self._reserve(start + n)
        self.tokens[start: start + n] = ids.reshape(-1).numpy()
        self._decode(n, self.tokens[start: start + n])
        out = torch.empty(n, self.vocab)
        out.numpy()[:] = self._logits_view(n)
        return out

    def _decode(self, n: int, tokens: np.ndarray) -> None:
        """One llama_decode of n tokens at positions length.., every row's logits (and features) out."""
        start = self.length
        self.token_view[:n] = tokens
        self.pos_view[:n] = np.arange(start, start + n, dtype=np.int32)
        self.batch.n_tokens = n
        t0 = time.perf_counter()
        rc = self.lc.llama_decode(self.ctx, self.batch)
        self._watch(n, time.perf_counter() - t0)
        if rc != 0:
            raise ValueError(f"llama.cpp's decode failed (code {rc}) at {start + n} positions")
        self.length = start + n
        if self.features is not None:
            h = np.ctypeslib.as_array(self.lc.llama_get_embeddings(self.ctx), (n, self.d))
            self.features[start: start + n] = torch.from_numpy(h)

    def _logits_view(self, n: int) -> np.ndarray:
        """llama.cpp's logits of the last pass's n rows, a numpy view of its output buffer (made again only when
        llama.cpp moved that buffer or the pass has more rows than the view)."""
        ptr = self.lc.llama_get_logits(self.ctx)
        at = ctypes.cast(ptr, ctypes.c_void_p).value
        if at != self._logits_at or n > self._logits.shape[0]:
            self._logits = np.ctypeslib.as_array(ptr, (n, self.vocab))
            self._logits_at = at
        return self._logits[:n]

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
