"""A float matrix rounded to GGML's block layouts in numpy (ggml-common.h's block_q8_0 and block_q5_0, as llama.cpp's
``quantize_row_*_ref`` in ggml-quants.c rounds them), for weights that are not a GGUF's own (a feature draft's, a test's):
rows of whole blocks, each row the run of its blocks' bytes, as ``stack.c`` reads them."""
from __future__ import annotations

import numpy as np

KINDS = ("Q8_0", "Q5_0")  # what a feature draft's weights may be rounded to
Q5_0_BYTES = 22  # d (float16), 4 bytes of fifth bits, 16 bytes of nibbles


def q8_0(w: np.ndarray) -> np.ndarray:
    """A float matrix (rows, K) as GGML Q8_0 rows: per block of 32, a float16 scale d = amax / 127 and 32 int8, each
    roundf(x / d) (x times 1 / d, halves away from zero, as C's roundf)."""
    rows, K = _shape(w, 32)
    blocks = w.astype(np.float32).reshape(rows, K // 32, 32)
    d = np.abs(blocks).max(-1, keepdims=True) / 127
    inv = np.divide(np.float32(1.0), d, out=np.zeros_like(d), where=d > 0)
    q = _roundf(blocks * inv).clip(-127, 127).astype(np.int8)
    out = np.empty((rows, K // 32, 34), dtype=np.uint8)
    out[..., :2] = d.astype(np.float16).view(np.uint8)
    out[..., 2:] = q.view(np.uint8)
    return out.reshape(rows, -1)


def q5_0(w: np.ndarray) -> np.ndarray:
    """A float matrix (rows, K) as GGML Q5_0 rows: per block of 32, d = (the weight of largest size) / -16 in float16
    and each weight's 5-bit floor(x / d + 16.5), at most 31: the low nibbles of weights j and j + 16 in byte j, the
    fifth bits in a 32-bit word."""
    rows, K = _shape(w, 32)
    x = w.astype(np.float32).reshape(-1, 32)
    at = np.abs(x).argmax(-1)
    d = x[np.arange(len(x)), at] / -16
    inv = np.divide(1.0, d, out=np.zeros_like(d), where=d != 0)
    q = np.minimum(np.floor(x * inv[:, None] + 16.5), 31).astype(np.uint8)
    out = np.empty((len(x), Q5_0_BYTES), dtype=np.uint8)
    out[:, 0:2] = d.astype(np.float16)[:, None].view(np.uint8)
    high = ((q >> 4) & 1).astype(np.uint32) << np.arange(32, dtype=np.uint32)
    out[:, 2:6] = np.bitwise_or.reduce(high, -1).astype("<u4")[:, None].view(np.uint8)
    out[:, 6:] = (q[:, :16] & 0xF) | ((q[:, 16:] & 0xF) << 4)
    return out.reshape(rows, -1)


def _roundf(v: np.ndarray) -> np.ndarray:
    """C's roundf: halves away from zero (np.round takes them to even), exact in float32."""
    a = np.abs(v)
    whole = np.floor(a)
    return np.sign(v) * (whole + np.floor(2 * (a - whole)))


def _shape(w: np.ndarray, block: int) -> tuple[int, int]:
    if w.ndim != 2 or w.shape[1] % block or not np.all(np.isfinite(w)):
        raise ValueError(f"a matrix rounded to blocks of {block} needs finite rows of whole blocks, got shape "
                         f"{w.shape}")
    return w.shape


def rounded(w: np.ndarray, kind: str) -> np.ndarray:
    """w as rows of ``kind`` (one of KINDS)."""
    if kind not in KINDS:
        raise ValueError(f"weights are rounded here to {' or '.join(KINDS)}, not {kind!r}")
    return q8_0(w) if kind == "Q8_0" else q5_0(w)
