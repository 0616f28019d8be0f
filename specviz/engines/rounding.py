"""Counts back from the rounded figures engines print.

vLLM's log line and llama.cpp's server log print the mean acceptance length (1 + accepted / steps, two decimals)
and per-position rates (accepted at position i / steps, three decimals) but not the number of steps. Steps are
the whole numbers every printed figure is consistent with; when drafts always have k tokens, drafted / k is one
of them and is taken. What was recovered, and from what, goes into the run's notes.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .run import MAX_K

MAX_CANDIDATES = 200_000  # wider than this, the printed figures cannot pin the steps down anyway
CHUNK = 4096  # step counts checked together
GRID = 64  # step counts a search tests at once, at least
CELLS = 4096  # counts a search computes at once, at most (where GRID allows)


@dataclass(frozen=True)
class Recovered:
    steps: int | None
    accepted_per_pos: tuple[int, ...] | None
    note: str


def half_unit(decimals: int) -> float:
    """Half the last printed digit: a value printed with ``decimals`` decimals lies within this of the print."""
    return 0.5 * 10.0 ** -decimals + 1e-9


def counts_for(steps: int, rates, accepted: int, decimals: int = 3) -> tuple[int, ...] | None:
    """The per-position counts that print as ``rates`` over ``steps`` and add up to ``accepted``, or None."""
    counts = tuple(round(r * steps) for r in rates)
    if any(abs(c / steps - r) > half_unit(decimals) for c, r in zip(counts, rates)):
        return None
    if sum(counts) != accepted or any(b > a for a, b in zip((steps,) + counts, counts)):
        return None
    return counts


def recover_steps(accepted: int, mean_len: float, decimals: int = 2, rates=(), drafted: int | None = None,
                  rate_decimals: int = 3) -> Recovered:
    """Steps (and per-position counts, when rates are given) consistent with a printed mean acceptance length."""
    rates = checked_rates(rates)
    k = len(rates) or None
    _check_mean(mean_len, decimals)
    exact = drafted // k if k and drafted is not None and drafted % k == 0 else None
    span = _span(accepted, mean_len, decimals, drafted, k)
    if span is None:
        return _from_drafts(exact, rates, accepted, rate_decimals, mean_len)
    with_rates = fitting(span, rates, accepted, rate_decimals)
    if exact is not None and exact in with_rates:
        return _recovered(exact, rates, accepted, rate_decimals, f"steps = drafted / k = {drafted} / {k}, "
                          f"consistent with the printed mean {mean_len} and per-position rates")
    if len(with_rates) == 1:
        return _recovered(with_rates[0], rates, accepted, rate_decimals,
                          f"steps = {with_rates[0]}: the one whole number the printed mean {mean_len}"
                          + (" and per-position rates fit" if rates else " fits"))
    if with_rates:
        n = nearest(with_rates, accepted / (mean_len - 1) if mean_len > 1 else math.inf)  # nearest the mean's
        return _recovered(n, rates, accepted, rate_decimals, f"steps = {n}, one of {len(with_rates)} values in "
                          f"[{with_rates[0]}, {with_rates[-1]}] that fit the printed figures")
    if mean_len <= 1:
        return Recovered(None, None, f"the printed mean {mean_len} and per-position rates fit no whole number of "
                         "steps")
    n = round(accepted / (mean_len - 1))
    return Recovered(n, None, f"steps ~ accepted / (mean - 1) = {n}; the printed per-position rates fit no whole "
                     "number of steps, so they were dropped")


def checked_rates(rates) -> tuple[float, ...]:
    """Per-position rates as printed: at most MAX_K of them, each a fraction in [0, 1]."""
    rates = tuple(rates)
    if len(rates) > MAX_K:
        raise ValueError(f"{len(rates):,} per-position rates: a step drafts at most {MAX_K} tokens")
    bad = next((r for r in rates if not 0 <= r <= 1), None)
    if bad is not None:
        raise ValueError(f"a per-position acceptance rate is a fraction between 0 and 1, got {bad}")
    return rates


def _check_mean(mean_len: float, decimals: int) -> None:
    """1 + accepted / steps lies in [1, MAX_K + 1] (give or take the print's rounding)."""
    if not 1 - half_unit(decimals) <= mean_len <= MAX_K + 1 + half_unit(decimals):
        raise ValueError(f"the printed mean acceptance length {mean_len} is not between 1 and {MAX_K + 1} (1 + "
                         "accepted / steps, with at most k accepted a step)")


def fitting(span: tuple[int, int], rates, accepted: int, decimals: int = 3):
    """The steps in ``span`` that ``counts_for`` accepts, ascending (a range when no rates are given). The rounded
    counts' sum never falls as steps grow, so only the steps where it equals ``accepted`` are tried (found by
    ``_first``): for rates printed to 3 decimals, at most about 2 / (largest rate) + 1 of them, however wide the span."""
    lo, hi = span
    if not rates:
        return range(lo, hi + 1)
    r = np.asarray(rates, dtype=np.float64)
    lo = _first_sum(r, accepted, lo, hi + 1)
    hi = _first_sum(r, accepted + 1, lo, hi + 1) - 1
    out = []
    for start in range(lo, hi + 1, CHUNK):  # (steps, k) counts a chunk at a time
        steps = np.arange(start, min(start + CHUNK, hi + 1), dtype=np.int64)
        out += _counts_fit(steps, r, decimals).tolist()
    return out


def _rounded_sums(r: np.ndarray, steps: np.ndarray) -> np.ndarray:
    """sum(round(r_i x n)) for each n in ``steps``: ``counts_for``'s counts (the same float product, rounded half to
    even), added up."""
    return np.rint(steps[:, None] * r[None, :]).astype(np.int64).sum(axis=1)  # (steps, k) -> (steps,)


def _first_sum(r: np.ndarray, target: int, lo: int, hi: int) -> int:
    """The least n in [lo, hi) whose rounded counts add up to at least ``target``, or hi. Each nonzero count is
    within a half of r_i x n, so the sum is below ``target`` for n under (target - m / 2) / R and reaches it from
    (target + m / 2) / R on (R = sum r_i, m nonzero rates; a step more either side for the float products): only
    the stretch between, about 1 / (the mean nonzero rate) wide, is searched."""
    total, half = float(r.sum()), np.count_nonzero(r) / 2
    if total <= 0:
        return lo if target <= 0 else hi
    below = math.floor((target - half) / total * (1 - 1e-9)) - 1
    reached = math.ceil((target + half) / total * (1 + 1e-9)) + 1
    if reached <= lo:
        return lo
    if below >= hi:
        return hi
    grid = max(GRID, CELLS // len(r))  # at most about CELLS counts a call
    return _first(max(lo, below), min(hi, reached), lambda n: _rounded_sums(r, n) >= target, grid)


def _counts_fit(steps: np.ndarray, r: np.ndarray, decimals: int) -> np.ndarray:
    """The steps whose counts pass ``counts_for``'s rate and order checks, for many step counts at once (the sum is
    checked by the caller)."""
    counts = np.rint(steps[:, None] * r[None, :])  # (steps, k)
    ok = (np.abs(counts / steps[:, None] - r[None, :]) <= half_unit(decimals)).all(axis=1)
    whole = counts.astype(np.int64)
    before = np.concatenate([steps[:, None], whole[:, :-1]], axis=1)  # steps, then position i - 1's count
    return steps[ok & (whole <= before).all(axis=1)]


def _first(lo: int, hi: int, holds, grid: int = GRID) -> int:
    """The least n in [lo, hi) where ``holds`` (true from some n on; given an array of n, it answers for each), or
    hi: ``grid`` points of the range tested at once, then the stretch between the last false and the first true."""
    while hi - lo > grid:
        points = lo + np.arange(grid, dtype=np.int64) * (hi - 1 - lo) // (grid - 1)  # ascending, lo to hi - 1
        true = np.flatnonzero(holds(points))
        if not len(true):
            return hi
        j = true[0]
        if j == 0:
            return lo
        lo, hi = int(points[j - 1]) + 1, int(points[j])
    points = np.arange(lo, hi, dtype=np.int64)
    true = np.flatnonzero(holds(points))
    return int(points[true[0]]) if len(true) else hi


def nearest(candidates, x: float) -> int:
    """The candidate nearest x, the smaller on a tie (as ``min`` over them in order); a range in constant time."""
    if x >= candidates[-1]:
        return candidates[-1]
    if isinstance(candidates, range):
        if x <= candidates[0]:
            return candidates[0]
        candidates = [math.floor(x), math.floor(x) + 1]
    return min(candidates, key=lambda m: abs(m - x))


def _span(accepted, mean_len, decimals, drafted, k) -> tuple[int, int] | None:
    """The range of steps the rounded mean allows (None when it pins nothing: nothing accepted, or too wide)."""
    half = half_unit(decimals)
    low_gain, high_gain = mean_len - 1 - half, mean_len - 1 + half
    if accepted == 0 or high_gain <= 0:
        return None
    lo = math.ceil(accepted / high_gain)
    hi = math.floor(accepted / low_gain) if low_gain > 0 else (drafted if drafted is not None else lo + MAX_CANDIDATES)
    if drafted is not None:  # every step drafted between 1 and k tokens
        hi = min(hi, drafted)
        lo = max(lo, math.ceil(drafted / k)) if k else lo
    if hi < lo or hi - lo > MAX_CANDIDATES:
        return None
    return lo, hi


def _from_drafts(exact, rates, accepted, rate_decimals, mean_len) -> Recovered:
    if exact is None:
        return Recovered(None, None, f"the printed mean {mean_len} does not pin the number of steps down")
    return _recovered(exact, rates, accepted, rate_decimals, "steps = drafted / k (every draft of k tokens)")


def _recovered(steps, rates, accepted, rate_decimals, note) -> Recovered:
    counts = counts_for(steps, rates, accepted, rate_decimals) if rates and steps else None
    if rates and counts is None:
        note += "; the per-position rates fit no counts at these steps, so they were dropped"
    elif rates:
        note += "; per-position counts = rate x steps, rounded"
    return Recovered(steps, counts, note)
