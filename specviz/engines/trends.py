"""What only a series or several runs show: acceptance drifting over a log (within each producer's own lines), and
acceptance collapsing when the same drafter samples instead of decoding greedily.

The collapse is judged by the ratio of the sampled acceptance rate to the greedy one, with its MOVER-R interval
(``fit.ratio_interval``; each pool's drafts taken as its trials, so with a step's drafts checked in a chain the
interval is somewhat narrow): a collapse when the whole interval lies under COLLAPSE_RATIO, whatever the greedy
rate itself.
"""
from __future__ import annotations

from scipy.stats import kendalltau

from .finding import Finding
from .fit import ratio_interval
from .producers import by_producer
from .run import EngineRun

DRIFT_MIN_INTERVALS, DRIFT_P, DRIFT_DROP, DRIFT_RELATIVE = 6, 0.01, 0.05, 0.10
COLLAPSE_RATIO, COLLAPSE_LEVEL = 0.5, 0.95  # sampling at least halves acceptance, at this confidence


def pooled(runs) -> float:
    drafted = sum(r.drafted for r in runs)
    return sum(r.accepted for r in runs) / drafted if drafted else 0.0


def drift(run: EngineRun) -> Finding | None:
    """Acceptance falling over the series, judged within each producer's own intervals (``producers``).

    Lines of concurrent producers (the engines of a data-parallel server, several API servers) interleave in one
    log; read as one series, engine A's interval would be compared with engine B's of the same moment, and traffic
    moving from a high-acceptance engine to a lower one would read as a fall though neither engine changed. Each
    producer's own lines are successive intervals, so drift is judged there. Merging each moment's lines into one
    interval instead would need a shared clock the lines do not give (API servers log on their own ticks, an idle
    engine prints no line, pasted lines carry no time), and would still call a shift of traffic between engines a
    drift. Per producer: Kendall's tau of each interval's rate against its order (a trend test that needs no model
    of how tokens within an interval correlate), at DRIFT_P divided among the producers tested (Bonferroni), and a
    fall large enough to matter; the producer with the largest fall is reported."""
    own = [(name, [r for r in parts if r.drafted]) for name, parts in by_producer(run.series).items()]
    tested = [(name, parts) for name, parts in own if len(parts) >= DRIFT_MIN_INTERVALS]
    found = [f for f in (_drift_in(parts, name, DRIFT_P / len(tested), len(own)) for name, parts in tested) if f]
    return max(found, key=lambda f: f.numbers["first"] - f.numbers["last"], default=None)


def _drift_in(intervals, producer: str | None, level: float, producers: int) -> Finding | None:
    """Drift over one producer's successive intervals (every one drafted something), at significance ``level``."""
    rates = [r.accepted / r.drafted for r in intervals]
    tau, p = kendalltau(range(len(rates)), rates)
    third = len(intervals) // 3
    first, last = pooled(intervals[:third]), pooled(intervals[-third:])
    fall = first - last
    if not (tau < 0 and p < level and fall >= DRIFT_DROP and first and fall / first >= DRIFT_RELATIVE):
        return None
    whose = f"{producer}'s intervals (one of {producers} producers, each read apart)" if producers > 1 else \
        (f"{producer}'s series" if producer else "the series")
    text = (f"acceptance fell from {first:.2f} in the first third of {whose} to {last:.2f} in the last "
            f"(Kendall's tau = {tau:.2f}, p = {p:.2g}, over {len(intervals)} intervals): the traffic changed (longer "
            "contexts, other tasks) or the drafter went stale against the target; compare the intervals' prompts, "
            "and re-fit the advice on the recent part")
    return Finding("drift", "warning", text, {"first": first, "last": last, "tau": float(tau), "p_value": float(p),
                                              "intervals": len(intervals), "producer": producer,
                                              "producers": producers})


def temperature_collapse(runs) -> list[Finding]:
    """Acceptance falling far more when sampling than Leviathan's rule allows, with the same drafter: the runs
    pooled by temperature (counts added), each sampled pool's rate over the greedy pool's, one finding per sampled
    temperature whose ratio's interval lies wholly under COLLAPSE_RATIO."""
    by_t: dict[float, list[int]] = {}
    for i, r in enumerate(runs):
        if r.temperature is not None and r.drafted:
            by_t.setdefault(float(r.temperature), []).append(i)
    if 0.0 not in by_t:
        return []
    counts = {t: (sum(runs[i].accepted for i in members), sum(runs[i].drafted for i in members))
              for t, members in by_t.items()}
    (g_accepted, g_drafted), out = counts[0.0], []
    if not g_accepted:
        return []  # nothing accepted greedily either: nothing_accepted says so
    for temperature, (accepted, drafted) in sorted(counts.items()):
        ratio, low, high = ratio_interval(accepted, drafted, g_accepted, g_drafted, COLLAPSE_LEVEL)
        if temperature > 0 and high < COLLAPSE_RATIO:
            members = by_t[temperature]
            said = (f"{_runs(members)} against {_runs(by_t[0.0])}: at greedy decoding {g_accepted} of {g_drafted} "
                    f"drafts are accepted ({g_accepted / g_drafted:.1%}), at temperature {temperature:g} {accepted} "
                    f"of {drafted} ({accepted / drafted:.1%}): {ratio:.2f} times the greedy rate "
                    f"({COLLAPSE_LEVEL:.0%} interval {low:.2f} to {high:.2f}, under {COLLAPSE_RATIO:g}). ")
            out.append(Finding("temperature_collapse", "problem", said + COLLAPSE_TEXT,
                               {"greedy_runs": by_t[0.0], "sampled_runs": members, "greedy_rate": g_accepted / g_drafted,
                                "sampled_rate": accepted / drafted, "ratio": ratio, "ratio_low": low,
                                "ratio_high": high, "temperature": temperature}))
    return out


def _runs(members: list[int]) -> str:
    return f"run {members[0] + 1}" if len(members) == 1 else "runs " + ", ".join(str(i + 1) for i in members)


COLLAPSE_TEXT = (
    "With Leviathan's rule (accept x with min(1, p(x)/q(x)), resample a rejection from norm(max(0, p - q))) "
    "acceptance is the expected sum_x min(p, q), which sampling lowers only gently: the draft's and the target's "
    "distributions flatten together. A fall this steep means the engine verifies drafts as exact guesses: a "
    "point-mass q (a draft kept only when the target happens to sample that very token) or the draft's sampled "
    "token matched against the target's own sample. What to change: pass the draft's probabilities (the full q at "
    "every drafted position) to the verifier and accept with min(1, p/q), resampling rejections from the residual")
