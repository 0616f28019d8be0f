"""How a measurement script prints repeated figures (timings, tokens/s, ratios): their median and range, or a
median and how far another sample of the same kind could move it.

    from timings import spread   # a script run as python scripts/measure/<name>.py
    spread([3.0, 1.0, 2.0])      # "2.0 [1.0-3.0]"
    median_interval([1.2, 1.5, 1.3, 1.7])  # "1.40x [1.20-1.70]": the median and its 95% bootstrap interval
"""
from __future__ import annotations

import statistics


def spread(xs: list[float], fmt: str = ".1f") -> str:
    """``median [min-max]`` of ``xs``, each figure in the format ``fmt`` (e.g. ".2f")."""
    if not xs:
        raise ValueError("spread needs at least one figure")
    return f"{statistics.median(xs):{fmt}} [{min(xs):{fmt}}-{max(xs):{fmt}}]"


def median_interval(ratios: list[float], draws: int = 2000) -> str:
    """The median of ``ratios`` and its 95% bootstrap interval (the figures resampled with replacement ``draws``
    times, a fixed seed), as ``1.45x [1.31-1.60]``: how far another set of prompts of the same kind could move the
    median."""
    import numpy as np

    if not ratios:
        raise ValueError("median_interval needs at least one figure")
    r = np.asarray(ratios, dtype=np.float64)
    medians = np.median(r[np.random.default_rng(0).integers(0, len(r), (draws, len(r)))], axis=1)
    lo, hi = np.percentile(medians, [2.5, 97.5])
    return f"{np.median(r):.2f}x [{lo:.2f}-{hi:.2f}]"
