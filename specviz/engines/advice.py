"""advise: the k to run with, from a run's counts and a cost model, and the flag that sets it.

Two curves of expected tokens per step: the i.i.d. fit's (Leviathan's E[tau] = (1 - alpha^(k+1)) / (1 - alpha),
for any k, with alpha's interval carried through) and the measured one (1 + the sum of the marginal per-position
rates, for k up to the k the run used). Speedup = tokens per step / (k c + v(k + 1)) (``CostModel``). The best k
comes with the range of best k over alpha's interval, and numbers are shown no more precisely than that
interval allows.
"""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from ..theory import expected_tokens
from .cost import CostModel
from .fit import decimals_for, fit_alpha, positions
from .flags import flag_for
from .run import EngineRun

MAX_K = 16


@dataclass(frozen=True)
class Advice:
    table: pd.DataFrame  # one row per k: tokens and speedup, i.i.d. fit (with its interval) and measured
    best_k: int  # 0: speculation does not pay at this cost
    best_k_range: tuple[int, int]  # the best k over alpha's interval
    best_k_measured: int | None  # the measured curve's best, up to the run's own k
    alpha: float
    alpha_range: tuple[float, float]
    flag: str
    notes: tuple[str, ...]


def advise(run: EngineRun, cost: CostModel, max_k: int | None = None) -> Advice:
    fit = fit_alpha(run)
    if fit is None:
        raise ValueError("advice needs verify steps with per-position counts (or steps and k): this run reports "
                         "only totals" + (f" ({run.source})" if run.source else ""))
    pos = positions(run)
    measured_k = len(pos.accepted) if pos else 0
    top = max_k or min(MAX_K, max(8, 2 * (run.k or measured_k)))
    rows = [_row(k, fit, pos, cost, measured_k) for k in range(1, top + 1)]
    table = pd.DataFrame(rows)
    best, low_best, high_best = (_best(table[column]) for column in ("speedup_iid", "speedup_iid_low",
                                                                        "speedup_iid_high"))
    measured = _best(table["speedup_measured"].dropna()) if measured_k else None
    width = float(table.loc[table.k == max(best, 1), "speedup_iid_high"].iloc[0]
                  - table.loc[table.k == max(best, 1), "speedup_iid_low"].iloc[0])
    table = table.round(decimals_for(width) if width > 0 else 3)
    notes = [f"alpha {fit.alpha:.3f} ({fit.low:.3f} to {fit.high:.3f}) by {fit.method}", f"cost: {cost.describe()}"]
    if run.drafted is not None and run.steps and run.k and run.drafted < run.steps * run.k:
        notes.append(f"steps drafted {run.drafted / run.steps:.2f} tokens on average, fewer than k = {run.k}: the "
                     "fit takes every step as drafting k, so alpha is understated")
    flag = flag_for(run.source, best) if best else "turn speculative decoding off: no k pays at this cost"
    return Advice(table=table, best_k=best, best_k_range=(min(low_best, high_best), max(low_best, high_best)),
                  best_k_measured=measured, alpha=fit.alpha, alpha_range=(fit.low, fit.high), flag=flag,
                  notes=tuple(notes))


def _row(k: int, fit, pos, cost: CostModel, measured_k: int) -> dict:
    tokens = {name: expected_tokens(a, k) for name, a in (("", fit.alpha), ("_low", fit.low), ("_high", fit.high))}
    row = {"k": k, "tokens_iid": tokens[""], "tokens_iid_low": tokens["_low"], "tokens_iid_high": tokens["_high"]}
    row |= {f"speedup_iid{s}": cost.speedup(t, k) for s, t in tokens.items()}
    measured = 1 + sum(pos.marginal[:k]) if pos and k <= measured_k else None
    row["tokens_measured"] = measured
    row["speedup_measured"] = cost.speedup(measured, k) if measured is not None else None
    return row


def _best(speedups: pd.Series) -> int:
    """The k of the highest speedup, 0 when none beats plain decoding (speedup 1)."""
    speedups = speedups.astype(float)
    if speedups.empty or speedups.max() <= 1.0:
        return 0
    return int(speedups.index[speedups.argmax()]) + 1


def advice_text(advice: Advice) -> str:
    lo, hi = advice.best_k_range
    span = f"k = {advice.best_k}" + (f" (best somewhere in {lo} to {hi} over alpha's interval)" if lo != hi else "")
    measured = (f"; the measured curve's best: k = {advice.best_k_measured}"
                if advice.best_k_measured is not None else "")
    return f"best {span}{measured}\nset it with: {advice.flag}\n" + "\n".join(f"  {n}" for n in advice.notes)
