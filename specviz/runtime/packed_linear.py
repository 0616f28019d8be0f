"""Matmuls of several rows at once (a verify pass, a token tree's level) through oneDNN with the weight pre-packed.

Taken only where ``native``'s C stack is not (no compiler, ``SPECVIZ_NATIVE=0``): the C stack runs every fp32 row
count itself, so with a compiler nothing here is timed or packed.

Why: on a CPU the lean forward's one-row matmuls (``x @ W_t``, MKL's gemv) stream the weights at memory speed, but
MKL's fp32 GEMM with 2-24 rows is far from it: the bundled target's 7-row pass cost 2-2.6x its one-row pass.
oneDNN's inner-product kernel over a weight packed once for its blocking costs 0.5-0.7x of MKL's there (the
7-row pass 23.9 against 31.5 ms, 13 rows 25.6 against 35.0 ms, both measured in one run, 2026-12-01), and is
no faster for one row, which therefore stays on ``x @ W_t``. Both are fp32 kernels that round a little
differently (logits agree to ~1e-5), as MKL's gemv and GEMM already did; every packed weight is checked against
``x @ W_t`` once, and a weight whose check fails, or a torch without oneDNN, keeps the plain matmul.

Which is faster depends on the host: on a 2-vCPU Intel Xeon with a large cache (2026-12-02) the packed path made
the bundled target's 7-row pass slower, 15.5 against 11.8 ms. So a model's layers are timed both ways once, when
they are first laid out (``calibrate``: its matmuls in order at 7 rows, interleaved, after a warm-up, about 0.2 s
for the bundled target), and keep the packed path only where it was faster; ``SPECVIZ_PACKED`` = "on" or "off"
skips the timing and forces one.
"""
from __future__ import annotations

import os
import time

import torch

from .by_identity import IdentityCache

MIN_ROWS = 2      # one row stays on x @ W_t (as fast or faster, and the autoregressive baseline's own kernel)
BATCH_HINT = 16   # the row count oneDNN packs for; any other count still runs on the packed weight
_PACKED = IdentityCache()  # W_t -> its packed weight, or None: not packable
_state = {"enabled": True}
ENV = "SPECVIZ_PACKED"  # "on" / "off": no timing, the packed path always / never; else timed per model
CALIBRATE_ROWS, CALIBRATE_REPEATS = 7, 9  # a verify pass at k = 6; interleaved timings of each path
_CHOSEN = IdentityCache()  # W_t -> "packed" or "plain": what calibrate measured faster


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
    if _CHOSEN.get(w_t) == "plain":
        return None
    packed = _PACKED.cached(w_t, lambda: _pack(w_t, b))
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


def plain(x: torch.Tensor, w_t: torch.Tensor, b: torch.Tensor | None, residual: torch.Tensor | None = None):
    """residual + x @ W_t + b on MKL's kernels, the addends folded into the matmul (addmm)."""
    addend = residual if b is None else (b if residual is None else residual + b)
    return x @ w_t if addend is None else torch.addmm(addend, x, w_t)


def calibrate(steps: list[tuple]) -> str:
    """Times a model's matmuls, ``steps`` as (W_t, bias, with a residual) in the order a pass runs them, at
    CALIBRATE_ROWS rows on the packed path and on x @ W_t, interleaved, and keeps the packed path for these
    weights only if it was faster (the fastest of each path's timings: other work on the host only adds time).
    Returns the choice: "packed", "plain" (also where nothing could be packed); ``SPECVIZ_PACKED`` "on" / "off"
    forces one without timing."""
    steps = [(w, b, r) for w, b, r in steps if w.dtype == torch.float32 and w.device.type == "cpu"]
    forced = os.environ.get(ENV, "").strip().lower()
    if forced in ("on", "off"):
        return _choose(steps, "packed" if forced == "on" else "plain")
    if not steps or not _state["enabled"]:
        return "plain"
    for w, _, _ in steps:
        _CHOSEN.pop(w)  # timed afresh
    rows = torch.randn(CALIBRATE_ROWS, max(w.shape[0] for w, _, _ in steps), generator=torch.Generator().manual_seed(0))
    args = [(rows[:, : w.shape[0]].contiguous(), w, b, torch.zeros(CALIBRATE_ROWS, w.shape[1]) if r else None)
            for w, b, r in steps]
    if any(linear(*a) is None for a in args):  # packs each weight (and warms the packed path)
        return _choose(steps, "plain")
    times = {"packed": [], "plain": []}
    with torch.inference_mode():
        for rep in range(CALIBRATE_REPEATS + 1):
            for path in (("packed", "plain") if rep % 2 else ("plain", "packed")):
                start = time.perf_counter()
                for a in args:
                    linear(*a) if path == "packed" else plain(*a)
                if rep:  # the first round warms both
                    times[path].append(time.perf_counter() - start)
    _state["timed"] = {path: min(ts) for path, ts in times.items()}
    return _choose(steps, min(times, key=lambda p: min(times[p])))  # the fastest of each: other work only adds time


def adopt(steps: list[tuple], like: torch.Tensor) -> str:
    """``steps`` take the path ``calibrate`` chose for ``like`` (a weight of the same shapes on the same host: an
    early exit's adapter layer beside its model's layers), or are calibrated where ``like`` was not."""
    path = chosen(like)
    return calibrate(steps) if path is None else _choose(steps, path)


def _choose(steps: list[tuple], path: str) -> str:
    for w, _, _ in steps:
        _CHOSEN.put(w, path)
    return path


def chosen(w_t: torch.Tensor) -> str | None:
    """What ``calibrate`` chose for this weight ("packed", "plain"), or None if it was not timed."""
    return _CHOSEN.get(w_t)
