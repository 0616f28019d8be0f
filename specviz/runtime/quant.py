"""Weights kept quantized as a GGUF stores them (llama.cpp's block layouts), computed on in C without a float copy.

A ``QuantMatrix`` is a matrix of ``rows`` output features by ``cols`` input features held as the file's bytes (a
read-only memory map where it comes from a GGUF): each row a run of blocks along ``cols``, each block a scale (and for
K-quants, mins and sub-block scales) and its small integers. ``linear`` streams those bytes once per call: every
chunk of 256 weights is expanded to float32 in L1 by the file's own arithmetic (ggml-quants.c's dequantize_row_*)
and dotted with every row of x, so the weights a pass uses are exactly the file's; only the order of float
additions differs from ``x @ dequantize(W).T``. A ``QuantLinear`` lays several matrices of one input width side by
side (q, k and v; gate and up), each in its own type, as one call.

Where the CPU has AVX-512 VNNI, ``linear`` takes x as llama.cpp does (``activations``): each row rounded to int8 per
block of 32 with its own scale, each chunk of 64 weights unpacked once to int8 and dotted with up to 16 rows in exact
integer arithmetic (``stack.c``'s sv_qlinear8), then scaled in float. The weights are still exactly the file's; the
rounding of x moves a matmul's output by about half a percent (tests/runtime/test_quantized.py bounds it), and a
row's result is the same whatever other rows share its call, so a verify pass gives each row what a one-row pass
gives it. Gemma-3 270M's head: 6.5 ms for one row, 11.2 for five (float32 activations: 14.2 and 37.6;
scripts/measure/gemma_int8.py). ``SPECVIZ_QUANT_ACTIVATIONS=float`` keeps x in float32.

Types read (GGML's ids): F32, F16, Q4_0, Q5_0, Q8_0 (blocks of 32), Q4_K and Q6_K (blocks of 256): those Gemma-3 270M's
Q4_K_M GGUF ships. Every argument is checked here before a pointer reaches C (``stack.c``'s sv_qlinear and sv_qrows
check the types and block sizes once more).
"""
from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass

import torch

from . import blocks, native
from .gguf_header import BLOCKS
from .native.build import INT8_TYPES
from .native.library import QMat, check_tensor, lib, need, ptr
from .threads import policy

ACTIVATIONS_ENV = "SPECVIZ_QUANT_ACTIVATIONS"
TYPES = BLOCKS  # GGML type name -> (id, weights per block, bytes per block), as ggml-common.h lays the blocks out


def row_bytes(kind: str, cols: int) -> int:
    """Bytes of one row of ``cols`` weights in ``kind``; ValueError where the type is not read here or the row is
    not whole blocks."""
    need(kind in TYPES, f"weights of type {kind!r} are not read here (read: {', '.join(TYPES)})")
    _, block, size = TYPES[kind]
    need(isinstance(cols, int) and cols > 0 and cols % block == 0,
         f"a {kind} row holds whole blocks of {block} weights: {cols} columns is not a multiple of {block}")
    return cols // block * size


@dataclass(frozen=True, eq=False)
class QuantMatrix:
    """rows x cols weights as the bytes of their blocks (uint8 (rows, row_bytes) on the CPU, contiguous)."""
    data: torch.Tensor
    kind: str
    rows: int
    cols: int

    def __post_init__(self):
        width = row_bytes(self.kind, self.cols)
        need(isinstance(self.rows, int) and self.rows > 0, f"a quantized matrix needs rows, not {self.rows!r}")
        t = self.data
        need(isinstance(t, torch.Tensor) and t.dtype == torch.uint8,
             f"a quantized matrix's data must be a uint8 tensor, not {getattr(t, 'dtype', type(t).__name__)}")
        need(t.device.type == "cpu" and t.is_contiguous(), "a quantized matrix's data must be contiguous on the CPU")
        need(tuple(t.shape) == (self.rows, width), f"{self.rows} rows of {self.cols} {self.kind} weights are "
                                                   f"({self.rows}, {width}) bytes, not {tuple(t.shape)}")

    @property
    def nbytes(self) -> int:
        return self.data.numel()

    def qmat(self) -> QMat:
        return QMat(self.data.data_ptr(), TYPES[self.kind][0], self.rows)


@dataclass(frozen=True, eq=False)
class QuantLinear:
    """Quantized matrices of one input width side by side: y = x @ [parts].T has sum(rows) columns."""
    parts: tuple[QuantMatrix, ...]

    def __post_init__(self):
        need(isinstance(self.parts, tuple) and len(self.parts) > 0 and
             all(isinstance(p, QuantMatrix) for p in self.parts), "a QuantLinear takes a tuple of QuantMatrix")
        widths = {p.cols for p in self.parts}
        need(len(widths) == 1, f"the parts of a QuantLinear share one input width, not {sorted(widths)}")
        object.__setattr__(self, "_structs", (QMat * len(self.parts))(*[p.qmat() for p in self.parts]))
        object.__setattr__(self, "int8", self.cols % 64 == 0 and all(p.kind in INT8_TYPES for p in self.parts))

    @property
    def cols(self) -> int:
        return self.parts[0].cols

    @property
    def rows(self) -> int:
        return sum(p.rows for p in self.parts)

    @property
    def nbytes(self) -> int:
        return sum(p.nbytes for p in self.parts)


def linear(x: torch.Tensor, w: QuantLinear, b: torch.Tensor | None = None,
           residual: torch.Tensor | None = None) -> torch.Tensor:
    """residual + x @ W.T + b for x (M, cols) float32 on the CPU, W quantized: (M, rows) float32."""
    need(isinstance(w, QuantLinear), f"w must be a QuantLinear, not {type(w).__name__}")
    need(native.enabled(), "quantized weights run in C only, and the C layers are not built here "
                           f"({native.unavailable() or 'switched off'})")
    check_tensor("x", x, (None, w.cols), contiguous=False)
    m, n = x.shape[0], w.rows
    need(m > 0, "x has no rows")
    if b is not None:
        check_tensor("the bias", b, (n,))
    if residual is not None:
        check_tensor("the residual", residual, (m, n), contiguous=False)
        residual = residual.contiguous()
    x = x.contiguous()
    out = torch.empty(m, n, dtype=torch.float32, device="cpu")
    int8 = activations() == "int8" and w.int8
    kernel = lib().sv_qlinear8 if int8 else lib().sv_qlinear
    with policy.timed(("qlinear8" if int8 else "qlinear", m, w.cols, n)) as threads:
        done = kernel(x.data_ptr(), m, w.cols, w._structs, len(w.parts), ptr(b), ptr(residual), out.data_ptr(), threads)
    need(done == 0, "the C matmul refused its quantized weights (a type or block size it does not read)")
    return out


def activations() -> str:
    """How the quantized matmuls take x: "int8" (rounded to 8 bits per block of 32, as llama.cpp does; AVX-512 VNNI)
    or "float" (float32, exact up to the order of additions). ``SPECVIZ_QUANT_ACTIVATIONS`` chooses; by default
    int8 where the CPU has VNNI, else float."""
    asked = os.environ.get(ACTIVATIONS_ENV, "").strip().lower()
    need(asked in ("", "int8", "float"), f"{ACTIVATIONS_ENV} is int8 or float, not {asked!r}")
    if asked == "float" or not native.enabled() or not lib().sv_qlinear8_available():
        return "float"
    return "int8"


def rows(w: QuantMatrix, ids: torch.Tensor) -> torch.Tensor:
    """Rows ``ids`` (n,) of w as float32 (n, cols): an embedding lookup in a quantized table."""
    need(isinstance(w, QuantMatrix), f"w must be a QuantMatrix, not {type(w).__name__}")
    need(native.enabled(), "quantized weights run in C only, and the C layers are not built here")
    need(isinstance(ids, torch.Tensor) and ids.dim() == 1 and not ids.is_floating_point() and
         ids.dtype != torch.bool, "ids must be a one-dimensional integer tensor")
    ids = ids.to("cpu", torch.int64).contiguous()
    if ids.numel():
        low, high = int(ids.min()), int(ids.max())
        need(low >= 0 and high < w.rows, f"ids must lie in [0, {w.rows}), not {low}..{high}")
    out = torch.empty(ids.numel(), w.cols, dtype=torch.float32)
    done = lib().sv_qrows(w.data.data_ptr(), TYPES[w.kind][0], w.rows, w.cols, ids.data_ptr(), ids.numel(),
                          out.data_ptr())
    need(done == 0, "the C lookup refused its quantized table")
    return out


def select_rows(w: QuantMatrix, ids: torch.Tensor) -> QuantMatrix:
    """Rows ``ids`` of w as a matrix of their own (their blocks copied: a pruned head of a quantized table)."""
    need(isinstance(w, QuantMatrix), f"w must be a QuantMatrix, not {type(w).__name__}")
    ids = torch.as_tensor(ids, dtype=torch.int64).flatten()
    need(ids.numel() > 0 and int(ids.min()) >= 0 and int(ids.max()) < w.rows, f"ids must lie in [0, {w.rows})")
    return QuantMatrix(w.data[ids].contiguous(), w.kind, ids.numel(), w.cols)


def dequantize(w: QuantMatrix) -> torch.Tensor:
    """The whole matrix as float32 (rows, cols): what ``linear`` computes with (for tests and references)."""
    return rows(w, torch.arange(w.rows))


def quantize_q8_0(w: torch.Tensor) -> QuantMatrix:
    """A float matrix (rows, cols) as Q8_0 (llama.cpp's quantize_row_q8_0_ref: per block of 32, d = max|w| / 127 stored
    as float16, q = roundf(w / d), ``blocks.q8_0``); cols a multiple of 32."""
    check_tensor("w", w.float(), (None, None), contiguous=False)
    n, k = w.shape
    row_bytes("Q8_0", k)
    return QuantMatrix(torch.from_numpy(blocks.q8_0(w.detach().float().numpy())), "Q8_0", n, k)


def _block(kind: str) -> tuple[int, int]:
    """(weights, bytes) of a block as stack.c counts them (checked against TYPES by the tests)."""
    e, b = ctypes.c_int(), ctypes.c_int()
    lib().sv_quant_block(TYPES[kind][0], ctypes.byref(e), ctypes.byref(b))
    return e.value, b.value
