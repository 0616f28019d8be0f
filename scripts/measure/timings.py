"""How a measurement script prints repeated figures (timings, tokens/s, ratios): their median and range.

    from timings import spread   # a script run as python scripts/measure/<name>.py
    spread([3.0, 1.0, 2.0])      # "2.0 [1.0-3.0]"
"""
from __future__ import annotations

import statistics


def spread(xs: list[float], fmt: str = ".1f") -> str:
    """``median [min-max]`` of ``xs``, each figure in the format ``fmt`` (e.g. ".2f")."""
    if not xs:
        raise ValueError("spread needs at least one figure")
    return f"{statistics.median(xs):{fmt}} [{min(xs):{fmt}}-{max(xs):{fmt}}]"
