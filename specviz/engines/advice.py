"""advise: the k to run with, from a run's counts and a cost model, and the flag that sets it.

Two curves of expected tokens per step: the i.i.d. fit's (Leviathan's E[tau] = (1 - alpha^(k+1)) / (1 - alpha),
for any k, with alpha's interval carried through) and the measured one (1 + the sum of the marginal per-position
rates, for k up to the k the run used). Speedup = tokens per step / (drafting + v(k + 1)) (``CostModel``; the
drafting priced by the drafter's kind: k c, c for a block, 0 for a lookup). The best k comes with the range of
best k over alpha's interval, and numbers are shown no more precisely than that interval allows.

The advice rests on the model the doctor accepts: where it rejects the i.i.d. model (``fit.iid_rejected``) the best
k is the measured curve's, which says nothing beyond the run's own k; where the counts show a wiring fault
(nothing accepted, all-or-nothing acceptance) there is no k to advise and ``advise`` says so. A best k at the edge
of the table (or of the measured curve) is said to be there. A block drafter's table stops at the run's k: a
longer block needs a drafter trained for it.
"""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from ..theory import expected_tokens
from .cost import DRAFTERS, CostModel, drafter_kind
from .findings_faults import all_or_nothing, nothing_accepted
from .fit import decimals_for, fit_alpha, iid_rejected, positions
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
    basis: str = "i.i.d. fit"  # the curve best_k comes from: "i.i.d. fit" or "measured curve"


def advise(run: EngineRun, cost: CostModel, max_k: int | None = None, drafter: str | None = None) -> Advice:
    """The k to run with; ``drafter``: the drafter's kind, one of ``cost.DRAFTERS`` (None: sequential)."""
    kind = drafter_kind(drafter)
    fit = fit_alpha(run)
    if fit is None:
        raise ValueError("advice needs verify steps with per-position counts (or steps and k): this run reports "
                         "only totals" + (f" ({run.source})" if run.source else ""))
    pos = positions(run)
    refuse_faults(run, pos)
    measured_k = len(pos.accepted) if pos else 0
    top = max_k or table_top(run.k or measured_k, kind)
    table = pd.DataFrame([_row(k, fit, pos, cost, measured_k, kind) for k in range(1, top + 1)])
    best, low_best, high_best = (_best(table[column]) for column in ("speedup_iid", "speedup_iid_low",
                                                                        "speedup_iid_high"))
    measured = _best(table["speedup_measured"].dropna()) if measured_k else None
    width = float(table.loc[table.k == max(best, 1), "speedup_iid_high"].iloc[0]
                  - table.loc[table.k == max(best, 1), "speedup_iid_low"].iloc[0])
    table = table.round(decimals_for(width) if width > 0 else 3)
    notes = [f"alpha {fit.alpha:.3f} ({fit.low:.3f} to {fit.high:.3f}) by {fit.method}", f"cost: {cost.describe(kind)}"]
    if run.drafted is not None and run.steps and run.k and run.drafted < run.steps * run.k:
        notes.append(f"{run.drafted} drafts in {run.steps} steps, fewer than the {run.steps * run.k} of k = {run.k} a "
                     "step: the fit takes every step as drafting k, so alpha is understated")
    basis, best_range = "i.i.d. fit", (min(low_best, high_best), max(low_best, high_best))
    if pos is not None and iid_rejected(fit, pos):
        basis, best, best_range = "measured curve", measured, (measured, measured)
    notes += edge_notes(basis, best, measured, measured_k, top, kind, fit)
    flag = flag_for(run.source, best) if best else "turn speculative decoding off: no k pays at this cost"
    return Advice(table=table, best_k=best, best_k_range=best_range, best_k_measured=measured, alpha=fit.alpha,
                  alpha_range=(fit.low, fit.high), flag=flag, notes=tuple(notes), basis=basis)


def table_top(run_k: int, kind: str) -> int:
    """The table's last k: twice the run's k (at least 8, at most MAX_K); a block drafter's own block."""
    if kind == "block" and run_k:
        return run_k
    return min(MAX_K, max(8, 2 * run_k))


def refuse_faults(run: EngineRun, pos) -> None:
    """No k to advise where the counts show a wiring fault: tuning k does not fix it."""
    for check in (nothing_accepted(run, pos), all_or_nothing(run, pos)):
        if check is not None and check.severity == "problem":
            raise ValueError(f"no advice on k: {check.text.split('. ')[0]}. That is a fault to fix (the doctor's "
                             f"{check.code} finding says what to check), not a k to tune")


def edge_notes(basis: str, best: int, measured: int | None, measured_k: int, top: int, kind: str, fit) -> list[str]:
    """What the advice cannot see: a best k at the last k of its table or of the measured curve."""
    notes = []
    if basis == "measured curve":
        notes.append(f"the i.i.d. model is rejected (G-test p = {fit.p_value:.2g}): the best k is the measured "
                     f"curve's, which goes no further than the run's k = {measured_k}")
        if best == measured_k:
            notes.append(f"the measured curve still gains at its last position, k = {measured_k}: whether longer "
                         "drafts pay is not measured, and the model that would extrapolate is rejected, so no advice "
                         f"beyond k = {measured_k}: run with a larger k to measure it")
    elif best and best == top:
        notes.append(f"the best k is the table's last, k = {top}: the speedup still rises there, so a longer draft "
                     f"may pay more than the table shows" + ("" if kind != "block" else
                                                             " (for a block drafter, one trained for a longer block)"))
    if basis == "i.i.d. fit" and measured and measured == measured_k and measured_k < top:
        notes.append(f"the measured curve's best is its last position, k = {measured_k}: beyond it only the i.i.d. "
                     "fit speaks")
    if kind == "block":
        notes.append(f"{DRAFTERS[kind]}: the table stops at the run's k = {top}, the block it drafts; a longer block "
                     "needs a drafter trained for it")
    return notes


def _row(k: int, fit, pos, cost: CostModel, measured_k: int, kind: str = "sequential") -> dict:
    tokens = {name: expected_tokens(a, k) for name, a in (("", fit.alpha), ("_low", fit.low), ("_high", fit.high))}
    row = {"k": k, "tokens_iid": tokens[""], "tokens_iid_low": tokens["_low"], "tokens_iid_high": tokens["_high"]}
    row |= {f"speedup_iid{s}": cost.speedup(t, k, kind) for s, t in tokens.items()}
    measured = 1 + sum(pos.marginal[:k]) if pos and k <= measured_k else None
    row["tokens_measured"] = measured
    row["speedup_measured"] = cost.speedup(measured, k, kind) if measured is not None else None
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
    span += f", from the {advice.basis}"
    measured = (f"; the measured curve's best: k = {advice.best_k_measured}"
                if advice.best_k_measured is not None else "")
    return f"best {span}{measured}\nset it with: {advice.flag}\n" + "\n".join(f"  {n}" for n in advice.notes)
