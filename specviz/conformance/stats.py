"""The two-sample statistics of the conformance kit, as pure functions of token sequences and counts.

Speculation on and off should emit the same law. Per tested position i: (a) the joint law of the prefix
(t_1..t_i), and (b) the law of t_i given the most common prefix (t_1..t_{i-1}); each a chi-square test of
homogeneity on a 2 x K table (on, off) whose rare categories (expected count < ``MIN_EXPECTED`` in either row) are
merged into one, then Holm's correction over every test of a run. Power: the chi-square statistic under an
alternative is about noncentral chi-square with df = K - 1 and noncentrality
    lambda = n_on n_off / (n_on + n_off) * sum_k (a_k - b_k)^2 / m_k,   m_k = (n_on a_k + n_off b_k) / (n_on + n_off),
for the canonical bias "TV moved from the commonest category to the second" (the bias a test of this kind finds
hardest among two-cell moves, as m_k is largest there).
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Sequence

import numpy as np
import pandas as pd
from scipy.stats import chi2_contingency, fisher_exact

MIN_EXPECTED = 5.0
OTHER = "(merged)"


def merged_table(on: Sequence[Hashable], off: Sequence[Hashable], min_expected: float = MIN_EXPECTED):
    """(labels, table 2 x K): counts per category in each sample, commonest first; categories whose expected count
    min(n_on, n_off) * total / N is below ``min_expected`` merged into ``OTHER`` (itself merged on until it is
    big enough, or holds everything)."""
    a, b = Counter(on), Counter(off)
    n_small, n = min(len(on), len(off)), len(on) + len(off)
    if n_small == 0:
        raise ValueError("both samples need at least one value")
    cats = sorted(set(a) | set(b), key=lambda c: (-(a[c] + b[c]), str(c)))
    keep = [c for c in cats if n_small * (a[c] + b[c]) / n >= min_expected]
    rest = [c for c in cats if c not in keep]
    while rest and keep and n_small * sum(a[c] + b[c] for c in rest) / n < min_expected:
        rest.append(keep.pop())  # the smallest kept category joins the merged one
    labels = keep + ([OTHER] if rest else [])
    table = np.array([[x[c] for c in keep] + ([sum(x[c] for c in rest)] if rest else []) for x in (a, b)])
    return labels, table


def table_test(table: np.ndarray) -> tuple[float, int, float, str]:
    """(statistic, df, p-value, method) of homogeneity for a 2 x K count table: chi-square without continuity
    correction; Fisher's exact test for a 2 x 2 table with an expected count below 5; one category: p = 1."""
    table = np.asarray(table)
    table = table[:, table.sum(0) > 0]
    if table.shape[1] < 2:
        return 0.0, 0, 1.0, "one category"
    expected = np.outer(table.sum(1), table.sum(0)) / table.sum()
    if table.shape[1] == 2 and expected.min() < MIN_EXPECTED:
        return float("nan"), 1, float(fisher_exact(table).pvalue), "Fisher exact"
    stat, p, dof, _ = chi2_contingency(table, correction=False)
    return float(stat), int(dof), float(p), "chi-square"


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the input's order: the i-th smallest times (m - i + 1), made
    non-decreasing, capped at 1."""
    p = np.asarray(pvalues, float)
    order = np.argsort(p, kind="stable")
    adjusted = np.minimum(1.0, np.maximum.accumulate(p[order] * (len(p) - np.arange(len(p)))))
    out = np.empty_like(p)
    out[order] = adjusted
    return out.tolist()


def position_tests(on: Sequence[Sequence[int]], off: Sequence[Sequence[int]], positions: Sequence[int],
                   min_group: int = 20) -> pd.DataFrame:
    """One row per (position, kind): kind 'joint' (the prefix t_1..t_i) and 'conditional' (t_i given the modal
    t_1..t_{i-1}; skipped, p = NaN, where either side holds fewer than ``min_group`` samples with that prefix).
    Positions are 1-based; a sequence ended early reads '<end>' past its end."""
    rows = []
    for i in positions:
        prefix = [tuple(_padded(s, i)) for s in on], [tuple(_padded(s, i)) for s in off]
        rows.append(_row(i, "joint", "", *prefix))
        if i == 1:  # the conditional test of token 1 is the joint one
            continue
        modal = Counter(t[:-1] for t in prefix[0] + prefix[1]).most_common(1)[0][0]
        given = [t[-1] for t in prefix[0] if t[:-1] == modal], [t[-1] for t in prefix[1] if t[:-1] == modal]
        if min(map(len, given)) >= min_group:
            rows.append(_row(i, "conditional", " ".join(map(str, modal)), *given))
        else:
            rows.append(dict(position=i, kind="conditional", given=" ".join(map(str, modal)), n_on=len(given[0]),
                             n_off=len(given[1]), categories=0, statistic=np.nan, df=0, pvalue=np.nan,
                             method=f"skipped: under {min_group} samples with this prefix", law="", tv=np.nan))
    return pd.DataFrame(rows)


def _padded(seq: Sequence[int], i: int) -> list:
    return list(seq[:i]) + ["<end>"] * max(0, i - len(seq))


def _row(i: int, kind: str, given: str, on: list, off: list) -> dict:
    labels, table = merged_table(on, off)
    stat, df, p, method = table_test(table)
    law = table.sum(0) / table.sum()  # pooled, for the power
    tv = 0.5 * float(np.abs(table[0] / table[0].sum() - table[1] / table[1].sum()).sum())
    return dict(position=i, kind=kind, given=given, n_on=len(on), n_off=len(off), categories=len(labels),
                statistic=stat, df=df, pvalue=p, method=method, law=" ".join(f"{x:.4f}" for x in law), tv=tv)
