"""The explorer tab: a run streamed into the token timeline and summary, then its autoregressive baseline;
the round replay; the run's charts; export and import. Handlers are module-level functions (``handlers(store)``
binds them); ``build`` lays the tab out and wires them."""
from __future__ import annotations

import functools
from pathlib import Path
from typing import NamedTuple

import gradio as gr

from .. import models
from ..config import DEFAULTS, EXAMPLE_PROMPTS, K_POLICIES
from ..drafts.trained.coverage import vocabulary
from ..drafts.trained.formats import describe
from ..drafts.trained.training import beside, read_trainer_metrics, reading, trained_rates
from ..labs import gallery
from ..trace import MAX_TRACE_BYTES, Trace
from ..views import plots
from ..views.alignment_view import alignment_html
from ..views.summary import GLOSSARY, HERE, k_note, summary_markdown
from ..views.timeline import one_round, replay_html, timeline_html
from ..views.training_plots import training_vs_serving_figure
from ..views.tree_view import tree_figure
from . import links, runs, slim_route
from .forms import RULE_CHOICES, make_config
from .gpu import gpu_task
from .sessions import one_per_session
from .store import ModelStore, draft_choices
from .tempfiles import discard
from .widgets import MODEL_QUEUE, SKIP, bind, chart, draft_picker, fitting_update, follow_target, friendly, target_picker

RUN_LABEL = "Run"
def ready() -> dict:
    """The Run button once a run has ended (or failed): a fresh update each time (gradio consumes an update's keys)."""
    return gr.update(value=RUN_LABEL, interactive=True)
SHAPES = ["chain", "chain:12,1", "chain:12,3,0.08", "3,2,2,1", "2,1,1,1,1,1", "4,2,1,1", "dynamic:10,8,3", "dynamic:16,6,4",
          "dynamic:12,10,2,0.3"]
GALLERY_BUTTONS = 3  # the gallery's first ready runs, one click each from the first screen


# -- views: a Trace in, component values out, by name (a field left unset keeps its component as it is) --------------
class Replay(NamedTuple):
    """The round replay: its table, its accept-line chart, its residual chart and its tree."""
    replay: object = SKIP
    accept: object = SKIP
    residual: object = SKIP
    tree: object = SKIP


class Charts(NamedTuple):
    """The whole run's four charts."""
    by_position: object = SKIP
    per_round: object = SKIP
    p_vs_q: object = SKIP
    times: object = SKIP


class Shown(NamedTuple):
    """Everything a run, an import or a gallery run sets: ``build`` wires its components in these fields' order."""
    trace: object = SKIP  # gr.State: the run shown
    base: object = SKIP  # gr.State: its autoregressive baseline
    timeline: object = SKIP
    summary: object = SKIP
    round_slider: object = SKIP
    replay: object = SKIP
    accept: object = SKIP
    residual: object = SKIP
    tree: object = SKIP
    by_position: object = SKIP
    per_round: object = SKIP
    p_vs_q: object = SKIP
    times: object = SKIP


def streamed(shown: Shown, run_button=SKIP) -> tuple:
    """One step of a run's stream: what it shows, then the Run button (``run``'s outputs)."""
    return (*shown, run_button)


def replay_views(trace: Trace | None, index) -> Replay:
    """Round ``index`` in detail: its table, its accept-line chart, its residual chart and its tree (shown only for a
    tree round: a chain's round has no tree to draw)."""
    if trace is None or not trace.rounds:
        return Replay(replay_html(trace, 0), None, None, gr.update(value=None, visible=False))
    i = max(0, min(int(index or 0), len(trace.rounds) - 1))
    r, alone = trace.rounds[i], one_round(trace, i)  # round i and the tokens before it: the same cost on any trace
    tokens = alone.to_frame()
    chain = tokens[tokens["node"].isna()]
    tree = (gr.update(value=tree_figure(trace, r), visible=True) if r.tree is not None else
            gr.update(value=None, visible=False))
    html = replay_html(trace, i) + alignment_html(r, alone.texts().rounds[0])  # "" unless cross-tokenizer
    block = trace.config.verify == "block" and not trace.config.greedy  # bars of h, not min(1, p/q)
    return Replay(replay=html, accept=plots.accept_line(chain, block), tree=tree,
                  residual=plots.residual_bars(plots.residual_frame(trace, i)))


def replay_round(trace: Trace | None, number) -> Replay:
    """The replay of the round the slider names (rounds are numbered from 1 on screen)."""
    return replay_views(trace, int(number or 1) - 1)


def chart_views(trace: Trace | None) -> Charts:
    if trace is None or not trace.rounds:
        return Charts(None, None, None, None)
    tokens, rounds = trace.to_frame(), plots.rounds_frame(trace)
    return Charts(by_position=plots.acceptance_by_position(tokens), per_round=plots.tokens_per_round(rounds),
                  p_vs_q=plots.p_vs_q(tokens), times=plots.round_times(rounds))


def trained_folder(draft) -> object:
    """The folder of a draft trained elsewhere that ``draft`` names (None for any other draft or name)."""
    try:
        return models.trained_folder(draft) if isinstance(draft, str) and draft.strip() else None
    except ValueError:
        return None


def draft_vocab(trace: Trace | None) -> frozenset[int] | None:
    """The target ids the run's draft can propose, where it is a trained draft with a pruned vocabulary (its map
    d2t); None for any other run (every token is then one the draft could have proposed)."""
    if trace is None or trace.mode != "speculative":
        return None
    folder = trained_folder(trace.draft_name)
    return None if folder is None else vocabulary(folder)


def shown_timeline(trace: Trace | None) -> str:
    """The timeline, a pruned draft vocabulary's missing tokens marked."""
    return timeline_html(trace, vocab=draft_vocab(trace))


def format_line(draft) -> str:
    """The picked draft's layout as read from its files (config.json and the safetensors headers, no weights), for
    a draft trained elsewhere; "" for any other draft."""
    folder = trained_folder(draft)
    line = describe(folder) if folder is not None else None
    return f"**Trained draft**, read from its files: {line}" if line else ""


def trainer_text(path, pasted) -> str:
    """The trainer's metrics: the uploaded file (deleted once read) or else the pasted text, at most MAX_TRACE_BYTES."""
    if not path:
        return pasted or ""
    try:
        if Path(path).stat().st_size > MAX_TRACE_BYTES:
            raise ValueError(f"the trainer's metrics file is over {MAX_TRACE_BYTES / 2**20:.0f} MiB: keep the lines "
                             "with the per-position accuracies (grep acc)")
        return Path(path).read_text(encoding="utf-8", errors="replace")
    finally:
        discard(path)


def training_beside(trace: Trace | None, path, pasted) -> tuple[str, object]:
    """The trainer's per-position accuracies (an uploaded file or pasted text) beside this run's acceptance per
    position: the gap read in words, and the chart."""
    if trace is None or trace.mode != "speculative" or not trace.rounds:
        raise ValueError("run a draft first (or open a run): the trainer's metrics are put beside its acceptance per "
                         "draft position")
    metrics = read_trainer_metrics(trainer_text(path, pasted))
    frame, (_, said) = beside(metrics, trace), trained_rates(metrics)
    text = (f"**{trace.draft_name or 'The draft'}**, trained ({said}) beside this run ({trace.counts().rounds} "
            f"rounds). {reading(frame, trace.config.temperature)}")
    return text, training_vs_serving_figure(frame)


def format_shown(draft) -> dict:
    """The format line's update for the draft picked: shown with its text for a trained draft, hidden otherwise."""
    line = format_line(draft)
    return gr.update(value=line, visible=bool(line))


def all_views(trace: Trace | None, base: Trace | None, where: str = HERE) -> Shown:
    """Every output of a finished run or an import (``where``: where and when its speeds were measured)."""
    n = len(trace.rounds) if trace else 0
    slider = gr.Slider(minimum=1, maximum=max(2, n), value=1, step=1, interactive=n > 1)  # round 1 .. n
    return Shown(trace=trace, base=base, timeline=shown_timeline(trace), round_slider=slider,
                 summary=summary_markdown(trace, base, where=where), **replay_views(trace, 0)._asdict(),
                 **chart_views(trace)._asdict())


# -- handlers ------------------------------------------------------------------------------------------
def run(store: ModelStore, prompt, target, draft, k, k_policy, temperature, top_k, top_p, max_new_tokens, seed,
        with_baseline=True, user_drafts=None, draft_stop=0.0, shape="chain", children="auto", rule="leviathan"):
    """Streams what it shows (``Shown``: while decoding the trace, its timeline and summary; then every view) and the
    Run button (disabled and naming the phase, decoding, the baseline, the spread, until the run ends). ``user_drafts``: this
    user's trained drafts ({name: TrainedDraft}), pickable by name. ``shape``: "chain" or a token tree
    ("3,2,2,1", "dynamic:10,8,3"), whose run is followed by a chain of k with the same draft and seed. ``rule``: the
    accept rule (forms.RULE_CHOICES: lossy ones change the text's law)."""
    cfg = make_config(k, k_policy, temperature, top_k, top_p, max_new_tokens, seed, draft_stop, shape, children, rule)
    trace, decoding = None, busy("decoding")
    for trace in runs.stream_run(store, prompt, target, draft, cfg, user_drafts=user_drafts):
        yield streamed(Shown(trace=trace, base=None, timeline=shown_timeline(trace), summary=summary_markdown(trace, None)),
                       decoding)
    if not with_baseline:
        yield streamed(all_views(trace, None), ready())
        return
    yield streamed(all_views(trace, None), busy("running the baseline"))
    yield streamed(Shown(trace=trace, base=None, summary=summary_markdown(trace, None) + "\n\n*Running the baseline…*"))
    base = runs.baseline(store, trace)
    yield streamed(Shown(trace=trace, base=base, summary=summary_markdown(trace, base) + "\n\n*Measuring the spread…*"),
                   busy("measuring the spread"))
    chain = runs.chain_twin(store, trace, user_drafts) if cfg.tree is not None else None
    spread, skipped = runs.speed_pairs(store, trace, base, user_drafts)
    yield streamed(Shown(trace=trace, base=base, summary=summary_markdown(trace, base, chain, spread, skipped=skipped)), ready())


def busy(phase: str) -> dict:
    """The Run button while a run goes on: disabled, saying what the run is doing (a click there would be lost)."""
    return gr.update(value=f"Running… ({phase})", interactive=False)


def step(trace, number, delta):
    """The round slider's value (round 1 .. n) moved by ``delta`` within the run."""
    n = len(trace.rounds) if trace else 0
    return max(1, min(int(number or 1) + delta, n)) if n else 1


IMPORTED = "where it was recorded (an imported trace: its file does not say on which machine or when)"


def load(path, where: str = IMPORTED) -> Shown:
    """An uploaded JSON trace, shown as a finished run, with the baseline run it was exported with (if any)."""
    trace, base = runs.import_trace(path)
    return all_views(trace, base, where)


def open_gallery(title):
    """A gallery run (a recorded trace and its baseline, shipped in assets/gallery/), shown as a finished run."""
    entry = gallery.entries().get(title)
    if entry is None:
        raise ValueError(f"no gallery run called {title!r}")
    return load(str(gallery.FOLDER / f"{entry.name}.json"), gallery.RECORDED)


def open_named(name):
    """A gallery run by its file name (as links carry it)."""
    titles = {e.name: title for title, e in gallery.entries().items()}
    if name not in titles:
        raise ValueError(f"no gallery run called {name!r}: choose one of {', '.join(titles)}")
    return open_gallery(titles[name])


def form_of(store: ModelStore, trace: Trace | None) -> tuple:
    """The explorer's form (links.FIELDS) set to an opened run's settings, so that Run makes the run shown; the draft
    picker's choices those that fit the run's target (a Gemma-3 GGUF's feature draft among them)."""
    if trace is None:
        return (SKIP,) * len(links.FIELDS)  # every field as it is
    target = trace.target_name if trace.target_name in store.list_targets() else None
    drafts = store.drafts_for(target, slim=True) if target else store.list_drafters()
    values = list(runs.form_values(trace, store.list_targets(), drafts))
    if target is not None:  # the draft picker's choices follow the run's target, as picking it does
        values[links.FIELDS.index("draft")] = fitting_update(store, target, values[links.FIELDS.index("draft")],
                                                             slim=True)
    return tuple(SKIP if v is None else v for v in values)


def draft_pickers(store: ModelStore, user_drafts):
    """New choices for the explorer's draft dropdown and the compare tab's draft checkboxes (values kept)."""
    choices = draft_choices(store, user_drafts)
    return gr.update(choices=choices), gr.update(choices=choices)


def handlers(store: ModelStore):
    """The tab's handlers, bound to ``store`` and ready to wire (tests call them the same way)."""
    h = bind(store, models=dict(run=run, draft_pickers=draft_pickers),
             plain=dict(step=step, load=load, open_gallery=open_gallery,
                        open_named=open_named, replay=replay_round, export=runs.export_trace, what_if=runs.what_if,
                        from_run=runs.from_run, training_beside=training_beside))
    h.generate = one_per_session(gpu_task(friendly(runs.api_generate(store))))  # one model job per visitor
    h.form_of = friendly(functools.partial(form_of, store))
    h.form_of.__name__ = "form_of"  # gradio names the event's endpoint after it
    return h


# -- layout ------------------------------------------------------------------------------------------
def _controls(store: ModelStore) -> dict:
    """The first screen's settings: the prompt, the two models, k and the temperature."""
    prompt = gr.Textbox(label="Prompt", value=EXAMPLE_PROMPTS[0], lines=2, elem_id="prompt")
    # a row each: the draft's full name stays readable
    target, draft = target_picker(store, elem_id="target"), draft_picker(store, elem_id="draft")
    k = gr.Slider(1, 16, value=DEFAULTS.k, step=1, label="k (drafts per round)", elem_id="k",
                  info=k_info(draft.value, DEFAULTS.temperature)["info"])  # what the chosen draft makes of k
    temperature = gr.Slider(0, 2, value=DEFAULTS.temperature, step=0.05, label="Temperature (0 = greedy)",
                            elem_id="temperature")
    for event in (draft.change, temperature.change):
        event(k_info, [draft, temperature], [k], queue=False, api_visibility="private")
    return dict(prompt=prompt, target=target, draft=draft, k=k, temperature=temperature)


def served_form(draft, temperature) -> tuple:
    """k and the draft stop set to those a feature draft records as its fastest for this temperature's case, when the
    user picks it (or a target that brings it); other drafts leave both. A link's own k, set by the page loader, is
    not a pick and stays."""
    found = slim_route.fastest(draft, temperature)
    return (gr.skip(), gr.skip()) if found is None else (found[0], found[1])


def k_info(draft, temperature) -> dict:
    """The k slider's line for the draft and temperature picked (its value untouched): what the draft makes of k, and
    for a feature draft that records it, the k and stop it was measured fastest at."""
    return gr.update(info=k_note(draft, temperature) + slim_route.fastest_note(draft, temperature))


def _more_settings() -> dict:
    """Every other setting, folded, one short line of help each (the glossary says more)."""
    with gr.Accordion("More settings", open=False, elem_id="more-settings"):
        k_policy = gr.Radio(list(K_POLICIES), value=DEFAULTS.k_policy, label="k policy",
                            info="fixed: k every round · history, heuristic: k follows recent acceptance")
        draft_stop = gr.Slider(0, 0.95, value=0, step=0.05, label="Stop drafting below draft confidence q(x) (0 = off)",
                               info="transformers' default: 0.4", elem_id="draft-stop")
        with gr.Row():
            top_k = gr.Number(value=DEFAULTS.top_k, precision=0, minimum=0, label="top-k (0 = off)",
                              info="only the k likeliest tokens")
            top_p = gr.Slider(0.05, 1, value=DEFAULTS.top_p, step=0.05, label="top-p (1 = off)",
                              info="the likeliest tokens holding p")
        with gr.Row():
            max_new = gr.Slider(1, 256, value=DEFAULTS.max_new_tokens, step=1, label="Max new tokens",
                                info="how long the run is")
            seed = gr.Number(value=DEFAULTS.seed, precision=0, minimum=0, label="Seed", info="same seed, same run")
        with_baseline = gr.Checkbox(value=True, label="Also run the autoregressive baseline (measured speedup)",
                                    info="the target alone, timed: the speedup's denominator")
        shape = gr.Dropdown(SHAPES, value="chain", allow_custom_value=True, label="Draft shape", elem_id="shape",
                            info="chain, or a token tree (3,2,2,1 · dynamic:10,8,3): see the glossary")
        children = gr.Radio(["auto", "top", "iid", "distinct"], value="auto", label="Tree children",
                            info="how a tree picks its siblings (auto suits most runs)")
        rule = gr.Dropdown(RULE_CHOICES, value="leviathan", label="Acceptance rule", elem_id="rule",
                           info="Leviathan's, by token or as a block, is exact; lossy ones are not")
    return dict(k_policy=k_policy, draft_stop=draft_stop, top_k=top_k, top_p=top_p, max_new=max_new, seed=seed,
                with_baseline=with_baseline, shape=shape, children=children, rule=rule)


def _gallery_row() -> tuple[list, gr.Dropdown]:
    """The gallery at the top: its first ready runs as buttons, every one in the dropdown."""
    titles = list(gallery.entries())
    with gr.Row(elem_id="gallery-row", equal_height=True):
        shown = gr.Dropdown(titles, value=None, label="Ready runs: replayed at once (no model work)",
                            elem_id="gallery", scale=1, min_width=220)
        with gr.Column(scale=2, min_width=240, elem_classes="sv-gallery-btns"):
            buttons = [gr.Button(t, size="sm", elem_classes="sv-gallery-btn") for t in titles[:GALLERY_BUTTONS]]
    return list(zip(titles, buttons)), shown


def _replay_section() -> tuple:
    """The round slider, its buttons, the replay table and its two charts."""
    gr.Markdown("## Round replay\nPick a round: the table shows each draft's q and p and the decision; "
                "the chart shows the coin u against the accept line min(1, p/q).")
    with gr.Row():
        prev_btn = gr.Button("◀ previous", elem_id="prev", scale=0)
        round_slider = gr.Slider(1, 2, value=1, step=1, label="Round", elem_id="round", interactive=False)
        next_btn = gr.Button("next ▶", elem_id="next", scale=0)
    replay = gr.HTML(replay_html(None, 0), elem_id="replay")  # full width: every column readable at 1024 px
    with gr.Row(), gr.Column():
        accept = chart("A draft is accepted when its coin **u** (×) falls below its bar **min(1, p/q)**.")
        residual = chart("After a rejection the replacement is drawn from the **residual** max(0, p − q), "
                         "renormalised: tokens the target likes more than the draft did.")
    tree = chart("A tree round (draft shape other than chain): every node the draft proposed, verified in one target "
                 "pass; the bold path was accepted, hover a node for p, q, p′, u and the decision.", elem_id="tree-plot")
    return prev_btn, round_slider, next_btn, replay, accept, residual, tree


def _training_beside(h, trace_state) -> None:
    """The trainer's per-step accuracies beside this run's acceptance per draft position."""
    with gr.Accordion("Training beside serving: the trainer's accuracies per position", open=False,
                      elem_id="training-beside"):
        gr.Markdown("Give the trainer's metrics (speculators' `full_acc_i` / `cond_acc_i`, DFlash's or DSpark's "
                    "`position_i_acc`, SpecForge's `acc_i`) as its log, JSON or JSON lines: they are drawn beside this "
                    "run's acceptance per draft position. Below at every position, the first included, points to a "
                    "serving or feature mismatch, not a weak draft. Compare with a greedy run (temperature 0).")
        with gr.Row():
            upload = gr.File(label="The trainer's metrics file", file_types=[".jsonl", ".json", ".log", ".txt"],
                             type="filepath", elem_id="trainer-metrics-file")
            pasted = gr.Textbox(label="…or paste them", lines=4, elem_id="trainer-metrics-text")
        go = gr.Button("Put them beside this run", elem_id="training-beside-btn")
        said = gr.Markdown(elem_id="training-beside-text")
        plot = gr.Plot(show_label=False, elem_id="training-beside-plot")
    go.click(h.training_beside, [trace_state, upload, pasted], [said, plot], api_visibility="private")


def _what_if(h, trace_state, base_state) -> None:
    """The theory explorer: sliders for alpha, k, c and v drawing Leviathan's curves, with the run's point."""
    with gr.Accordion("What if? The theory explorer", open=False, elem_id="what-if"):
        gr.Markdown("Move α (how often a draft is accepted), k, c (a draft step's cost) and v (a verify pass's "
                    "cost), both in target forwards: the curves are E[τ] = (1 − α^(k+1)) / (1 − α) and the speedup "
                    "E[τ] / (k c + v). The × is this run, measured.")
        with gr.Row():  # every value from_run gives fits its slider (runs.SLIDERS)
            sliders = [gr.Slider(*runs.SLIDERS["alpha"], value=0.7, step=0.001, label="α"),
                       gr.Slider(*runs.SLIDERS["k"], value=4, step=1, label="k"),
                       gr.Slider(*runs.SLIDERS["c"], value=0.1, step=0.001, label="c"),
                       gr.Slider(*runs.SLIDERS["v"], value=1.3, step=0.001, label="v")]
        fill = gr.Button("Take α, k, c, v from this run", elem_id="from-run")
        note = gr.Markdown(elem_id="from-run-note")
        curves = gr.Plot(show_label=False, elem_id="what-if-plot")
    for s in sliders:
        s.change(h.what_if, [*sliders, trace_state, base_state], [curves], api_visibility="private")
    fill.click(h.from_run, [trace_state, base_state], [*sliders, note], api_visibility="private")


def _run_charts() -> Charts:
    """The whole run's four charts."""
    gr.Markdown("## The whole run")
    with gr.Row():
        by_pos = chart("Green: of all drafts at position i, the share accepted; it falls with i by construction (each "
                       "needs every earlier one accepted). Blue: of the drafts reached (1..i−1 accepted), the share "
                       "accepted: the draft's own quality at that depth. Read blue to judge a draft, green to pick k.")
        hist = chart("Tokens a round emits: 1 if the first draft is rejected, up to k + 1 if all pass.")
    with gr.Row():
        pq = chart("Above the diagonal (p ≥ q) a draft is always accepted; below it, with probability p/q.")
        times = chart("Where the time goes: k cheap draft steps, then one target forward per round; each split into "
                      "its layers and its LM head where the forward times the head apart.")
    return Charts(by_position=by_pos, per_round=hist, p_vs_q=pq, times=times)


def _form(store: ModelStore) -> tuple[list, gr.Slider, list, gr.Button]:
    """The left column: the first screen's settings and Run, the example prompts, then the rest folded. Returns the
    run's inputs in the handler's order, the draft-stop slider (passed after the user's drafts), [shape, children,
    rule] and the Run button."""
    c = _controls(store)
    # disabled until the page's link (if any) has set the form (demo.py enables it then): a click before that ran the
    # form's defaults, not the link's settings
    run_btn = gr.Button(RUN_LABEL, variant="primary", elem_id="run", interactive=False)
    line = format_line(c["draft"].value)  # under Run: a trained draft's layout, as read; hidden for any other draft
    draft_format = gr.Markdown(line, visible=bool(line), elem_id="draft-format")
    c["draft"].change(format_shown, [c["draft"]], [draft_format], queue=False, api_visibility="private")
    gr.Examples(examples=[[e] for e in EXAMPLE_PROMPTS], inputs=[c["prompt"]], label="Example prompts")
    m = _more_settings()
    inputs = [c["prompt"], c["target"], c["draft"], c["k"], m["k_policy"], c["temperature"], m["top_k"], m["top_p"],
              m["max_new"], m["seed"], m["with_baseline"]]
    return inputs, m["draft_stop"], [m["shape"], m["children"], m["rule"]], run_btn


def build(store: ModelStore, user_drafts: gr.State) -> tuple[gr.Dropdown, object]:
    """The explorer inside the caller's gr.Blocks; returns its draft dropdown (its choices grow with the
    user's trained drafts) and the handlers (``draft_pickers`` refreshes pickers)."""
    h = handlers(store)
    trace_state, base_state = gr.State(None), gr.State(None)
    with gr.Row():
        with gr.Column(scale=1, min_width=360):
            inputs, draft_stop, tree_inputs, run_btn = _form(store)
        with gr.Column(scale=3):
            ready_runs, shown = _gallery_row()
            timeline = gr.HTML(timeline_html(None), elem_id="timeline")
            summary = gr.Markdown(summary_markdown(None, None), elem_id="summary")
            with gr.Accordion("What do these numbers mean?", open=False, elem_id="glossary"):
                gr.Markdown(GLOSSARY)
    prev_btn, round_slider, next_btn, replay, accept, residual, tree = _replay_section()
    charts = _run_charts()
    _training_beside(h, trace_state)
    _what_if(h, trace_state, base_state)
    with gr.Row():
        export_btn = gr.Button("Export trace (CSV + JSON)", elem_id="export")
        files = gr.File(label="Downloads", file_count="multiple", interactive=False)
        upload = gr.File(label="Import a JSON trace (replays without the models)", file_types=[".json"],
                         type="filepath", elem_id="upload")

    replayed = Replay(replay=replay, accept=accept, residual=residual, tree=tree)
    outputs = list(Shown(trace=trace_state, base=base_state, timeline=timeline, summary=summary,
                         round_slider=round_slider, **replayed._asdict(), **charts._asdict()))  # as handlers set them
    # the button says what the run is doing and takes no click until it ends (gradio drops a click on a busy event)
    run_btn.click(lambda: busy("waiting for the models"), None, [run_btn], queue=False, api_visibility="private").then(
        h.run, inputs + [user_drafts, draft_stop, *tree_inputs], outputs + [run_btn], api_visibility="undocumented",
        **MODEL_QUEUE).then(ready, None, [run_btn], queue=False, api_visibility="private")
    link_fields = [*inputs[:10], tree_inputs[0]]  # links.FIELDS: prompt .. seed, then the draft shape
    # an opened run sets the form to its settings: Run then makes the run shown
    upload.upload(h.load, [upload], outputs, api_visibility="undocumented").then(
        h.form_of, [trace_state], link_fields, api_visibility="private")
    # a pick of a draft that records its fastest settings sets k and the stop to them (the k line names them)
    served = dict(fn=served_form, inputs=[inputs[2], inputs[5]], outputs=[inputs[3], draft_stop], queue=False,
                  preprocess=False, api_visibility="private")
    follow_target(store, inputs[1], inputs[2], user_drafts, slim=True).then(**served)
    inputs[2].input(**served)
    for opener, event in [(shown, shown.input)] + [(b, b.click) for _, b in ready_runs]:  # a button passes its title
        event(h.open_gallery, [opener], outputs, api_visibility="private").then(
            h.form_of, [trace_state], link_fields, api_visibility="private")
    round_slider.change(h.replay, [trace_state, round_slider], list(replayed),
                        api_visibility="undocumented")
    prev_btn.click(lambda t, i: h.step(t, i, -1), [trace_state, round_slider], [round_slider],
                   api_visibility="undocumented")
    next_btn.click(lambda t, i: h.step(t, i, +1), [trace_state, round_slider], [round_slider],
                   api_visibility="undocumented")
    export_btn.click(h.export, [trace_state, base_state], [files], api_visibility="undocumented")
    with gr.Row():
        link_btn = gr.Button("Link to these settings", elem_id="link-btn", scale=0)
        link = gr.Textbox(label="Link (opens the explorer with these settings)", elem_id="link", buttons=["copy"],
                          interactive=False)
    link_btn.click(links.query, link_fields, [link], api_visibility="private").then(
        None, [link], [link], js="(q) => q.startsWith('?') ? location.origin + location.pathname + q : q")
    gr.api(h.generate, api_name="generate", **MODEL_QUEUE)
    h.link_fields, h.run_outputs, h.run_button = link_fields, outputs, run_btn
    return inputs[2], h
