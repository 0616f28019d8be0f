"""The gradio app: ``build_demo()`` lays out controls, timeline, round replay and charts and wires
thin handlers (``specviz.handlers`` does the work); ``launch()`` serves it. Per-user data is the
current Trace (and its baseline) and the drafts trained in the distillation lab, in gr.State; models are
shared through one ModelStore."""
from __future__ import annotations

import functools
import inspect
import logging
import os
from types import SimpleNamespace

import gradio as gr

from . import handlers, plots
from .config import EXAMPLE_PROMPTS, K_POLICIES
from .gpu import gpu_task
from .handlers import ModelStore
from .timeline import CSS, replay_html, timeline_html
from .trace import Trace

DEFAULTS = dict(k=4, k_policy="fixed", temperature=0.8, top_k=0, top_p=1.0, max_new_tokens=64, seed=0)
MODEL_QUEUE = dict(concurrency_id="model", concurrency_limit=1)  # one decode at a time: timings stay honest
log = logging.getLogger(__name__)


def _friendly(fn):
    """ValueError -> gr.Error with its message; anything else -> a short gr.Error (trace in the log)."""
    def convert(e: Exception) -> gr.Error:
        if isinstance(e, gr.Error):
            return e
        if isinstance(e, ValueError):
            return gr.Error(str(e))
        log.exception("handler failed")
        return gr.Error(f"internal error ({type(e).__name__}: {e}); the app keeps running")

    if inspect.isgeneratorfunction(fn):
        @functools.wraps(fn)
        def stream(*args, **kwargs):
            try:
                yield from fn(*args, **kwargs)
            except Exception as e:
                raise convert(e) from None
        return stream

    @functools.wraps(fn)
    def call(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except Exception as e:
            raise convert(e) from None
    return call


# -- views: a Trace in, component values out ----------------------------------------------------------
def replay_views(trace: Trace | None, index) -> tuple:
    """Round ``index`` in detail: its table, its accept-line chart and its residual chart."""
    if trace is None or not trace.rounds:
        return replay_html(trace, 0), None, None
    i = max(0, min(int(index or 0), len(trace.rounds) - 1))
    tokens = trace.to_frame()
    return (replay_html(trace, i), plots.accept_line(tokens[tokens["round"] == i]),
            plots.residual_bars(plots.residual_frame(trace, i)))


def chart_views(trace: Trace | None) -> tuple:
    if trace is None or not trace.rounds:
        return None, None, None, None
    tokens, rounds = trace.to_frame(), plots.rounds_frame(trace)
    return (plots.acceptance_by_position(tokens), plots.tokens_per_round(rounds), plots.p_vs_q(tokens),
            plots.round_times(rounds))


def all_views(trace: Trace | None, base: Trace | None) -> tuple:
    """Every output of a finished run or an import, in OUTPUT order after the two states."""
    n = len(trace.rounds) if trace else 0
    slider = gr.Slider(minimum=0, maximum=max(1, n - 1), value=0, step=1, interactive=n > 1)
    return (timeline_html(trace), handlers.summary_markdown(trace, base), slider,
            *replay_views(trace, 0), *chart_views(trace))


def make_handlers(store: ModelStore) -> SimpleNamespace:
    """The event handlers as plain functions (tests call them without a server)."""
    skip = (gr.skip(),) * 8  # slider, replay x3, charts x4 stay as they are while a run streams

    def run(prompt, target, draft, k, k_policy, temperature, top_k, top_p, max_new_tokens, seed, with_baseline=True,
            user_drafts=None, draft_stop=0.0):
        """``user_drafts``: this user's trained drafts ({name: TrainedDraft}), pickable by name."""
        cfg = handlers.make_config(k, k_policy, temperature, top_k, top_p, max_new_tokens, seed, draft_stop)
        trace = None
        for trace in handlers.stream_run(store, prompt, target, draft, cfg, user_drafts=user_drafts):
            yield trace, None, timeline_html(trace), handlers.summary_markdown(trace, None), *skip
        yield trace, None, *all_views(trace, None)
        if with_baseline:
            yield trace, None, gr.skip(), handlers.summary_markdown(trace, None) + "\n\n*Running the baseline…*", *skip
            base = handlers.baseline(store, trace)
            yield trace, base, gr.skip(), handlers.summary_markdown(trace, base), *skip

    def step(trace, index, delta):
        n = len(trace.rounds) if trace else 0
        return max(0, min(int(index or 0) + delta, n - 1)) if n else 0

    def load(path):
        trace = handlers.import_trace(path)
        return trace, None, *all_views(trace, None)

    def generate(prompt: str, target: str = store.default_target(), draft: str = store.default_draft(),
                 k: int = DEFAULTS["k"], temperature: float = DEFAULTS["temperature"], top_k: int = DEFAULTS["top_k"],
                 top_p: float = DEFAULTS["top_p"], max_new_tokens: int = DEFAULTS["max_new_tokens"],
                 seed: int = DEFAULTS["seed"], draft_stop: float = 0.0) -> str:
        """Speculative decoding of `prompt`; returns the full trace as JSON (schema specviz.trace/1).
        `draft_stop` > 0 ends a round's drafting below that draft confidence (transformers' 0.4 rule)."""
        cfg = handlers.make_config(k, "fixed", temperature, top_k, top_p, max_new_tokens, seed, draft_stop)
        return handlers.generate(store, prompt, target, draft, cfg).to_json()

    def draft_pickers(user_drafts):
        """New choices for the explorer's draft dropdown and the compare tab's draft checkboxes (values kept)."""
        choices = handlers.draft_choices(store, user_drafts)
        return gr.update(choices=choices), gr.update(choices=choices)

    return SimpleNamespace(run=gpu_task(_friendly(run)), step=_friendly(step), load=_friendly(load),
                           replay=_friendly(replay_views), export=_friendly(handlers.export_trace),
                           generate=gpu_task(_friendly(generate)), draft_pickers=_friendly(draft_pickers))


# -- layout ------------------------------------------------------------------------------------------
def _controls(store: ModelStore) -> tuple[list, gr.Slider]:
    """The run's inputs in the handler's order, and the draft-stop slider (passed after the user's drafts)."""
    prompt = gr.Textbox(label="Prompt", value=EXAMPLE_PROMPTS[0], lines=3, elem_id="prompt")
    gr.Examples(examples=[[e] for e in EXAMPLE_PROMPTS], inputs=[prompt], label="Examples")
    with gr.Row():
        target = gr.Dropdown(store.list_targets(), value=store.default_target(), label="Target")
        draft = gr.Dropdown(store.list_drafters(), value=store.default_draft(), label="Draft")
    k = gr.Slider(1, 10, value=DEFAULTS["k"], step=1, label="k (drafts per round)")
    k_policy = gr.Radio(list(K_POLICIES), value=DEFAULTS["k_policy"], label="k policy")
    draft_stop = gr.Slider(0, 0.95, value=0, step=0.05, label="Stop drafting below draft confidence q(x) (0 = off)",
                           info="transformers' assistant_confidence_threshold (its default: 0.4)", elem_id="draft-stop")
    temperature = gr.Slider(0, 2, value=DEFAULTS["temperature"], step=0.05, label="Temperature (0 = greedy)")
    with gr.Row():
        top_k = gr.Number(value=DEFAULTS["top_k"], precision=0, minimum=0, label="top-k (0 = off)")
        top_p = gr.Slider(0.05, 1, value=DEFAULTS["top_p"], step=0.05, label="top-p (1 = off)")
    with gr.Row():
        max_new = gr.Slider(1, 256, value=DEFAULTS["max_new_tokens"], step=1, label="Max new tokens")
        seed = gr.Number(value=DEFAULTS["seed"], precision=0, minimum=0, label="Seed")
    with_baseline = gr.Checkbox(value=True, label="Also run the autoregressive baseline (measured speedup)")
    return [prompt, target, draft, k, k_policy, temperature, top_k, top_p, max_new, seed, with_baseline], draft_stop


def _chart(caption: str) -> gr.Plot:
    with gr.Column():
        plot = gr.Plot(show_label=False)
        gr.Markdown(caption)
    return plot


def build_demo(store: ModelStore | None = None) -> gr.Blocks:
    """The whole app. Nothing loads here: models load on the first run and are then shared."""
    store = store or ModelStore()
    h = make_handlers(store)
    with gr.Blocks(title="specviz: see speculative decoding") as demo:
        trace_state, base_state = gr.State(None), gr.State(None)
        user_drafts = gr.State({})  # this user's trained drafts (name -> TrainedDraft): theirs alone
        gr.Markdown("# specviz: see speculative decoding\nA small **draft** guesses k tokens, the **target** checks "
                    "them all in one forward pass, and a coin flip per token keeps the output exactly the target's.")
        with gr.Row():
            with gr.Column(scale=1, min_width=320):
                inputs, draft_stop = _controls(store)
                run_btn = gr.Button("Run", variant="primary", elem_id="run")
            with gr.Column(scale=3):
                timeline = gr.HTML(timeline_html(None), elem_id="timeline")
                summary = gr.Markdown(handlers.summary_markdown(None, None), elem_id="summary")
        gr.Markdown("## Round replay\nPick a round: the table shows each draft's q and p and the decision; "
                    "the chart shows the coin u against the accept line min(1, p/q).")
        with gr.Row():
            prev_btn = gr.Button("◀ previous", elem_id="prev", scale=0)
            round_slider = gr.Slider(0, 1, value=0, step=1, label="Round", elem_id="round", interactive=False)
            next_btn = gr.Button("next ▶", elem_id="next", scale=0)
        with gr.Row():
            replay = gr.HTML(replay_html(None, 0), elem_id="replay")
            with gr.Column():
                accept = _chart("A draft is accepted when its coin **u** (×) falls below its bar **min(1, p/q)**.")
                residual = _chart("After a rejection the replacement is drawn from the **residual** max(0, p − q), "
                                  "renormalised: tokens the target likes more than the draft did.")
        gr.Markdown("## The whole run")
        with gr.Row():
            by_pos = _chart("Later drafts are accepted less often: each needs all earlier ones accepted too.")
            hist = _chart("Tokens a round emits: 1 if the first draft is rejected, up to k + 1 if all pass.")
        with gr.Row():
            pq = _chart("Above the diagonal (p ≥ q) a draft is always accepted; below it, with probability p/q.")
            times = _chart("Where the time goes: k cheap draft steps, then one target forward per round.")
        with gr.Row():
            export_btn = gr.Button("Export trace (CSV + JSON)", elem_id="export")
            files = gr.File(label="Downloads", file_count="multiple", interactive=False)
            upload = gr.File(label="Import a JSON trace (replays without the models)", file_types=[".json"],
                             type="filepath", elem_id="upload")

        outputs = [trace_state, base_state, timeline, summary, round_slider, replay, accept, residual,
                   by_pos, hist, pq, times]
        run_btn.click(h.run, inputs + [user_drafts, draft_stop], outputs, api_visibility="undocumented", **MODEL_QUEUE)
        upload.upload(h.load, [upload], outputs, api_visibility="undocumented")
        round_slider.change(h.replay, [trace_state, round_slider], [replay, accept, residual],
                            api_visibility="undocumented")
        prev_btn.click(lambda t, i: h.step(t, i, -1), [trace_state, round_slider], [round_slider],
                       api_visibility="undocumented")
        next_btn.click(lambda t, i: h.step(t, i, +1), [trace_state, round_slider], [round_slider],
                       api_visibility="undocumented")
        export_btn.click(h.export, [trace_state], [files], api_visibility="undocumented")
        gr.api(h.generate, api_name="generate", **MODEL_QUEUE)
        from .ui_labs import build_lab_tabs  # imported here: ui_labs reuses this module's helpers

        gr.Markdown("## Labs")
        trained = build_lab_tabs(store, user_drafts)
        from .ui_compare import build_compare_tabs

        gr.Markdown("## Compare drafts, batch")
        compare_drafts = build_compare_tabs(store, user_drafts)
        trained.then(h.draft_pickers, [user_drafts], [inputs[2], compare_drafts], api_visibility="undocumented")
    return demo


def launch(demo: gr.Blocks, **kwargs):
    """Serve the app; GRADIO_SERVER_NAME / GRADIO_SERVER_PORT choose where (gradio's defaults otherwise)."""
    options = dict(theme=gr.themes.Soft(), css=CSS)
    if os.environ.get("GRADIO_SERVER_NAME"):
        options["server_name"] = os.environ["GRADIO_SERVER_NAME"]
    if os.environ.get("GRADIO_SERVER_PORT"):
        options["server_port"] = int(os.environ["GRADIO_SERVER_PORT"])
    options.update(kwargs)
    return demo.queue().launch(**options)
