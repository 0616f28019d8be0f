"""Direction words read off a run's numbers: what a caption or a lesson's reveal may say about how a number moved.

A text that states a direction (rose, fell, above, below) takes it from here, from the two numbers it shows beside
it, never from what theory expects. ``change(before, after)`` is UP, DOWN or SAME: a change counts only beyond
``SAME_WITHIN`` of the first value and beyond ``noise``, the run's own uncertainty where it has one (say two
standard errors of a difference of two counted rates, ``rate_noise``). ``interval(lo, hi)`` reads a range of ratios
(a race's) and says NOISE where the range straddles the band. ``moved`` and ``versus`` put a verdict in words.
Pure: no model, no gradio; the app's captions and the lessons both read their words here.
"""
from __future__ import annotations

import math

UP, DOWN, SAME, NOISE = "up", "down", "about the same", "within noise"
SAME_WITHIN = 0.05  # a change under 5% of the first value counts as the same
MOVED = {UP: "rose", DOWN: "fell", SAME: "stayed about the same"}
VERSUS = {UP: "above", DOWN: "below", SAME: "about the same as"}


def change(before: float, after: float, within: float = SAME_WITHIN, noise: float = 0.0) -> str:
    """UP, DOWN or SAME from ``before`` to ``after``: a change counts where it exceeds both ``within`` times
    |before| and ``noise`` (absolute). ValueError for a number that is not one (NaN)."""
    before, after = float(before), float(after)
    if math.isnan(before) or math.isnan(after):
        raise ValueError(f"no direction between {before} and {after}: a number is missing")
    band = max(within * abs(before), noise)
    return UP if after > before + band else DOWN if after < before - band else SAME


def interval(lo: float, hi: float, within: float = SAME_WITHIN) -> str:
    """A ratio's range [lo, hi] read as a direction: UP or DOWN where the whole range is past the band,
    SAME where the whole range is inside it, NOISE where it straddles 1 - within or 1 + within."""
    if lo > 1 + within:
        return UP
    if hi < 1 - within:
        return DOWN
    return SAME if lo >= 1 - within and hi <= 1 + within else NOISE


def moved(before: float, after: float, within: float = SAME_WITHIN, noise: float = 0.0) -> str:
    """"rose", "fell" or "stayed about the same", from before to after (``change``)."""
    return MOVED[change(before, after, within, noise)]


def versus(value: float, reference: float, within: float = SAME_WITHIN, noise: float = 0.0) -> str:
    """"above", "below" or "about the same as": ``value`` set against ``reference`` (``change`` from it)."""
    return VERSUS[change(reference, value, within, noise)]


def rate_noise(a: float, n_a: int, b: float, n_b: int, z: float = 2.0) -> float:
    """``z`` standard errors of the difference of two counted rates a (of n_a trials) and b (of n_b): a gap smaller
    than this is what a rerun with another seed could give. Infinite where a rate counts nothing."""
    if n_a <= 0 or n_b <= 0:
        return math.inf
    return z * math.sqrt(a * (1 - a) / n_a + b * (1 - b) / n_b)
