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

The sequence itself (one ``llama_decode`` a pass, contexts pooled per file and grown as the sequence grows) is
``llamacpp_seq.Sequence``, in numpy; this module puts the torch interface on it: the logits of all rows copied once
from llama.cpp's output buffer into a new torch tensor (callers keep a pass's logits while they run the next).
"""
from __future__ import annotations

import struct
import weakref
from pathlib import Path

import numpy as np
import torch

from . import gguf_write, llamacpp_seq
from .llamacpp_seq import KV_ENV, KV_TYPES, Sequence, kv_type  # noqa: F401 (the forward's settings, here too)


def available() -> str | None:
    """None where llama-cpp-python and gguf import, else what to install."""
    try:
        llamacpp_seq._lib()
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


class LlamaCppForward(Sequence):
    """One sequence in a llama.cpp context over ``model``'s GGUF (``source``) or its weights written as one.
    ``features`` (kept once ``keep_features`` is called, as ``lean_llama.LeanLlama`` keeps them) are the final normed
    hidden states a feature draft reads: a torch view of the sequence's ``hidden``."""

    def __init__(self, model):
        reason = supports(model)  # the file's architecture and vocabulary checked before anything is loaded
        if reason:
            raise ValueError(reason)
        shipped = source(model)
        path = str(shipped) if shipped is not None else str(gguf_write.gguf_for_cached(model))
        cfg = model.config
        self.features: torch.Tensor | None = None
        super().__init__(path, vocab=int(cfg.vocab_size), d=int(cfg.hidden_size),
                         limit=int(cfg.max_position_embeddings), threads=torch.get_num_threads())

    def keep_features(self) -> None:
        if self.hidden is None:
            super().keep_features()
            self.features = torch.from_numpy(self.hidden)  # the same memory: each pass writes it

    def keep(self, start: int, slots: list[int]) -> None:
        raise ValueError("token trees need the torch forward (path 'lean' or 'dynamic'): llama.cpp runs chains here")

    def forward(self, ids: torch.Tensor, positions=None, visible=None) -> torch.Tensor:
        """Append ids (n,); the logits after each, (n, V), from ONE llama_decode of all n rows."""
        if visible is not None:
            self.keep(0, [])
        logits = self.decode(ids.reshape(-1).numpy().astype(np.int32))
        out = torch.empty(logits.shape[0], self.vocab)
        out.numpy()[:] = logits
        return out
