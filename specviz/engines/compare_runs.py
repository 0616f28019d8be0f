"""Two runs compared (before and after an upgrade, two drafts, two settings): which positions moved, with intervals,
in words; and the one comparison whose answer is known in advance, position 1 across k.

Per position the conditional rate (accepted at i / reached i: the draft's quality at that depth; a marginal rate
falls whenever an earlier position does) of each run with its Wilson interval, and the change with Newcombe's
interval (``fit.difference_interval``). The positions' intervals are Bonferroni-adjusted, each at 1 - (1 -
LEVEL) / m, so that all m hold together at LEVEL: a position "moved" when its change's interval excludes 0. The
mean acceptance length (1 + accepted drafts per step) is compared with a normal interval from each run's
per-step distribution (the histogram, or the per-position counts that give it).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd
from scipy.stats import norm

from .finding import Finding
from .fit import Positions, difference_interval, positions, wilson
from .run import EngineRun

LEVEL = 0.95
POSITION0_EFFECT = 0.05  # a change in position 1's rate this large or larger, beyond its interval, is not step boundaries
COLUMNS = ["position", "run_a", "run_b", "accepted_a", "reached_a", "rate_a", "low_a", "high_a", "accepted_b",
           "reached_b", "rate_b", "low_b", "high_b", "change", "change_low", "change_high", "moved"]


@dataclass(frozen=True)
class Comparison:
    labels: tuple[str, str]  # run a (before), run b (after)
    positions: pd.DataFrame  # COLUMNS: one row per position both runs reached; moved is "up", "down" or "no"
    level: float  # each position's interval (all of them together: LEVEL)
    length: tuple[float, float, float, float, float] | None  # mean acceptance length a, b, change, low, high
    unreached: tuple[int, ...] = ()  # positions both drafted that no step of one run (or both) reached
    only: tuple[int, ...] = ()  # positions one run drafted and the other did not


def compare_runs(a: EngineRun, b: EngineRun, labels: tuple[str, str] = ("run 1", "run 2")) -> Comparison:
    """Run b against run a, position by position. Both need per-position counts (or a histogram)."""
    pa, pb = positions(a), positions(b)
    if pa is None or pb is None:
        missing = " and ".join(label for label, p in zip(labels, (pa, pb)) if p is None)
        raise ValueError(f"comparing positions needs per-position counts (or a histogram) in both runs; {missing} "
                         "has none (vLLM's Per-position acceptance rate, SGLang's histogram and llama.cpp's "
                         "acceptance rate per position give them)")
    shared = min(len(pa.accepted), len(pb.accepted))
    both = [i for i in range(shared) if pa.reached[i] and pb.reached[i]]
    level = 1 - (1 - LEVEL) / max(len(both), 1)
    rows = [_position_row(i, pa, pb, labels, level) for i in both]
    unreached = tuple(i + 1 for i in range(shared) if i not in both)
    only = tuple(range(shared + 1, max(len(pa.accepted), len(pb.accepted)) + 1))
    return Comparison(labels, pd.DataFrame(rows, columns=COLUMNS), level, _length_change(pa, pb), unreached, only)


def _position_row(i: int, pa: Positions, pb: Positions, labels, level: float) -> dict:
    xa, na, xb, nb = pa.accepted[i], pa.reached[i], pb.accepted[i], pb.reached[i]
    change, low, high = difference_interval(xa, na, xb, nb, level)
    moved = "up" if low > 0 else "down" if high < 0 else "no"
    return dict(position=i + 1, run_a=labels[0], run_b=labels[1], accepted_a=xa, reached_a=na, rate_a=xa / na,
                low_a=wilson(xa, na, level)[0], high_a=wilson(xa, na, level)[1], accepted_b=xb, reached_b=nb,
                rate_b=xb / nb, low_b=wilson(xb, nb, level)[0], high_b=wilson(xb, nb, level)[1], change=change,
                change_low=low, change_high=high, moved=moved)


def step_histogram(pos: Positions) -> list[int]:
    """[j]: steps that accepted exactly j drafts, from the per-position counts (a_(j-1) - a_j, a_(-1) = steps)."""
    before = (pos.steps,) + pos.accepted
    return [before[j] - before[j + 1] for j in range(len(pos.accepted))] + [pos.accepted[-1]]


def _length_moments(pos: Positions) -> tuple[float, float]:
    """(mean acceptance length, its standard error) over the run's steps."""
    h = step_histogram(pos)
    mean = sum(j * n for j, n in enumerate(h)) / pos.steps
    var = sum(n * (j - mean) ** 2 for j, n in enumerate(h)) / pos.steps
    return 1 + mean, math.sqrt(var / pos.steps)


def _length_change(pa: Positions, pb: Positions) -> tuple[float, float, float, float, float]:
    (ma, sa), (mb, sb) = _length_moments(pa), _length_moments(pb)
    half = float(norm.ppf(0.5 + LEVEL / 2)) * math.hypot(sa, sb)
    return ma, mb, mb - ma, mb - ma - half, mb - ma + half


def comparison_text(c: Comparison) -> str:
    """Which positions moved, with their intervals, the direction read from each change's sign."""
    a, b = c.labels
    frame = c.positions
    moved = frame[frame.moved != "no"]
    still = frame[frame.moved == "no"].position.tolist()
    parts = [f"{b} against {a}, per position (conditional rates, accepted at i / reached i; each interval at "
             f"{c.level:.1%} so that all {len(frame)} hold together at {LEVEL:.0%})"]
    if c.length is not None:
        la, lb, change, low, high = c.length
        parts.append(f"mean acceptance length from {la:.2f} to {lb:.2f} ({change:+.2f}, {LEVEL:.0%} interval "
                     f"{low:+.2f} to {high:+.2f}): {_went(change, low, high)}")
    parts += [f"position {r.position} {'rose' if r.moved == 'up' else 'fell'} from {r.rate_a:.3f} to "
              f"{r.rate_b:.3f} ({r.accepted_a} of {r.reached_a}, then {r.accepted_b} of {r.reached_b}; "
              f"{r.change:+.3f}, interval {r.change_low:+.3f} to {r.change_high:+.3f})" for r in moved.itertuples()]
    if still:
        parts.append(f"{_positions(still)} did not move beyond {'its' if len(still) == 1 else 'their'} interval"
                     + ("" if len(still) == 1 else "s"))
    if c.unreached:
        parts.append(f"{_positions(list(c.unreached))}: no step of one run got that far, nothing to compare")
    if c.only:
        parts.append(f"{_positions(list(c.only))}: drafted by one run only, not compared")
    return "; ".join(parts)


def _went(change: float, low: float, high: float) -> str:
    if low > 0 or high < 0:
        return "it rose" if change > 0 else "it fell"
    return "not beyond its interval"


def _positions(numbers: list[int]) -> str:
    """'position 3', 'positions 1, 4 and 5', 'positions 3 to 15' (a run of three or more as a range)."""
    spans, start = [], 0
    for i in range(1, len(numbers) + 1):
        if i == len(numbers) or numbers[i] != numbers[i - 1] + 1:
            first, last = numbers[start], numbers[i - 1]
            spans += [f"{first} to {last}"] if last - first >= 2 else list(map(str, numbers[start:i]))
            start = i
    if len(numbers) == 1:
        return f"position {numbers[0]}"
    return "positions " + (spans[0] if len(spans) == 1 else ", ".join(spans[:-1]) + f" and {spans[-1]}")


def runs_compared(a: EngineRun, b: EngineRun) -> Finding | None:
    """The comparison of two runs as a finding (info), when both have per-position counts."""
    if positions(a) is None or positions(b) is None:
        return None
    c = compare_runs(a, b)
    frame = c.positions
    return Finding("runs_compared", "info", comparison_text(c),
                   {"up": frame[frame.moved == "up"].position.tolist(),
                    "down": frame[frame.moved == "down"].position.tolist(), "level": c.level})


def position0_moves_with_k(runs) -> list[Finding]:
    """Position 1's rate between runs that differ in k only: the runs pooled by (model, temperature, k), each k's
    pool against the smallest k's. One finding per k whose change's interval excludes 0 by POSITION0_EFFECT."""
    pools: dict[tuple, dict[int, list[int]]] = {}
    for i, r in enumerate(runs):
        pos = positions(r)
        if pos is not None and r.k:
            pools.setdefault((r.model, r.temperature), {}).setdefault(r.k, []).append(i)
    out = []
    for by_k in pools.values():
        ks = sorted(by_k)
        base = _first_counts(runs, by_k[ks[0]])
        for k in ks[1:]:
            finding = _position0_finding(runs, (ks[0], by_k[ks[0]], base), (k, by_k[k], _first_counts(runs, by_k[k])))
            out += [finding] if finding else []
    return out


def _first_counts(runs, members: list[int]) -> tuple[int, int]:
    return (sum(positions(runs[i]).accepted[0] for i in members), sum(positions(runs[i]).steps for i in members))


def _position0_finding(runs, base, other) -> Finding | None:
    (k0, m0, (x0, n0)), (k1, m1, (x1, n1)) = base, other
    change, low, high = difference_interval(x0, n0, x1, n1, LEVEL)
    if not (low >= POSITION0_EFFECT or high <= -POSITION0_EFFECT):
        return None
    names = [", ".join(f"run {i + 1}" for i in m) for m in (m0, m1)]
    text = (f"position 1 moves with k: its drafts are accepted {x0 / n0:.1%} of the time at k = {k0} ({x0} of {n0} "
            f"steps, {names[0]}) and {x1 / n1:.1%} at k = {k1} ({x1} of {n1}, {names[1]}), "
            f"{'up' if change > 0 else 'down'} {abs(change):.3f} ({LEVEL:.0%} interval {low:+.3f} to {high:+.3f}). "
            "A step's first draft is proposed and checked the same way whatever k, so with the same target, draft "
            f"and prompts its rate should not move (step boundaries shifting with k move it by less than "
            f"{POSITION0_EFFECT}). If these runs are one pair on the same traffic, the drafter's first position "
            "depends on k: state set up per k (CUDA graphs or padding captured for one k, an attention or tree mask "
            "sized by k), or a block drafter trained for one block size run with another")
    return Finding("position0_moves_with_k", "warning", text,
                   {"k": [k0, k1], "rates": [x0 / n0, x1 / n1], "change": change, "low": low, "high": high})
