"""The "Your engine" tab: an engine's speculative-decoding counts (vLLM, llama.cpp, SGLang, TensorRT-LLM or a
specviz trace), pasted or uploaded, read (``specviz.engines``), diagnosed and advised under a cost model that is
typed, read from llama-bench output or measured here (``specviz.labs.hardware``); a specviz run optionally beside
it. Handlers are module-level functions taking the store (``handlers(store)`` binds them); ``build`` lays out."""
from __future__ import annotations

import gradio as gr
import pandas as pd

from ..engines import FORMATS, Advice, EngineRun, MeanRun, advise, diagnose, fit_alpha, positions
from ..engines.compare_runs import compare_runs
from ..engines.cost import DRAFTERS
from ..engines.load_doctor import diagnose_load, load_frame
from ..engines.run import coarsened
from ..views import engine_plots as plots
from ..views import engine_report as report
from ..views import load_engine_plots
from . import engine_exact
from . import engine_inputs as inputs
from .budget import Budget
from .store import ModelStore
from .widgets import ENGINE_QUEUE, bind, chart, draft_picker, target_picker

NOTHING, TRACE, PAIR = "nothing", "an imported specviz trace", "the chosen pair at this k and temperature"
BESIDE = (NOTHING, TRACE, PAIR)
ACCEPTED = "Accepted: " + "; ".join(f.split(" (")[0] for f in FORMATS) + "."
PLACEHOLDER = ("INFO 12-02 10:00:00 [metrics.py:96] SpecDecoding metrics: Mean acceptance length: 2.40, Accepted "
               "throughput: 28.00 tokens/s, Drafted throughput: 60.00 tokens/s, Accepted: 280 tokens, Drafted: 600 "
               "tokens, Per-position acceptance rate: 0.700, 0.470, 0.230, Avg Draft acceptance rate: 46.7%")
RECORDING = ("A llama.cpp load recording (the folder `scripts/measure/record_llamacpp_load.sh` writes: np1-on/, "
             "np1-off/, ...) uploaded as a .zip of that folder shows under load: tokens/s and acceptance against "
             "requests in flight, where speculation stops paying, and what to serve per range.")
MAX_SERIES_POINTS = 2000  # intervals the series chart draws over all runs; more are pooled into consecutive groups


def cost_model(store: ModelStore, source, c, v, bench_text, bench_file, target, draft, budget=None):
    """(CostModel, the hardware lab's table or None) from the chosen source."""
    if source == inputs.MEASURE:
        hw = inputs.measured_cost(store, target, draft, budget=budget)
        return hw.cost, hw
    if source == inputs.BENCH:
        return inputs.bench_cost(bench_text, bench_file, c), None
    if source == inputs.TYPED:
        return inputs.typed_cost(c, v), None
    raise ValueError(f"the cost source must be one of {inputs.COSTS}, got {source!r}")


def beside_run(store: ModelStore, beside, trace_file, target, draft, k, temperature, max_new, budget=None):
    """(label, EngineRun) of the specviz run to show beside the engine's, or None."""
    if beside == TRACE:
        run = inputs.imported_run(trace_file)
        return f"specviz trace: {run.model or 'a run'}, k = {run.k}", run
    if beside == PAIR:
        run = inputs.pair_run(store, target, draft, k, temperature, max_new, budget=budget)
        return f"specviz: {target} + {draft}, k = {run.k}, T = {run.temperature:g}", run
    if beside != NOTHING:
        raise ValueError(f"beside must be one of {BESIDE}, got {beside!r}")
    return None


def advice_views(runs, names, cost, check=None, drafter=None, among=0) -> tuple[str, pd.DataFrame, object]:
    """(Markdown of each run's advice, their tables in one, the first advice's chart), priced for the ``drafter``
    kind, each labelled where there are several runs (``among``: how many were read, these and the others);
    ``check()`` before each."""
    texts, tables, first, several = [], [], None, max(len(runs), among) > 1
    for name, run in zip(names, runs):
        if check is not None:
            check()
        try:
            advice: Advice = advise(run, cost, drafter=drafter)
        except ValueError as error:
            texts.append(f"No advice for {report.md(name)}: {report.md(error)}")
            continue
        texts.append(report.advice_markdown(advice, run.source, name if several else ""))
        tables.append(advice.table.assign(run=name) if several else advice.table)
        first = first or (advice, name)
    table = pd.concat(tables, ignore_index=True) if tables else pd.DataFrame()
    figure = plots.advice_chart(first[0].table, first[1]) if first else plots.message_figure("No advice")
    return "\n\n".join(texts), table, figure


def cost_chart(cost, hw, runs):
    """v(n) and the speedup it implies at the first run's alpha: measured here, or the cost model's points."""
    fit = next((f for f in (fit_alpha(r) for r in runs) if f is not None), None)
    if hw is not None:
        table = hw.table
    elif len(cost.verify) > 1:
        rows, v = zip(*cost.verify)
        table = pd.DataFrame(dict(rows=rows, v=v, v_min=v, v_max=v))
    else:
        return plots.message_figure(f"v = {cost.verify[0][1]:g} for every pass: no curve to draw")
    return plots.verify_cost_chart(table, fit.alpha if fit else 0.7, cost.c)


def charted(runs: dict) -> tuple[dict, str]:
    """The runs as the charts draw them: a series longer than its share of MAX_SERIES_POINTS pooled into groups of
    consecutive intervals (counts summed), and a sentence saying so ("" when nothing was pooled)."""
    shown, said = {}, []
    for label, run in runs.items():
        shown[label], size = coarsened(run, max(1, MAX_SERIES_POINTS // len(runs)))
        if size > 1:
            said.append(f"{len(run.series):,} intervals of {report.md(label)} as {len(shown[label].series):,} groups "
                        f"of {size:,} consecutive ones (counts summed)")
    return shown, (" The series chart draws " + "; ".join(said) + ".") if said else ""


def run_markdown(run, label: str = "") -> str:
    """A run in full: its counts and rates, or a run of means' figures as printed and what they cannot give."""
    return report.mean_run_markdown(run, label) if isinstance(run, MeanRun) else report.run_markdown(run, label)


def runs_markdown(named: list[tuple[str, EngineRun | MeanRun]]) -> str:
    """A lone run in full; several side by side (``comparison_frame``), then each in full under its label."""
    if len(named) == 1:
        return run_markdown(named[0][1])
    return "\n\n".join([report.comparison_markdown(report.comparison_frame(dict(named)))]
                       + [run_markdown(run, label) for label, run in named])


def comparison_figure(named: list[tuple[str, EngineRun]]):
    """The first two runs with per-position counts compared position by position (``compare_runs``), or why not."""
    able = [(label, run) for label, run in named if not isinstance(run, MeanRun) and positions(run) is not None]
    if len(named) < 2:
        return plots.message_figure("One run: paste or upload two or more to compare them")
    if len(able) < 2:
        return plots.message_figure("Comparing positions needs two runs with per-position counts (or histograms)")
    (a, run_a), (b, run_b) = able[:2]
    return plots.comparison_chart(compare_runs(run_a, run_b, (a, b)).positions)


def load_view(named: list[tuple[str, EngineRun]], k: int | None = None) -> tuple[str, object]:
    """(the load findings, the load chart): each interval's tokens/s and mean length against the load it printed
    (running requests, a benchmark's concurrency), and where speculation stops paying when runs with it on and off
    are both given (``engines.load_doctor``); or why there is nothing to show."""
    frame = load_frame(dict(named))
    if frame.empty:
        return "", plots.message_figure("No interval printed a load beside its figures (vLLM's Running: N reqs, "
                                        "SGLang's #running-req, a benchmark's concurrency)")
    findings = diagnose_load(dict(named), k=k)
    cross = next((f.numbers for f in findings if f.code == "load_crossover"), {})
    band = (cross["last_paying_load"], cross["first_losing_load"]) if cross.get("decided") else None
    text = report.findings_markdown(findings).replace("#### What the doctor finds", "#### Under load\n"
                                                      + load_sources(named, frame), 1)
    return text, load_engine_plots.load_figure(frame, band)


def load_sources(named: list[tuple[str, EngineRun]], frame: pd.DataFrame) -> str:
    """One line per run charted against load: its engine, the format it was read as and whether it speculated (how
    each was read, the version's meaning included, is in the run's notes above)."""
    sources = dict(named)
    rows = frame.drop_duplicates("run")
    shown = [f"{report.md(row.run)}: {report.md(row.engine)}, read as {report.md(sources[row.run].source)}, "
             f"speculation {row.speculation}" for row in rows.itertuples()]
    return "Read as: " + "; ".join(shown) + " (how each was read: its notes above).\n\n"


def analyse(store: ModelStore, text, files, grouping, temperatures, cost_source, c, v, bench_text, bench_file,
            target, draft, beside, trace_file, k, temperature, max_new, engine_k=None, drafter=None):
    """(status, runs, findings, advice, advice table, cost, 5 charts, the specviz run beside, the comparison chart,
    the load findings and chart),
    within one request's budget (checked between inputs, log lines, scrapes and runs); ``drafter``: the drafter's
    kind (``engines.cost.DRAFTERS``), which prices the advice."""
    budget = Budget()
    named = inputs.read_runs(text, files, grouping, temperatures, check=budget.check, k=engine_k)
    runs = [run for _, run in named]
    counted = [(name, run) for name, run in named if not isinstance(run, MeanRun)]
    means = [name for name, run in named if isinstance(run, MeanRun)]
    cost, hw = cost_model(store, cost_source, c, v, bench_text, bench_file, target, draft, budget)
    extra = beside_run(store, beside, trace_file, target, draft, k, temperature, max_new, budget)
    findings, findings_text, advice_text, table, advice_figure = count_views(counted, means, cost, budget.check,
                                                                             drafter)
    shown, pooled = charted(dict(counted) | (dict([extra]) if extra else {}))
    left_out = f" {report.means_sentence(means)}" if means else ""
    status = (f"**Read {len(runs)} run{'s' if len(runs) > 1 else ''}**: "
              + "; ".join(report.md(r.source) for r in runs) + f". {len(findings)} findings." + pooled + left_out)
    beside_text = report.run_markdown(extra[1], extra[0]) if extra else ""
    load_text, load_figure = load_view(named, next((r.k for r in runs if r.k), None) or engine_k or None)
    return (status, runs_markdown(named), findings_text, advice_text, table,
            report.cost_markdown(cost, hw.free_rows if hw else None),
            plots.positions_chart(plots.positions_frame(shown)), plots.histogram_chart(plots.histogram_frame(shown)),
            advice_figure, plots.series_chart(plots.series_frame(shown)),
            cost_chart(cost, hw, [run for _, run in counted]), beside_text, comparison_figure(named), load_text,
            load_figure)


def count_views(counted: list[tuple[str, EngineRun]], means: list[str], cost, check=None, drafter=None):
    """(findings, their Markdown, the advice's Markdown, table and chart) of the runs with counts; the runs of means
    (their ``means`` labels) left out with a sentence saying so, and, where no run has counts, that sentence
    instead of the doctor and the advice."""
    left_out = report.means_sentence(means) if means else ""
    if not counted:
        return [], left_out, left_out, pd.DataFrame(), plots.message_figure("No advice: no run with counts")
    runs = [run for _, run in counted]
    findings = diagnose(runs if len(runs) > 1 else runs[0], cost, check=check, drafter=drafter)
    advice_text, table, figure = advice_views(runs, [name for name, _ in counted], cost, check, drafter,
                                              among=len(counted) + len(means))
    return (findings, "\n\n".join(t for t in (report.findings_markdown(findings, counted), left_out) if t),
            "\n\n".join(t for t in (advice_text, left_out) if t), table, figure)


def handlers(store: ModelStore):
    return bind(store, models=dict(read_engine=analyse))


def _cost_inputs(store: ModelStore) -> list:
    with gr.Row():
        source = gr.Radio(list(inputs.COSTS), value=inputs.TYPED, label="Cost source", elem_id="engine-cost")
        c = gr.Number(0.1, label="c: a draft step over a target forward")
        v = gr.Textbox("1", label="v: one number, or rows:cost like 1:1,2:1.05,8:1.3")
    with gr.Accordion("llama-bench output (-p 1,2,4,8,16 -n 64, both models)", open=False):
        bench_text = gr.Textbox(lines=4, label="Paste its table, -o json or -o csv")
        bench_file = gr.File(label="...or upload it", file_count="single")
    with gr.Row():
        target, draft = target_picker(store), draft_picker(store, model=True)
    return [source, c, v, bench_text, bench_file, target, draft]


def _run_inputs() -> list:
    """How the inputs make runs, and what the runs do not say: temperatures, k, the drafter's kind."""
    with gr.Row():
        grouping = gr.Radio(list(inputs.GROUPINGS), value=inputs.ONE_RUN, label="Several inputs are")
        temperatures = gr.Textbox("", label="Temperatures where the format does not say (one, or one per run)")
        engine_k = gr.Number(0, precision=0, minimum=0, maximum=64, label="k where the input does not print it (0: none)",
                             info="a k the input prints wins: this one is then ignored, and the run says so",
                             elem_id="engine-k")
        drafter = gr.Dropdown([(words, kind) for kind, words in DRAFTERS.items()], value="sequential",
                              label="The drafter's kind", info="it prices the draft steps: k passes, one, or none",
                              elem_id="engine-drafter")
    return [grouping, temperatures, engine_k, drafter]


def _beside_inputs() -> list:
    with gr.Accordion("A specviz run beside it", open=False):
        beside = gr.Radio(list(BESIDE), value=NOTHING, label="Beside the engine's run")
        trace_file = gr.File(label="specviz trace JSON (the explorer's export)", file_count="single")
        with gr.Row():
            k = gr.Number(4, precision=0, label="k")
            temperature = gr.Number(0, label="temperature")
            max_new = gr.Number(32, precision=0, label="new tokens per prompt")
    return [beside, trace_file, k, temperature, max_new]


def build(store: ModelStore) -> None:
    h = handlers(store)
    gr.Markdown("Bring your engine's run: paste a log excerpt, a `/metrics` scrape or JSON responses, or upload "
                "files. The tab names the format it detected, every rate with its definition, what the doctor "
                "finds, and the k to run with under a cost model. " + report.md(ACCEPTED) + " " + RECORDING)
    with gr.Row():
        text = gr.Textbox(lines=8, label="Paste engine output", placeholder=PLACEHOLDER, elem_id="engine-text",
                          info="several runs: a line '--- label' above each (before and after an upgrade, two drafts)")
        files = gr.File(label="...or upload files (a llama.cpp load recording: a .zip of its folder)",
                        file_count="multiple", elem_id="engine-files")
    grouping, temperatures, engine_k, drafter = _run_inputs()
    cost = _cost_inputs(store)
    beside = _beside_inputs()
    read_btn = gr.Button("Read and diagnose", variant="primary", elem_id="engine-read")
    status = gr.Markdown("*Paste or upload, then Read and diagnose.*", elem_id="engine-status")
    runs_md = gr.Markdown(elem_id="engine-runs")
    findings = gr.Markdown(elem_id="engine-findings")
    compared = chart("Two runs position by position (the first two with per-position counts): each one's "
                     "conditional rate with its interval, and the change (filled where it moved).",
                     elem_id="engine-compare")
    with gr.Row():
        positions = chart("Per position: accepted / steps (left), accepted / reached (right); dashed: Leviathan's "
                          "i.i.d. model at the fitted α (α^i and α).", elem_id="engine-positions")
        histogram = chart("Steps by how many drafts they accepted, beside the model's truncated geometric.",
                          elem_id="engine-histogram")
    advice_md = gr.Markdown(elem_id="engine-advice")
    with gr.Row():
        advice_plot = chart("Expected speedup per k: the i.i.d. fit with α's interval, the measured curve's points.",
                            elem_id="engine-advice-plot")
        verify_plot = chart("What a verify pass of n rows costs (v), and the speedup it implies.",
                            elem_id="engine-verify-plot")
    advice_table = gr.Dataframe(label="Advice per k", interactive=False)
    cost_md = gr.Markdown(elem_id="engine-cost-model")
    series = chart("Over the run: each interval's acceptance (log lines, scrape deltas, requests).",
                   elem_id="engine-series")
    beside_md = gr.Markdown(elem_id="engine-beside")
    load_md = gr.Markdown(elem_id="engine-load")
    load_plot = chart("Under load: tokens/s and mean acceptance length against the load each interval printed, "
                      "speculation on (solid) and off (dotted); shaded: where it stops paying.",
                      elem_id="engine-load-plot")
    read_btn.click(h.read_engine, [text, files, grouping, temperatures, *cost, *beside, engine_k, drafter],
                   [status, runs_md, findings, advice_md, advice_table, cost_md, positions, histogram, advice_plot,
                    series, verify_plot, beside_md, compared, load_md, load_plot], api_visibility="undocumented",
                   **ENGINE_QUEUE)
    engine_exact.build()
