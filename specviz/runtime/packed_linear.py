"""Matmuls of several rows at once (a verify pass, a token tree's level) through oneDNN with the weight pre-packed.

Why: on a CPU the lean forward's one-row matmuls (``x @ W_t``, MKL's gemv) stream the weights at memory speed, but
MKL's fp32 GEMM with 2-24 rows is far from it: the bundled target's 7-row pass cost 2-2.6x its one-row pass.
oneDNN's inner-product kernel over a weight packed once for its blocking costs 0.5-0.7x of MKL's there (the
7-row pass 23.9 against 31.5 ms, 13 rows 25.6 against 35.0 ms, both measured in one run, 2026-12-01), and is
no faster for one row, which therefore stays on ``x @ W_t``. Both are fp32 kernels that round a little
differently (logits agree to ~1e-5), as MKL's gemv and GEMM already did; every packed weight is checked against
``x @ W_t`` once, and a weight whose check fails, or a torch without oneDNN, keeps the plain matmul.
"""
from __future__ import annotations

import weakref

import torch

MIN_ROWS = 2      # one row stays on x @ W_t (as fast or faster, and the autoregressive baseline's own kernel)
BATCH_HINT = 16   # the row count oneDNN packs for; any other count still runs on the packed weight
_PACKED: dict[int, tuple] = {}  # id(W_t) -> (weakref to W_t, its packed weight or None: not packable)
_state = {"enabled": True}


def set_enabled(on: bool) -> bool:
    """Turn the packed path on or off (a benchmark's A/B switch); returns the previous setting."""
    before, _state["enabled"] = _state["enabled"], bool(on)
    return before


def enabled() -> bool:
    return _state["enabled"]


def without(fn, *args, **kwargs):
    """fn(*args, **kwargs) with the packed path switched off (every row count on x @ W_t), then as it was."""
    before = set_enabled(False)
    try:
        return fn(*args, **kwargs)
    finally:
        set_enabled(before)


def linear(x: torch.Tensor, w_t: torch.Tensor, b: torch.Tensor | None,
           residual: torch.Tensor | None = None) -> torch.Tensor | None:
    """residual + x @ W_t + b through the packed weight, or None where the packed path does not apply (one row,
    not an fp32 CPU weight, packing unavailable or switched off): the caller then does the plain matmul."""
    if x.shape[0] < MIN_ROWS or not _state["enabled"] or w_t.dtype != torch.float32 or w_t.device.type != "cpu":
        return None
    hit = _PACKED.get(id(w_t))
    if hit is None or hit[0]() is not w_t:  # (tensors compare elementwise, so they key by id, held weakly)
        key = id(w_t)
        hit = _PACKED[key] = (weakref.ref(w_t, lambda _, key=key: _PACKED.pop(key, None)), _pack(w_t, b))
    packed = hit[1]
    if packed is None:
        return None
    return _run(x, packed, b, residual)


def _run(x: torch.Tensor, packed: torch.Tensor, b: torch.Tensor | None, residual: torch.Tensor | None) -> torch.Tensor:
    """oneDNN's inner product over the packed weight, with the residual added in the same kernel."""
    if residual is None:
        return torch.ops.mkldnn._linear_pointwise(x.contiguous(), packed, b, "none", [], "")
    return torch.ops.mkldnn._linear_pointwise(x.contiguous(), residual.contiguous(), packed, b, "add")


def _pack(w_t: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor | None:
    """W_t (in, out) packed for oneDNN, if this torch has oneDNN and the packed product matches x @ W_t."""
    if not torch.backends.mkldnn.is_available():
        return None
    try:
        with torch.inference_mode():
            packed = torch.ops.mkldnn._reorder_linear_weight(w_t.t().contiguous(), BATCH_HINT)
            probe = torch.randn(3, w_t.shape[0], generator=torch.Generator().manual_seed(0))
            got = _run(probe, packed, b, None)
            want = probe @ w_t if b is None else torch.addmm(b, probe, w_t)
    except (RuntimeError, AttributeError, NotImplementedError):
        return None
    scale = want.abs().max().item() + 1e-30
    return packed if (got - want).abs().max().item() <= 1e-5 * scale else None
