"""Counts back from the rounded figures engines print.

vLLM's log line and llama.cpp's server log print the mean acceptance length (1 + accepted / steps, two decimals)
and per-position rates (accepted at position i / steps, three decimals) but not the number of steps. Steps are
the whole numbers every printed figure is consistent with; when drafts always have k tokens, drafted / k is one
of them and is taken. What was recovered, and from what, goes into the run's notes.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

MAX_CANDIDATES = 200_000  # wider than this, the printed figures cannot pin the steps down anyway


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
    rates, k = tuple(rates), len(rates) or None
    exact = drafted // k if k and drafted is not None and drafted % k == 0 else None
    span = _span(accepted, mean_len, decimals, drafted, k)
    if span is None:
        return _from_drafts(exact, rates, accepted, rate_decimals, mean_len)
    lo, hi = span
    with_rates = [n for n in range(lo, hi + 1) if not rates or counts_for(n, rates, accepted, rate_decimals)]
    if exact is not None and exact in with_rates:
        return _recovered(exact, rates, accepted, rate_decimals, f"steps = drafted / k = {drafted} / {k}, "
                          f"consistent with the printed mean {mean_len} and per-position rates")
    if len(with_rates) == 1:
        return _recovered(with_rates[0], rates, accepted, rate_decimals,
                          f"steps = {with_rates[0]}: the one whole number the printed mean {mean_len}"
                          + (" and per-position rates fit" if rates else " fits"))
    if with_rates:
        n = min(with_rates, key=lambda m: abs(m - accepted / (mean_len - 1)))  # nearest the printed mean's
        return _recovered(n, rates, accepted, rate_decimals, f"steps = {n}, one of {len(with_rates)} values in "
                          f"[{with_rates[0]}, {with_rates[-1]}] that fit the printed figures")
    n = round(accepted / (mean_len - 1))
    return Recovered(n, None, f"steps ~ accepted / (mean - 1) = {n}; the printed per-position rates fit no whole "
                     "number of steps, so they were dropped")


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
