"""llama.cpp's forward of one sequence, in numpy (no torch): a GGUF loaded once per process, contexts pooled per
file, ``Sequence.decode(tokens)`` appending tokens and returning every row's logits from ONE ``llama_decode``,
``crop(keep)`` rolling back, and the file's own tokenizer (``Vocab``). ``llamacpp.LlamaCppForward`` puts the
torch cache interface on it; ``specviz.slim`` decodes on it in a process that never imports torch.

Per pass: one ``llama_decode`` of every row, the batch's token and position arrays written through numpy views made
once, the logits read as a numpy view of llama.cpp's output buffer (valid until the next pass). A context starts
at ``FIRST_CONTEXT`` positions (llama.cpp clears its whole KV cache when it makes one: that memory is resident)
and, when a sequence outgrows it, moves to one twice as large up to the sequence's limit, the sequence replayed
there. Contexts are pooled per model file: a Sequence takes one (its memory cleared) and gives it back when it is
collected. ``LLAMA_CPP_LIB_PATH`` points llama-cpp-python at another build of libllama (its own variable).
"""
from __future__ import annotations

import ctypes
import os
import threading
import time
import weakref

import numpy as np

from .cpus import StallWatch, usable_cpus

STALL = 8.0  # a decode this many times slower than the fastest of its row count: its threads waited on each other
STALLS = 2   # so many such decodes in a run, and it goes on one thread (one alone can be any scheduler's hiccup)
FIRST_CONTEXT = 1024  # positions of a sequence's first context (doubled, up to the sequence's limit, as it grows)
MAX_UBATCH = 512      # rows llama.cpp computes at once (its default): a longer pass is split inside llama_decode
_MODELS: dict[str, object] = {}  # GGUF path -> llama_model pointer, loaded once per process
_POOLS: dict[tuple, list] = {}   # (GGUF path, KV type) -> free llama_context pointers
KV_ENV, KV_TYPES = "SPECVIZ_LLAMACPP_KV", ("f16", "f32")  # the KV cache's precision (f16: llama.cpp's default)
_state: dict = {}  # the loaded library, or why it could not load
_LOCK = threading.Lock()


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


class Sequence:
    """One sequence in a llama.cpp context over the GGUF at ``path``. ``vocab``, ``d`` and ``limit`` (positions)
    default to the file's own (its token count, embedding width and training context). ``hidden`` (kept once
    ``keep_features`` is called) holds the final normed hidden states of every position, (limit, d)."""

    def __init__(self, path: str, *, vocab: int | None = None, d: int | None = None, limit: int | None = None,
                 threads: int | None = None):
        self.lc = lc = _lib()
        self.path = str(path)
        model = _model(self.path)
        self.vocab = int(vocab or lc.llama_vocab_n_tokens(lc.llama_model_get_vocab(model)))
        self.d = int(d or lc.llama_model_n_embd(model))
        self.limit = int(limit or lc.llama_model_n_ctx_train(model))
        self.threads = self.asked_threads = int(threads or usable_cpus())
        if min(self.vocab, self.d, self.limit, self.threads) <= 0:
            raise ValueError(f"{os.path.basename(self.path)!r}: vocabulary {self.vocab}, width {self.d}, "
                             f"limit {self.limit} and threads {self.threads} must all be positive")
        self.kv = kv_type()
        self.tokens = np.zeros(self.limit, dtype=np.int32)  # the sequence so far: replayed into a larger context
        self.length = self.capacity = 0
        self.hidden: np.ndarray | None = None
        self.features_from = 0
        self.stalls = StallWatch(STALL, STALLS)
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
        if self.hidden is not None:
            self.lc.llama_set_embeddings(self.ctx, True)

    def keep_features(self) -> None:
        if self.hidden is None:
            self.hidden = np.zeros((self.limit, self.d), dtype=np.float32)
            self.features_from = self.length
            self.lc.llama_set_embeddings(self.ctx, True)

    def get_seq_length(self) -> int:
        return self.length

    def crop(self, keep: int) -> None:
        """Roll back to the first ``keep`` positions (a no-op where the sequence is no longer)."""
        if keep < 0:
            raise ValueError(f"a sequence keeps 0 or more positions, not {keep}")
        if keep < self.length:
            self.lc.llama_memory_seq_rm(self.mem, 0, keep, -1)
            self.length = keep

    def _reserve(self, n: int) -> None:
        """Room for n positions: a context twice as large (up to the model's limit), the sequence replayed there."""
        if n > self.limit:
            raise ValueError(f"this sequence holds {self.limit} positions; {n} asked")
        if n <= self.capacity:
            return
        size = self.capacity
        while size < n:
            size *= 2
        length, self.length = self.length, 0
        self._open(min(size, self.limit))
        if length:
            self._decode(length, self.tokens[:length])

    def decode(self, tokens) -> np.ndarray:
        """Append tokens (n,); the logits after each, (n, V) float32, from ONE llama_decode of all n rows: a view of
        llama.cpp's output buffer, valid until the next pass (copy what is kept)."""
        tokens = np.asarray(tokens).reshape(-1)
        if tokens.dtype.kind not in "iu":
            raise ValueError(f"tokens must be integer ids, got {tokens.dtype}")
        n, start = len(tokens), self.length
        if n == 0:
            return np.zeros((0, self.vocab), dtype=np.float32)
        lo, hi = int(tokens.min()), int(tokens.max())
        if lo < 0 or hi >= self.vocab:
            raise ValueError(f"token ids must lie in [0, {self.vocab}), got {lo}..{hi}")
        self._reserve(start + n)
        self.tokens[start: start + n] = tokens
        self._decode(n, self.tokens[start: start + n])
        return self._logits_view(n)

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
        if self.hidden is not None:
            self.hidden[start: start + n] = np.ctypeslib.as_array(self.lc.llama_get_embeddings(self.ctx), (n, self.d))

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
        threads = self.stalls.threads(rows, seconds, self.threads, self.asked_threads)
        if threads != self.threads:  # one thread once decodes stall, the threads asked for again some passes later
            self.threads = threads
            self.lc.llama_set_n_threads(self.ctx, threads, threads)


class Vocab:
    """The tokenizer a GGUF carries, as llama.cpp reads it (what llama-server tokenizes with): ``encode`` text to
    ids (the file's BOS added where it asks for one), ``piece`` of one id as bytes, ``decode`` ids to text, and
    ``eog``, the ids llama.cpp ends generation at."""

    def __init__(self, path: str):
        self.lc = _lib()
        self.vocab = self.lc.llama_model_get_vocab(_model(str(path)))
        self.size = int(self.lc.llama_vocab_n_tokens(self.vocab))
        if self.size <= 0 or self.lc.llama_vocab_type(self.vocab) == self.lc.LLAMA_VOCAB_TYPE_NONE:
            # llama.cpp aborts the process when it is asked to tokenize with none: refused here
            raise ValueError(f"{os.path.basename(str(path))!r} carries no tokenizer (feed it token ids)")
        self._eog: tuple[int, ...] | None = None

    def encode(self, text: str, add_special: bool = True) -> list[int]:
        raw = text.encode("utf-8")
        room = len(raw) + 8
        buf = (self.lc.llama_token * room)()
        n = self.lc.llama_tokenize(self.vocab, raw, len(raw), buf, room, add_special, False)
        if n < 0:  # never more ids than bytes plus the specials, but llama.cpp says how many it needs
            buf = (self.lc.llama_token * -n)()
            n = self.lc.llama_tokenize(self.vocab, raw, len(raw), buf, -n, add_special, False)
        return list(buf[:n])

    def piece(self, token: int) -> bytes:
        """The bytes of one id (part of a character, maybe), special tokens written as their text."""
        if not 0 <= int(token) < self.size:
            raise ValueError(f"token id {token} is outside this vocabulary of {self.size}")
        buf = ctypes.create_string_buffer(64)
        n = self.lc.llama_token_to_piece(self.vocab, int(token), buf, 64, 0, True)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = self.lc.llama_token_to_piece(self.vocab, int(token), buf, -n, 0, True)
        return buf.raw[:n]

    def decode(self, ids) -> str:
        return b"".join(self.piece(t) for t in ids).decode("utf-8", "replace")

    @property
    def eog(self) -> tuple[int, ...]:
        """The end-of-generation ids (EOS, end of turn, ...), read once from the file's vocabulary."""
        if self._eog is None:
            self._eog = tuple(t for t in range(self.size) if self.lc.llama_vocab_is_eog(self.vocab, t))
        return self._eog
