"""What only a series or several runs show: acceptance drifting over a log, and acceptance collapsing when the
same drafter samples instead of decoding greedily."""
from __future__ import annotations

from scipy.stats import kendalltau

from .finding import Finding
from .run import EngineRun

DRIFT_MIN_INTERVALS, DRIFT_P, DRIFT_DROP, DRIFT_RELATIVE = 6, 0.01, 0.05, 0.10
COLLAPSE_GREEDY, COLLAPSE_FLOOR, COLLAPSE_SHARE, COLLAPSE_MIN_DRAFTS = 0.3, 0.05, 0.25, 50


def pooled(runs) -> float:
    drafted = sum(r.drafted for r in runs)
    return sum(r.accepted for r in runs) / drafted if drafted else 0.0


def drift(run: EngineRun) -> Finding | None:
    """Acceptance falling over the series: Kendall's tau of each interval's rate against its order (a trend
    test that needs no model of how tokens within an interval correlate), and a fall large enough to matter."""
    intervals = [r for r in run.series if r.drafted]
    if len(intervals) < DRIFT_MIN_INTERVALS:
        return None
    rates = [r.accepted / r.drafted for r in intervals]
    tau, p = kendalltau(range(len(rates)), rates)
    third = len(intervals) // 3
    first, last = pooled(intervals[:third]), pooled(intervals[-third:])
    fall = first - last
    if not (tau < 0 and p < DRIFT_P and fall >= DRIFT_DROP and first and fall / first >= DRIFT_RELATIVE):
        return None
    text = (f"acceptance fell from {first:.2f} in the first third of the series to {last:.2f} in the last "
            f"(Kendall's tau = {tau:.2f}, p = {p:.2g}, over {len(intervals)} intervals): the traffic changed (longer "
            "contexts, other tasks) or the drafter went stale against the target; compare the intervals' prompts, "
            "and re-fit the advice on the recent part")
    return Finding("drift", "warning", text, {"first": first, "last": last, "tau": float(tau), "p_value": float(p),
                                              "intervals": len(intervals)})


def temperature_collapse(runs) -> list[Finding]:
    """High acceptance at greedy decoding and near none when sampling, with the same drafter: the runs pooled by
    temperature (counts added), the greedy pool against each sampled one, one finding per sampled temperature."""
    by_t: dict[float, list[int]] = {}
    for i, r in enumerate(runs):
        if r.temperature is not None and r.drafted:
            by_t.setdefault(float(r.temperature), []).append(i)
    pools = {t: (members, pooled([runs[i] for i in members])) for t, members in by_t.items()
             if sum(runs[i].drafted for i in members) >= COLLAPSE_MIN_DRAFTS}
    if 0.0 not in pools:
        return []
    g_members, g_rate = pools[0.0]
    out = []
    for temperature, (members, s_rate) in sorted(pools.items()):
        if temperature > 0 and g_rate >= COLLAPSE_GREEDY and s_rate <= max(COLLAPSE_FLOOR, COLLAPSE_SHARE * g_rate):
            text = f"{_runs(members)} against {_runs(g_members)}: " + _collapse_text(g_rate, s_rate, temperature)
            out.append(Finding("temperature_collapse", "problem", text,
                               {"greedy_runs": g_members, "sampled_runs": members, "greedy_rate": g_rate,
                                "sampled_rate": s_rate, "temperature": temperature}))
    return out


def _runs(members: list[int]) -> str:
    return f"run {members[0] + 1}" if len(members) == 1 else "runs " + ", ".join(str(i + 1) for i in members)


def _collapse_text(g_rate: float, s_rate: float, temperature: float) -> str:
    return (f"at greedy decoding {g_rate:.0%} of drafts are accepted, at temperature {temperature:g} only "
            f"{s_rate:.1%}. With Leviathan's rule (accept x with min(1, p(x)/q(x)), resample a rejection from "
            "norm(max(0, p - q))) acceptance is the expected sum_x min(p, q), which sampling lowers only gently: the "
            "draft's and the target's distributions flatten together. A fall to near zero means the engine "
            "verifies drafts as exact guesses: a point-mass q (a draft kept only when the target happens to sample "
            "that very token) or the draft's sampled token matched against the target's own sample. What to "
            "change: pass the draft's probabilities (the full q at every drafted position) to the verifier and "
            "accept with min(1, p/q), resampling rejections from the residual")
