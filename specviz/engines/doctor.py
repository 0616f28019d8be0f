"""diagnose: what an engine's counts say about its speculative decoding, in plain words.

Per run: alpha fitted under Leviathan's i.i.d. model, the conditional per-position curve beside the marginal
one and the model's own fit (``specviz.engines.fit``); a ``cliff`` (a position accepting nothing after
positions that accepted plenty); a ``budget_mismatch`` (output tokens that the accepted drafts plus one token
per step do not account for); ``positions_do_not_pay`` under a cost model; ``drift`` over a log's series
(``specviz.engines.trends``). Across runs: ``temperature_collapse``. A healthy run raises none of cliff,
collapse, mismatch or drift. Severity: "info" (a measurement), "warning" (worth a look), "problem" (a fault).
"""
from __future__ import annotations

from dataclasses import replace

from .cost import CostModel
from .finding import Finding
from .fit import Positions, decimals_for, fit_alpha, positions
from .flags import flag_for
from .run import EngineRun
from .trends import drift, temperature_collapse

CLIFF_BEFORE, CLIFF_AFTER, CLIFF_EVIDENCE = 0.3, 0.02, 20  # rate before, rate after, drafts expected to pass
IID_P, IID_EFFECT = 0.01, 0.05  # the i.i.d. model is called off when rejected at this level by this much


def diagnose(run_or_runs, cost: CostModel | None = None, check=None) -> list[Finding]:
    """Findings for one run, or for several (each run's, labelled, then what only several runs show); ``check()``
    before each run's (a request's budget)."""
    runs = [run_or_runs] if isinstance(run_or_runs, EngineRun) else list(run_or_runs)
    if not runs or not all(isinstance(r, EngineRun) for r in runs):
        raise ValueError("diagnose takes an EngineRun or a list of them (read_engine_run makes them)")
    out = []
    for i, run in enumerate(runs):
        if check is not None:
            check()
        label = f"run {i + 1} ({run.source}): " if len(runs) > 1 else ""
        for finding in run_findings(run, cost):
            numbers = finding.numbers | ({"run": i} if len(runs) > 1 else {})
            out.append(replace(finding, text=label + finding.text, numbers=numbers))
    if len(runs) > 1:
        out += temperature_collapse(runs)
    return out


def run_findings(run: EngineRun, cost: CostModel | None) -> list[Finding]:
    pos = positions(run)
    out = alpha_findings(run, pos)
    checks = [cliff(run, pos) if pos else None, budget_mismatch(run),
              positions_do_not_pay(run, pos, cost) if pos and cost else None, drift(run)]
    out += [f for f in checks if f is not None]
    return out + missing(run, pos)


def alpha_findings(run: EngineRun, pos: Positions | None) -> list[Finding]:
    fit = fit_alpha(run)
    if fit is None:
        return []
    d = decimals_for(fit.high - fit.low)
    out = [Finding("alpha", "info", f"alpha = {fit.alpha:.{d}f} ({fit.level:.0%} interval {fit.low:.{d}f} to "
                   f"{fit.high:.{d}f}), by {fit.method} under Leviathan's i.i.d. model",
                   {"alpha": fit.alpha, "low": fit.low, "high": fit.high, "method": fit.method})]
    if pos is None:
        return out
    conditional = [round(c, 3) if c is not None else None for c in pos.conditional]
    marginal = [round(m, 3) for m in pos.marginal]
    out.append(Finding("curve", "info", "per position, conditional (accepted at i / reached i): "
                       + ", ".join("-" if c is None else f"{c:.3f}" for c in conditional)
                       + "; marginal (accepted at i / steps): " + ", ".join(f"{m:.3f}" for m in marginal),
                       {"conditional": conditional, "marginal": marginal, "reached": list(pos.reached),
                        "accepted": list(pos.accepted)}))
    if fit.p_value is not None:
        out.append(iid_fit(fit, pos))
    return out


def iid_fit(fit, pos: Positions) -> Finding:
    gaps = [abs(c - fit.alpha) for c in pos.conditional if c is not None]
    numbers = {"g": fit.g, "df": fit.df, "p_value": fit.p_value, "largest_gap": max(gaps)}
    test = f"G = {fit.g:.1f} on {fit.df} degrees of freedom, p = {fit.p_value:.2g}"
    if fit.p_value >= IID_P:
        return Finding("iid_fit", "info", f"the i.i.d. model fits the per-position counts ({test})", numbers)
    if max(gaps) < IID_EFFECT:
        return Finding("iid_fit", "info", f"the i.i.d. model is rejected ({test}) but no position's conditional "
                       f"rate is more than {max(gaps):.3f} from alpha: close enough for the closed forms", numbers)
    rising = pos.conditional[-1] is not None and pos.conditional[-1] > pos.conditional[0]
    why = ("conditional rates rise with position: text that was easy to draft stays easy, so one alpha understates "
           "long drafts" if rising else "conditional rates fall with position: later drafts are worse than one "
           "alpha says")
    return Finding("iid_fit", "warning", f"the i.i.d. model does not fit ({test}): {why}; the advice's measured "
                   "curve is the one to trust up to the measured k", numbers)


def cliff(run: EngineRun, pos: Positions) -> Finding | None:
    """A position whose conditional rate drops to about zero right after a position that accepted plenty."""
    rates = pos.conditional
    for i in range(1, len(rates)):
        before, after = rates[i - 1], rates[i]
        if before is None or after is None:
            continue
        if before >= CLIFF_BEFORE and after <= CLIFF_AFTER and pos.reached[i] * before >= CLIFF_EVIDENCE:
            text = (f"position {i + 1} accepts {pos.accepted[i]} of the {pos.reached[i]} drafts of steps that got that "
                    f"far ({after:.1%}), right after position {i} accepted {before:.0%} of its own: acceptance does "
                    f"not fall off a cliff on its own. The drafter (or the engine) gives up after {i} tokens: a "
                    f"draft-length mismatch (a drafter built or trained for {i} speculative tokens run with k = "
                    f"{run.k or len(rates)}), or an off-by-one in the draft's positions or cache. Until that is "
                    f"fixed, draft {i} tokens: {flag_for(run.source, i)}")
            return Finding("cliff", "problem", text, {"position": i + 1, "rate_before": before,
                                                      "rate_after": after, "reached": pos.reached[i]})
    return None


def budget_mismatch(run: EngineRun) -> Finding | None:
    """Each verify step emits its accepted drafts plus one token: emitted should be accepted + steps, give or
    take a prefill token per request and drafts cut off by a stop."""
    if run.emitted is None or run.steps is None:
        return None
    expected, requests = run.accepted + run.steps, run.requests or 1
    short = expected - run.emitted
    numbers = {"emitted": run.emitted, "accepted_plus_steps": expected, "requests": run.requests}
    if short > requests * (run.k or 1) + 0.01 * expected:
        return Finding("budget_mismatch", "problem", f"{run.emitted} tokens were emitted, fewer than accepted + "
                       f"steps = {run.accepted} + {run.steps} = {expected}. Every verify step emits its accepted "
                       "drafts plus one token, so the counters do not describe the same tokens: accepted counts "
                       "that include the bonus token (then the mean acceptance length is overstated by one), steps "
                       "counted per batch rather than per sequence, or accepted drafts thrown away", numbers)
    if run.requests is not None and -short > requests + 0.01 * expected:
        return Finding("budget_mismatch", "warning", f"{-short} tokens were emitted outside verify steps "
                       f"(emitted {run.emitted} > accepted + steps = {expected}, beyond one prefill token per "
                       "request): steps that drafted nothing (a lookup draft finding no match) or a step counter "
                       "that misses steps", numbers)
    return None


def positions_do_not_pay(run: EngineRun, pos: Positions, cost: CostModel) -> Finding | None:
    """The measured curve's speedup for each k up to the measured one; positions past its best do not pay."""
    gains = [1.0]
    for m in pos.marginal:
        gains.append(gains[-1] + m)
    speedups = [cost.speedup(tokens, k) for k, tokens in enumerate(gains)]
    best, last = max(range(len(speedups)), key=speedups.__getitem__), len(speedups) - 1
    if best == last:
        return None
    span = f"position {last} does" if best + 1 == last else f"positions {best + 1} to {last} do"
    text = (f"{span} not pay under {cost.describe()}: they add {gains[-1] - gains[best]:.2f} tokens "
            f"per step for {last - best} more draft steps and a larger verify pass; the measured curve gives "
            f"speedup {speedups[best]:.2f} at k = {best} against {speedups[last]:.2f} at k = {last}"
            + (f". Draft {best} tokens: {flag_for(run.source, best)}" if best else
               ". Speculation does not pay at all at this cost"))
    return Finding("positions_do_not_pay", "warning", text, {"best_k": best, "measured_k": last,
                                                              "speedups": [round(s, 3) for s in speedups]})


def missing(run: EngineRun, pos: Positions | None) -> list[Finding]:
    out = []
    if run.steps is None:
        out.append(Finding("missing", "info", "no verify-step count: alpha, the per-position curve and the budget "
                           "check need one (vLLM and llama.cpp: their /metrics or log lines report steps)"))
    elif pos is None:
        out.append(Finding("missing", "info", "no per-position counts: no cliff check, and alpha "
                           + ("from moments only" if run.k else "not at all (k is not reported either)")))
    if run.emitted is None:
        out.append(Finding("missing", "info", "no output-token count: the budget check is skipped"))
    return out
