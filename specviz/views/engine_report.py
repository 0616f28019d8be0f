"""An engine's run in words: its format, counts, rates, the doctor's findings, the advice and the cost model, as
Markdown. Every string an engine (or a visitor) provided goes through ``md``: each character through ``timeline.esc`` (no
markup), Markdown's own punctuation as entities (no links, emphasis, table cells or LaTeX from input)."""
from __future__ import annotations

from dataclasses import replace

import pandas as pd

from ..engines import Advice, CostModel, EngineRun, Finding, MeanRun, fit_alpha, mean_figures, rates, underived
from ..engines.flags import engine_of, flag_for
from ..engines.producers import by_producer
from ..engines.run import count_fields
from .timeline import esc

MARKDOWN = {c: f"&#{ord(c)};" for c in "\\`*_[]|#~$:@"}  # emphasis, code, links, tables, LaTeX, autolinks
SEVERITY = {"problem": "**Problem**", "warning": "**Worth a look**", "info": "Measured"}
ENGINES = ("vllm", "llama.cpp", "sglang", "tensorrt-llm")


def md(text) -> str:
    """``text`` inert in Markdown and HTML: it renders as itself."""
    return "".join(MARKDOWN.get(ch) or esc(ch) for ch in str(text))


def run_markdown(run: EngineRun, label: str = "") -> str:
    """The detected format, the counts as reported, what the reader derived (the run's notes), every rate with
    its definition."""
    head = f"### {md(label)}\n" if label else ""
    settings = [f"model {md(run.model)}" if run.model else "",
                f"temperature {run.temperature:g}" if run.temperature is not None else "temperature not reported"]
    lines = [f"{head}**Detected format: {md(run.source)}** ({', '.join(s for s in settings if s)})", "",
             "| count | value |", "| --- | --- |"]
    lines += [f"| {name} | {getattr(run, name):,} |" for name in count_fields() if getattr(run, name) is not None]
    missing = [name for name in count_fields() if getattr(run, name) is None]
    if run.accepted_per_pos is not None:
        lines.append(f"| accepted per position | {', '.join(map(str, run.accepted_per_pos))} |")
    if run.histogram is not None:
        lines.append(f"| steps by drafts accepted (0, 1, ...) | {', '.join(map(str, run.histogram))} |")
    lines.append("")
    lines.append("Counts above are as the engine reported them"
                 + (f"; not reported: {', '.join(missing)}." if missing else "."))
    if run.notes:
        lines += ["", "**Derived, not reported** (how the reader recovered them):"]
        lines += [f"- {md(n)}" for n in run.notes]
    if run.series:
        names = producers(run.series)
        lines += ["", f"A series of {len(run.series)} intervals (log lines, scrape deltas or requests), in order"
                  + (f", printed by {len(names)} concurrent producers ({md(', '.join(names))}): each one's "
                     "intervals are read as its own series." if len(names) > 1 else ".")]
    lines += ["", "| rate (derived) | value | definition |", "| --- | --- | --- |"]
    lines += [f"| {md(r.name)} | {r.value:.4g} | {md(r.definition)} |" for r in rates(run)]
    return "\n".join(lines)


MAX_INTERVALS_SHOWN = 40  # a run of means' intervals listed in its table; the load view charts every one
LOAD_FIELDS = (("running", "running requests"), ("queued", "queued requests"), ("tokens", "KV tokens"),
               ("kv_usage", "KV cache usage"), ("gen_tps", "generated tokens/s"), ("prompt_tps", "prompt tokens/s"),
               ("concurrency", "concurrency"), ("request_rate", "request rate (req/s)"))


def means_sentence(labels: list[str]) -> str:
    """Why runs of means are left out of the count-based doctor, the advice and the per-position charts."""
    one = len(labels) == 1
    return (f"{', '.join(md(label) for label in labels)} print{'s' if one else ''} means, not counts: the count-based "
            "doctor, the advice and the per-position charts need counts (drafted, accepted, steps), so they leave "
            f"{'it' if one else 'them'} out, and {'its' if one else 'their'} figures are shown as printed above, with "
            f"{'its' if one else 'their'} load in the load view.")


def mean_run_markdown(run: MeanRun, label: str = "") -> str:
    """A run of means: the format, the figures as printed (each interval's where it prints a series), what the
    means define (``mean_figures``), the meaning its reader applied, and the figures it cannot give (``underived``)."""
    head = f"### {md(label)}\n" if label else ""
    lines = [f"{head}**Detected format: {md(run.source)}** (means as printed, no counts)", "",
             "| figure (as printed) | value |", "| --- | --- |"] + _printed_rows(run)
    if run.series:
        lines += ["", _intervals_table(run.series)]
    figures = mean_figures(run)
    if figures:
        lines += ["", "| figure (from the means) | value | definition |", "| --- | --- | --- |"]
        lines += [f"| {md(r.name)} | {r.value:.4g} | {md(r.definition)} |" for r in figures]
    if run.notes:
        lines += ["", "**How it was read:**"] + [f"- {md(n)}" for n in run.notes]
    lines += ["", "**Not given by this source:**"] + [f"- {md(n)}" for n in underived(run)]
    return "\n".join(lines)


def _printed_rows(run: MeanRun) -> list[str]:
    rows = [("mean acceptance length", run.mean_length), ("acceptance rate", run.acceptance_rate),
            ("what the rate is", run.rate_meaning), ("k", run.k)]
    rows += [(name, getattr(run.load, field)) for field, name in LOAD_FIELDS] if run.load else []
    rows += [(f"{s.label} {s.stat}", s.value) for s in run.spreads]
    shown = [f"| {md(name)} | {md(f'{value:g}' if isinstance(value, float) else value)} |" for name, value in rows
             if value is not None]
    return shown or ["| - | printed per interval only (below) |"]


def producers(series) -> list[str]:
    """The producers (engines, DP ranks, server processes) a series' lines name, in order of first appearance."""
    return [name for name in by_producer(series) if name]


def _intervals_table(series) -> str:
    """Each part's (interval's or block's) mean length, rate and load as printed (the first MAX_INTERVALS_SHOWN)."""
    fields = [(f, name) for f, name in LOAD_FIELDS if any(p.load and getattr(p.load, f) is not None for p in series)]
    by = len(producers(series)) > 1  # concurrent producers: say whose each line is
    heads = ["part"] + ["printed by"] * by + ["mean acceptance length", "acceptance rate"] + [name for _, name in fields]
    lines = [f"Each of its {len(series):,} parts (logging intervals or blocks) as printed"
             + (f" (the first {MAX_INTERVALS_SHOWN})" if len(series) > MAX_INTERVALS_SHOWN else "") + ":", "",
             "| " + " | ".join(heads) + " |", "|" + " --- |" * len(heads)]
    for i, p in enumerate(series[:MAX_INTERVALS_SHOWN], 1):
        cells = [p.mean_length, p.acceptance_rate] + [getattr(p.load, f) if p.load else None for f, _ in fields]
        who = [md(p.producer or "-")] * by
        lines.append(f"| {i} | " + " | ".join(who + ["-" if c is None else f"{c:g}" for c in cells]) + " |")
    return "\n".join(lines)


def _printed_range(run: MeanRun) -> str:
    """A run of means' mean length as printed: the one figure, or each interval's lowest to highest."""
    if run.mean_length is not None:
        return f"{run.mean_length:g} (as printed)"
    values = [p.mean_length for p in run.series if p.mean_length is not None]
    return f"{min(values):g} to {max(values):g} over {len(values)} intervals (as printed)" if values else "-"


def _printed_rate(run: MeanRun) -> str:
    if run.acceptance_rate is None and not any(p.acceptance_rate is not None for p in run.series):
        return "-"
    shown = "per interval" if run.acceptance_rate is None else f"{run.acceptance_rate:g}"
    return f"{shown} (as printed" + (f"; {run.rate_meaning})" if run.rate_meaning else ")")


def _mean_column(run: MeanRun) -> dict:
    means = "- (means only)"
    return {"read as": run.source, "temperature": "not reported",
            **{name: means for name in ("drafted", "accepted", "steps")}, "k": _count(run.k),
            "alpha (interval)": means, "mean acceptance length": _printed_range(run),
            "acceptance rate": _printed_rate(run),
            "how it was read": "\n".join(run.notes) or "-"}


def comparison_frame(runs: dict[str, EngineRun]) -> pd.DataFrame:
    """One column per run, one row per figure: the format read and the meaning its reader applied (its notes, one
    a line), the counts as reported, alpha with its interval (``fit_alpha``) and the mean acceptance length
    (``rates``); '-' where the run's counts do not give it."""
    columns = {}
    for label, run in runs.items():
        if isinstance(run, MeanRun):
            columns[label] = _mean_column(run)
            continue
        fit, by_name = fit_alpha(run), {r.name: r.value for r in rates(run)}
        columns[label] = {
            "read as": run.source,
            "temperature": "-" if run.temperature is None else f"{run.temperature:g}",
            **{name: _count(getattr(run, name)) for name in ("drafted", "accepted", "steps", "k")},
            "alpha (interval)": "-" if fit is None else (f"{fit.alpha:.3f} ({fit.low:.3f} to {fit.high:.3f}, "
                                                         f"{fit.level:.0%}; {fit.method})"),
            "mean acceptance length": _rate(by_name.get("mean acceptance length")),
            "acceptance rate": _rate(by_name.get("acceptance rate")),
            "how it was read": "\n".join(run.notes) or "-"}
    return pd.DataFrame(columns)


def comparison_markdown(frame: pd.DataFrame) -> str:
    """``comparison_frame`` as a Markdown table, every cell inert (a note a line)."""
    lines = [f"| | {_cells(frame.columns)} |", "| --- |" + " --- |" * len(frame.columns)]
    lines += [f"| **{md(name)}** | {_cells(row)} |" for name, row in frame.iterrows()]
    return "#### The runs side by side\n\n" + "\n".join(lines)


def _cells(values) -> str:
    return " | ".join("<br>".join(md(line) for line in str(v).split("\n")) for v in values)


def _count(value) -> str:
    return "-" if value is None else f"{value:,}"


def _rate(value) -> str:
    return "-" if value is None else f"{value:.4g}"


def findings_markdown(findings: list[Finding], runs: list[tuple[str, EngineRun]] | None = None) -> str:
    """The findings, problems first; with several ``runs`` (label, run), grouped under each run's label (the
    doctor's 'run i (format): ' dropped there), then those only several runs show."""
    if not findings:
        return "The doctor found nothing to report."
    if not runs or len(runs) < 2:
        return "#### What the doctor finds\n" + _finding_lines(findings)
    out = ["#### What the doctor finds"]
    for i, (label, run) in enumerate(runs):
        prefix = f"run {i + 1} ({run.source}): "
        mine = [replace(f, text=f.text.removeprefix(prefix)) for f in findings if f.numbers.get("run") == i]
        out += [f"##### {md(label)}", _finding_lines(mine) if mine else "Nothing to report."]
    across = [f for f in findings if not isinstance(f.numbers.get("run"), int)]
    if across:
        out += ["##### Across the runs", _finding_lines(across)]
    return "\n".join(out)


def _finding_lines(findings: list[Finding]) -> str:
    order = {"problem": 0, "warning": 1, "info": 2}
    out = []
    for f in sorted(findings, key=lambda f: order[f.severity]):
        numbers = ", ".join(f"{md(k)} = {_number(v)}" for k, v in f.numbers.items() if not isinstance(v, list))
        out.append(f"- {SEVERITY[f.severity]} ({md(f.code)}): {md(f.text)}" + (f"  \n  *{numbers}*" if numbers else ""))
    return "\n".join(out)


def _number(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return md(value)


def advice_markdown(advice: Advice, source: str, label: str = "") -> str:
    """The best k with its range over alpha's interval, the measured curve's best, the flag for this run's engine,
    and how each engine sets that k."""
    lo, hi = advice.best_k_range
    head = f"#### The k to run with{' (' + md(label) + ')' if label else ''}\n"
    if not advice.best_k:
        return head + f"No k pays at this cost: {md(advice.flag)}.\n\n" + "\n".join(f"- {md(n)}" for n in advice.notes)
    span = f" (best somewhere in {lo} to {hi} over alpha's interval)" if lo != hi else ""
    measured = (f"; the measured curve's best (up to the run's own k): k = {advice.best_k_measured}"
                if advice.best_k_measured is not None else "")
    lines = [head + f"**Best k = {advice.best_k}**{span}{measured}.", "",
             f"Set it with: <code>{md(advice.flag)}</code>", ""]
    lines += [f"- {md(n)}" for n in advice.notes]
    lines += ["", f"| engine | how to run k = {advice.best_k} |", "| --- | --- |"]
    here = engine_of(source)
    lines += [f"| {e}{' (this run)' if e == here else ''} | <code>{md(flag_for(e, advice.best_k))}</code> |"
              for e in ENGINES]
    return "\n".join(lines)


def cost_markdown(cost: CostModel, free_rows: int | None = None) -> str:
    """The cost model the advice used: c, v's points (the first few where there are many) and its notes."""
    points = cost.verify if len(cost.verify) <= 8 else cost.verify[:4] + (("...", None),) + cost.verify[-2:]
    shown = ", ".join(f"v({n}) = {v:.3g}" if v is not None else "..." for n, v in points)
    lines = [f"**Cost model** ({md(cost.source)}): c = {cost.c:.3g}; {md(shown)}"]
    if free_rows is not None:
        lines.append(f"Extra verify rows are free here up to n = {free_rows}"
                     + (" (none: a second row already costs more than 10% of one)" if free_rows <= 1 else ""))
    lines += [f"- {md(n)}" for n in cost.notes]
    return "\n\n".join(lines[:2]) + ("\n" + "\n".join(lines[2:]) if lines[2:] else "")


# -- the conformance kit's card (``specviz.conformance``'s card.json, as a dict) ---------------------------------------
MAX_ROWS_SHOWN = 40  # test rows in the panel's table; the chart draws every tested one


def exact_markdown(card: dict, how: str) -> str:
    """A conformance card in words: the verdict, what was run, the power, the engine's reported acceptance, the
    flagged (else the tested) rows and the greedy divergences; every string from the card inert."""
    tests, info = card["tests"], card["info"]
    tested, flagged = [t for t in tests if t["tested"]], [t for t in tests if t["flagged"]]
    structural = [d for d in card["greedy"] if isinstance(d, dict) and d.get("kind") == "structural"]
    verdict = (f"**flag**: {len(flagged)} of {len(tested)} tests flagged" + (f", {len(structural)} structural greedy "
               "divergence(s)" if structural else "") if card["verdict"] == "flag" else
               f"**pass**: none of {len(tested)} tests showed a difference beyond chance at this N")
    settings = "; ".join(_setting(s) for s in card["settings"]) or "not stated"
    lines = [f"### Is it exact? {verdict}", "",
             f"*{md(how)}*: engine {md(info.get('engine', '?'))} {md(info.get('version', ''))}, model "
             f"{md(info.get('model', '?'))}; settings {settings}; N = {card['n']:,} per mode, prompt and setting; "
             f"alpha = {card['alpha']:g} after Holm's correction over {len(tested)} tests.", "",
             f"**Power**: {md(card['power'])}", "",
             "Token 1 comes from the prefill pass (no draft is verified there): shown, not tested. A pass is not "
             "proof of exactness: a smaller bias, other prompts, settings and lengths go untested.", "",
             _acceptance(card["acceptance"]), ""]
    rows = flagged or tested
    lines += [f"#### {'Flagged tests' if flagged else 'Tested positions'}"
              + (f" (the first {MAX_ROWS_SHOWN} of {len(rows)})" if len(rows) > MAX_ROWS_SHOWN else ""), "",
              "| prompt | setting | position | test | on | off | categories | p | p (Holm) | TV seen | TV caught 95% |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    lines += [f"| {md(t['prompt_id'])} | {md(t.get('setting', ''))} | {t['position']} | {md(t['kind'])} | {t['n_on']} "
              f"| {t['n_off']} | {t['categories']} | {_p(t.get('pvalue'))} | {_p(t.get('p_holm'))} | "
              f"{_p(t.get('tv'))} | {_p(t.get('detectable_tv'))} |" for t in rows[:MAX_ROWS_SHOWN]]
    return "\n".join(lines + ["", _greedy(card["greedy"])])


def _setting(s) -> str:
    if isinstance(s, dict) and all(isinstance(s.get(k), (int, float)) for k in ("temperature", "top_k", "top_p", "min_p")):
        return f"T = {s['temperature']:g}, top-k {s['top_k']:g}, top-p {s['top_p']:g}, min-p {s['min_p']:g}"
    return md(s)


def _p(value) -> str:
    return "-" if not isinstance(value, (int, float)) or isinstance(value, bool) or value != value else f"{value:.3g}"


def _acceptance(acc: dict) -> str:
    drafted, accepted, off = acc.get("drafted"), acc.get("accepted"), acc.get("drafted_off")
    if not isinstance(drafted, int) or not isinstance(accepted, int) or not drafted:
        return "The engine reported no acceptance counts."
    text = f"Acceptance the engine reported with speculation on: {accepted:,} of {drafted:,} drafts ({accepted / drafted:.1%})."
    if isinstance(off, int) and off:
        text += (f" **Warning**: it reported {off:,} drafts in the samples meant to have speculation off: both sides "
                 "may have speculated, and then the test compares speculation with itself.")
    return text


def _greedy(greedy: list) -> str:
    if not greedy:
        return "No greedy check on this card (it needs the engine: the kit runs it at T = 0 when drawing)."
    lines = ["#### Greedy (T = 0): the first difference, speculation on against off", "",
             "| prompt | position | on | off | top-2 margin (nats) | kind |", "| --- | --- | --- | --- | --- | --- |"]
    for d in greedy[:MAX_ROWS_SHOWN]:
        d = d if isinstance(d, dict) else {}
        cells = [d.get(key) for key in ("prompt_id", "position", "token_on", "token_off")]
        lines.append("| " + " | ".join("-" if c is None else md(c) for c in cells)
                     + f" | {_p(d.get('margin'))} | {md(d.get('kind', '?'))} |")
    return "\n".join(lines)


def control_markdown(result: dict) -> str:
    """The negative control: the kit at the card's N on a known-lossy served rule, and on Leviathan's."""
    cards = result["cards"]
    lossy, exact = [name for name in cards if name != "leviathan"][0], cards["leviathan"]
    caught = cards[lossy]["verdict"] == "flag"
    n = f"N = {result['n']:,} per mode" + (" (the card's N, capped here)" if result["capped"] else " (the card's N)")
    lines = [f"#### Negative control: {'caught' if caught else 'missed'}", "",
             f"The kit, at {n}, {result['n_predict']} tokens and {md(result['setting'])}, against specviz's own server "
             f"(a seeded table pair, vocabulary 6, served in this process) with the lossy rule <code>{md(lossy)}</code>: "
             f"**{cards[lossy]['verdict']}**"
             + (" (it must flag: the kit has teeth at this N)." if caught else
                " (it should have flagged: at this N the kit may miss a bias of this size; draw more samples)."), "",
             f"With Leviathan's rule (exact): **{exact['verdict']}**"
             + ("." if exact["verdict"] == "pass" else " (a false flag: about one run in twenty at alpha = 0.05)."),
             "", f"Its power there: {md(cards[lossy]['power'])}", "",
             "The table pair is not your engine's pair: the bias a rule causes depends on the pair and the setting, so "
             "this says the kit catches this rule's bias at this N here, not that it would catch every bias on yours."]
    return "\n".join(lines)
