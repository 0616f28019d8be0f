"""What a conformance test can detect: the smallest bias caught with probability 0.95 at the N drawn, and the N a
chosen bias needs. The bias is TV moved from the commonest category of the pooled law to the second; the test's
power is read from the noncentral chi-square approximation (``specviz.conformance.stats``'s docstring), at the
level Holm's first step uses (alpha / m): a lower bound on Holm's power for that test."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy.stats import chi2, ncx2

from .stats import MIN_EXPECTED, table_test


def biased(law: Sequence[float], tv: float) -> np.ndarray:
    """``law`` (sorted commonest first) with ``tv`` moved from its first category to its second."""
    b = np.array(law, float)
    if len(b) < 2 or not 0 <= tv <= b[0]:
        raise ValueError(f"a bias of {tv:g} cannot be moved off a category of probability {b[0]:g}")
    b[0] -= tv
    b[1] += tv
    return b


def kept_law(law: Sequence[float], n_on: int, n_off: int) -> np.ndarray:
    """The law, its rare categories (expected < MIN_EXPECTED) merged into one cell, sorted commonest first (the
    merged cell too: kept_law of its own answer is that answer, so a stated bias has one shape however often the
    law is kept)."""
    a = np.sort(np.asarray(law, float))[::-1]
    a = a[a > 0] / a.sum()
    keep = a * min(n_on, n_off) >= MIN_EXPECTED
    rest = a[~keep].sum()
    return np.sort(np.append(a[keep], rest) if rest > 0 else a[keep])[::-1]


def power(law: Sequence[float], tv: float, n_on: int, n_off: int, alpha: float) -> float:
    """P(the chi-square test at level alpha flags a bias of ``tv``) at these sample sizes (noncentral chi-square)."""
    a = kept_law(law, n_on, n_off)
    if len(a) < 2:
        return 0.0
    b = biased(a, min(tv, a[0]))
    n = n_on + n_off
    m = (n_on * a + n_off * b) / n
    lam = n_on * n_off / n * float(((a - b) ** 2 / m).sum())
    df = len(a) - 1
    return float(ncx2.sf(chi2.ppf(1 - alpha, df), df, lam))


def detectable_tv(law: Sequence[float], n_on: int, n_off: int, alpha: float, target: float = 0.95) -> float | None:
    """The smallest bias caught with probability ``target`` (bisection on ``power``); None if even moving all of
    the commonest category's mass would not be."""
    a = kept_law(law, n_on, n_off)
    if len(a) < 2 or power(a, a[0], n_on, n_off, alpha) < target:
        return None
    lo, hi = 0.0, float(a[0])
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if power(a, mid, n_on, n_off, alpha) < target else (lo, mid)
    return hi


def plan_n(law: Sequence[float], tv: float, alpha: float, target: float = 0.95, most: int = 10**7) -> int:
    """Samples per mode (on and off alike) for a bias of ``tv`` to be caught with probability ``target``."""
    if not 0 < tv <= max(law):
        raise ValueError(f"the bias must be in (0, {max(law):g}] for this law, got {tv!r}")
    hi = 8
    while power(law, tv, hi, hi, alpha) < target:
        hi *= 2
        if hi > most:
            raise ValueError(f"a bias of {tv:g} needs more than {most} samples per mode at this law")
    lo = hi // 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if power(law, tv, mid, mid, alpha) < target else (lo, mid)
    return hi


def simulated_power(law_on: Sequence[float], law_off: Sequence[float], n_on: int, n_off: int, alpha: float,
                    repeats: int, rng: np.random.Generator) -> float:
    """The detection rate measured: ``repeats`` pairs of multinomial samples, each tested by ``table_test`` after
    the same merging of rare categories as the kit's (``kept_law`` on the pooled law)."""
    hits = 0
    for _ in range(repeats):
        table = _merge_rare(np.stack([rng.multinomial(n_on, law_on), rng.multinomial(n_off, law_off)]))
        expected = np.outer(table.sum(1), table.sum(0)) / table.sum()
        if table.shape[1] > 2 and expected.min() > 0:  # table_test's chi-square, without scipy's per-call cost
            hits += chi2.sf(((table - expected) ** 2 / expected).sum(), table.shape[1] - 1) < alpha
        else:
            hits += table_test(table)[2] < alpha
    return hits / repeats


def _merge_rare(table: np.ndarray) -> np.ndarray:
    total = table.sum(0)
    keep = total * min(table.sum(1)) / total.sum() >= MIN_EXPECTED
    rest = table[:, ~keep].sum(1, keepdims=True)
    return np.hstack([table[:, keep], rest]) if rest.sum() else table[:, keep]
