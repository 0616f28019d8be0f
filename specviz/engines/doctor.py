"""diagnose: what an engine's counts say about its speculative decoding, in plain words.

Per run: alpha fitted under Leviathan's i.i.d. model, the conditional per-position curve beside the marginal one and
the model's own fit (``specviz.engines.fit``); a ``cliff`` (a position accepting nothing after positions that
accepted plenty); a ``budget_mismatch`` (output tokens that the accepted drafts plus one token per step do not
account for); ``positions_do_not_pay`` under a cost model; ``drift`` within each producer's series of a log
(``specviz.engines.trends``); the faults users ask about most, ``nothing_accepted``, ``all_or_nothing`` and
``short_drafts`` (``specviz.engines.findings_faults``). Across runs: ``temperature_collapse`` (the sampled rate over
the greedy one, with its interval), ``position0_moves_with_k`` and, for two runs, ``runs_compared``
(``specviz.engines.compare_runs``). A healthy run raises none of the warnings and problems. Severity: "info" (a
measurement), "warning" (worth a look), "problem" (a fault). The drafter's kind (``cost.DRAFTERS``) prices the
positions and words the short-draft check.
"""
from __future__ import annotations

from dataclasses import replace

from .compare_runs import position0_moves_with_k, runs_compared
from .cost import CostModel, drafter_kind
from .finding import Finding
from .findings_faults import all_or_nothing, later_checks, nothing_accepted, short_drafts
from .fit import IID_EFFECT, IID_P, Positions, decimals_for, fit_alpha, positions
from .flags import flag_for
from .run import EngineRun
from .trends import drift, temperature_collapse

CLIFF_BEFORE, CLIFF_AFTER, CLIFF_EVIDENCE = 0.3, 0.02, 20  # rate before, rate after, drafts expected to pass


def diagnose(run_or_runs, cost: CostModel | None = None, check=None, drafter: str | None = None) -> list[Finding]:
    """Findings for one run, or for several (each run's, labelled, then what only several runs show); ``check()``
    before each run's (a request's budget). ``drafter``: the kind, one of ``cost.DRAFTERS`` (None: sequential)."""
    runs = [run_or_runs] if isinstance(run_or_runs, EngineRun) else list(run_or_runs)
    if not runs or not all(isinstance(r, EngineRun) for r in runs):
        raise ValueError("diagnose takes an EngineRun or a list of them (read_engine_run makes them)")
    kind = drafter_kind(drafter)
    out = []
    for i, run in enumerate(runs):
        if check is not None:
            check()
        label = f"run {i + 1} ({run.source}): " if len(runs) > 1 else ""
        for finding in run_findings(run, cost, kind):
            numbers = finding.numbers | ({"run": i} if len(runs) > 1 else {})
            out.append(replace(finding, text=label + finding.text, numbers=numbers))
    if len(runs) > 1:
        out += temperature_collapse(runs) + position0_moves_with_k(runs)
    if len(runs) == 2:
        out += [f for f in [runs_compared(*runs)] if f is not None]
    return out


def run_findings(run: EngineRun, cost: CostModel | None, drafter: str = "sequential") -> list[Finding]:
    pos = positions(run)
    faults = [nothing_accepted(run, pos), all_or_nothing(run, pos), short_drafts(run, drafter)]
    faults = [f for f in faults if f is not None]
    out = faults + alpha_findings(run, pos, broken=any(f.code == "all_or_nothing" for f in faults))
    priced = pos and cost and not any(f.severity == "problem" for f in faults)  # a fault first, then the cost
    checks = [cliff(run, pos) if pos else None, budget_mismatch(run),
              positions_do_not_pay(run, pos, cost, drafter) if priced else None, drift(run)]
    out += [f for f in checks if f is not None]
    return out + missing(run, pos)


def alpha_findings(run: EngineRun, pos: Positions | None, broken: bool = False) -> list[Finding]:
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
        out.append(iid_fit(fit, pos, broken))
    return out


def iid_fit(fit, pos: Positions, broken: bool = False) -> Finding:
    gaps = [abs(c - fit.alpha) for c in pos.conditional if c is not None]
    numbers = {"g": fit.g, "df": fit.df, "p_value": fit.p_value, "largest_gap": max(gaps)}
    test = f"G = {fit.g:.1f} on {fit.df} degrees of freedom, p = {fit.p_value:.2g}"
    if fit.p_value >= IID_P:
        return Finding("iid_fit", "info", f"the i.i.d. model fits the per-position counts ({test})", numbers)
    if max(gaps) < IID_EFFECT:
        return Finding("iid_fit", "info", f"the i.i.d. model is rejected ({test}) but no position's conditional "
                       f"rate is more than {max(gaps):.3f} from alpha: close enough for the closed forms", numbers)
    if broken:
        return Finding("iid_fit", "warning", f"the i.i.d. model does not fit ({test}): the conditional rates after "
                       "position 1 are exactly 1, all-or-nothing acceptance (see all_or_nothing), not easy text; no "
                       "model of acceptance describes these counts until that is fixed", numbers)
    return Finding("iid_fit", "warning", f"the i.i.d. model does not fit ({test}): {_shape(pos)}; the advice's "
                   "measured curve is the one to trust up to the measured k", numbers)


def _shape(pos: Positions) -> str:
    """How the conditional rates move with position, read from the first and last reached positions."""
    reached = [(i, c) for i, c in enumerate(pos.conditional, 1) if c is not None]
    (first, a), (last, b) = reached[0], reached[-1]
    span = f"from {a:.3f} at position {first} to {b:.3f} at position {last}"
    passed, checks = later_checks(pos)
    if passed == checks:
        return (f"conditional rates rise to exactly 1 after position 1 ({span}), on only {checks} later checks: too "
                "few to tell all-or-nothing acceptance (broken logits) from a stretch of well-predicted text")
    if b > a:
        return (f"conditional rates rise with position ({span}): the steps that get far are those on text the "
                "drafter predicts well, so one alpha understates long drafts")
    return f"conditional rates fall with position ({span}): later drafts are worse than one alpha says"


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


def positions_do_not_pay(run: EngineRun, pos: Positions, cost: CostModel, drafter: str = "sequential") -> Finding | None:
    """The measured curve's speedup for each k up to the measured one; positions past its best do not pay."""
    gains = [1.0]
    for m in pos.marginal:
        gains.append(gains[-1] + m)
    speedups = [cost.speedup(tokens, k, drafter) for k, tokens in enumerate(gains)]
    best, last = max(range(len(speedups)), key=speedups.__getitem__), len(speedups) - 1
    if best == last:
        return None
    span = f"position {last} does" if best + 1 == last else f"positions {best + 1} to {last} do"
    more = {"sequential": f"{last - best} more draft steps", "block": "a longer block",
            "ngram": "longer lookups"}[drafter]
    text = (f"{span} not pay under {cost.describe(drafter)}: they add {gains[-1] - gains[best]:.2f} tokens "
            f"per step for {more} and a larger verify pass; the measured curve gives "
            f"speedup {speedups[best]:.2f} at k = {best} against {speedups[last]:.2f} at k = {last}"
            + (f". Draft {best} token{'s' if best > 1 else ''}: {flag_for(run.source, best)}" if best else
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
