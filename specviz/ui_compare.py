"""The Compare drafts and Batch tabs. ``make_compare_handlers(store)`` gives the handlers as plain
functions (the tests call them); ``build_compare_tabs(store)`` lays the tabs out inside ``ui.build_demo``'s
Blocks. Per-user results (the last comparison's settings and baseline run) live in gr.State, and so do the
user's drafts trained in the distillation lab, which the comparison can pick by name."""
from __future__ import annotations

import html
import time
from types import SimpleNamespace

import gradio as gr
import pandas as pd

from . import compare_plots
from .batch import BatchDecoding
from .batch_bench import run_batch_bench
from .batch_plots import tokens_per_s_by_batch
from .compare import (BASELINE, compare_table, context_at, disagreement, divergence_frame, draft_size,
                      iter_compare)
from .config import EXAMPLE_PROMPTS, DecodeConfig
from .handlers import STREAM_EVERY_S, ModelStore, _int, encode, make_config, user_pair
from .lab_handlers import split_prompts
from .timeline import fill_token_text, timeline_html
from .ui import MODEL_QUEUE, _chart, _friendly
from .ui_labs import _sampling_controls

SKIP = gr.skip()
MAX_BATCH = 8  # rows one Batch run decodes together
BENCH_SIZES, BENCH_TOKENS = (1, 2, 4), 12  # the small-scale benchmark: a few tokens per row, < ~30 s


def _esc(x) -> str:
    return html.escape(str(x), quote=True)


# -- views ---------------------------------------------------------------------------------------------
def timelines_html(runs: list) -> str:
    """Every finished run's timeline, one above the other: the baseline (the reference text), then each draft."""
    parts = []
    for run in runs:
        if run.draft == BASELINE:
            head = "target alone (autoregressive baseline): the reference text that positions index into"
        else:
            s = run.trace.summary()
            head = (f"{run.draft}: acceptance {s.acceptance_rate:.2f} · τ {s.tau:.2f} tokens/round · "
                    f"{s.tokens_per_s:.1f} tokens/s")
        parts.append(f'<div class="sv-compare-run" data-draft="{_esc(run.draft)}"><h4>{_esc(head)}</h4>'
                     f"{timeline_html(run.trace)}</div>")
    return "".join(parts)


def table_views(table: pd.DataFrame) -> tuple:
    """The comparison table (rounded) and its three charts (None while no draft has finished)."""
    if table.empty:
        return table, None, None, None
    return (table.round(3), compare_plots.acceptance_by_position(table), compare_plots.speedup_bars(table),
            compare_plots.tau_bars(table))


def batch_views(traces: list, tokenizer, seed: int) -> tuple[str, pd.DataFrame]:
    """Per-row timelines and a row table (acceptance, alpha, tau; timings are the batch's, so none here)."""
    parts, rows = [], []
    for b, trace in enumerate(traces):
        fill_token_text(trace, tokenizer)
        s = trace.summary()
        parts.append(f'<div class="sv-batch-row" data-row="{b}"><h4>row {b} (seed {seed + b}): {s.new_tokens} tokens, '
                     f"acceptance {s.acceptance_rate:.2f}, τ {s.tau:.2f}</h4>{timeline_html(trace)}</div>")
        rows.append(dict(row=b, seed=seed + b, new_tokens=s.new_tokens, rounds=s.rounds,
                         acceptance_rate=s.acceptance_rate, alpha=s.alpha, tau=s.tau, stop=trace.stop_reason))
    return "".join(parts), pd.DataFrame(rows).round(3)


# -- handlers ------------------------------------------------------------------------------------------
def make_compare_handlers(store: ModelStore) -> SimpleNamespace:
    def _token_text(tok):
        return lambda t: tok.decode([int(t)], clean_up_tokenization_spaces=False)

    def run_compare(target, drafts, prompt, k, temperature, top_k, top_p, max_new, seed, user_drafts=None,
                    draft_stop=0.0):
        """Streams (state, status, timelines, table, 3 charts, divergence, position slider, disagreement x3).
        ``user_drafts``: this user's trained drafts ({name: TrainedDraft}), picked by name before the store's."""
        if not drafts:
            raise ValueError("pick at least one draft to compare")
        cfg = make_config(k, "fixed", temperature, top_k, top_p, max_new, seed, draft_stop)
        model, tok = store.target(target)
        ids, chosen = encode(tok, prompt), {d: user_pair(store, target, d, user_drafts)[2] for d in drafts}
        sizes, runs, start = {d: draft_size(x) for d, x in chosen.items()}, [], time.perf_counter()
        for run in iter_compare(model, chosen, ids, cfg):
            run.trace.target_name = target
            runs.append(run)
            fill_token_text(run.trace, tok)
            done = f"**{len(runs) - 1} / {len(chosen)} drafts** done ({time.perf_counter() - start:.1f} s)…"
            yield (SKIP, done, timelines_html(runs), *table_views(compare_table(runs, sizes)), *(SKIP,) * 5)
        mine = {d: user_drafts[d] for d in chosen if d in (user_drafts or {})}  # for disagree: same user
        state = dict(target=target, drafts=list(chosen), cfg=cfg, baseline=runs[0].trace, user_drafts=mine)
        divergence = divergence_frame(runs)
        first = divergence.position.dropna()
        position = int(first.min()) if len(first) else 0
        n = len(runs[0].trace.new_tokens)
        slider = gr.Slider(minimum=0, maximum=max(n - 1, 1), value=position, step=1, interactive=n > 1)
        status = (f"**Done**: the baseline and {len(chosen)} drafts in {time.perf_counter() - start:.1f} s "
                  "(measured on this machine, one run at a time). The disagreement view opens at the earliest "
                  "first rejection.")
        yield (state, status, SKIP, SKIP, SKIP, SKIP, SKIP, divergence, slider, *disagree(state, position))

    def disagree(state, position):
        """(markdown, table, chart): each draft's q beside the target's p at generated token ``position``."""
        if not state:
            raise ValueError("run a comparison first: the position indexes into its baseline run")
        model, tok = store.target(state["target"])
        mine = state.get("user_drafts")
        drafts = {d: user_pair(store, state["target"], d, mine)[2] for d in state["drafts"]}
        base = state["baseline"]
        position = _int(position, "position")
        frame = disagreement(model, drafts, base, position, state["cfg"], text=_token_text(tok))
        context = "".join(base.text(t) for t in context_at(base, position)[-24:])
        put = base.text(base.new_tokens[position])
        note = (f"Position **{position}** after …`{context!r}`: the target's run put **{put!r}** here. "
                "p is the target's distribution, each q a draft's (a model-free draft: a point mass on its "
                "proposal, all zeros if it proposes nothing).")
        return note, frame.round(4), compare_plots.disagreement_bars(frame)

    def run_batch(target, draft, prompts_text, k, temperature, top_k, top_p, max_new, seed):
        """Streams (per-row timelines, row table) of one batched speculative run."""
        cfg = make_config(k, "fixed", temperature, top_k, top_p, max_new, seed)
        model, tok = store.target(target)
        texts = split_prompts(prompts_text)
        if len(texts) > MAX_BATCH:
            raise ValueError(f"{len(texts)} prompts: a batch here holds at most {MAX_BATCH}")
        run = BatchDecoding(model, store.pair(target, draft)[2], [encode(tok, p) for p in texts], cfg)
        last = time.perf_counter()
        for _ in run:
            if time.perf_counter() - last >= STREAM_EVERY_S:
                last = time.perf_counter()
                yield batch_views(run.traces, tok, cfg.seed)
        yield batch_views(run.traces, tok, cfg.seed)

    def run_bench(target, draft, prompts_text, k):
        """(status, chart, table): batched speculative vs autoregressive tokens/s at batch sizes 1, 2, 4."""
        cfg = DecodeConfig(k=_int(k, "k"), temperature=0.0, max_new_tokens=BENCH_TOKENS, record=False)
        model, tok = store.target(target)
        prompts = [encode(tok, p) for p in split_prompts(prompts_text)]
        start = time.perf_counter()
        frame = run_batch_bench(model, store.pair(target, draft)[2], prompts, cfg, sizes=BENCH_SIZES, repeats=1)
        status = (f"**Done in {time.perf_counter() - start:.1f} s**: greedy, k = {cfg.k}, {BENCH_TOKENS} tokens per "
                  f"row, batch sizes {', '.join(map(str, BENCH_SIZES))} (your prompts cycled to fill a batch), one "
                  "repeat, methods interleaved. Small scale: expect noise.")
        return status, tokens_per_s_by_batch(frame), frame.round(3)

    return SimpleNamespace(run_compare=_friendly(run_compare), disagree=_friendly(disagree),
                           run_batch=_friendly(run_batch), run_bench=_friendly(run_bench))


# -- layout --------------------------------------------------------------------------------------------
def _settings(max_new: int) -> list:
    with gr.Row():
        k = gr.Slider(1, 10, value=4, step=1, label="k (drafts per round)")
        new = gr.Number(max_new, precision=0, minimum=1, label="new tokens")
        seed = gr.Number(0, precision=0, minimum=0, label="seed")
    return [k, *_sampling_controls(0.0), new, seed]


def _compare_tab(store: ModelStore, h, user_drafts: gr.State) -> gr.CheckboxGroup:
    """The tab; returns its draft checkboxes (their choices grow with the user's trained drafts)."""
    state = gr.State(None)
    gr.Markdown("One target, several drafts, the same prompt, settings and seed; the autoregressive baseline runs "
                "in the same call, so every speedup has the same denominator. Timelines appear as each draft finishes.")
    with gr.Row():
        target = gr.Dropdown(store.list_targets(), value=store.default_target(), label="Target")
        drafts = gr.CheckboxGroup(store.list_drafters(), value=store.list_drafters(), label="Drafts")
    prompt = gr.Textbox(EXAMPLE_PROMPTS[1], lines=2, label="Prompt")
    settings = _settings(48)
    draft_stop = gr.Number(0, minimum=0, maximum=0.99, label="stop drafting below draft confidence q(x) (0 = off; "
                           "transformers' default is 0.4)")
    run_btn = gr.Button("Compare", variant="primary")
    status = gr.Markdown()
    timelines = gr.HTML(elem_id="compare-timelines")
    table = gr.Dataframe(label="Per draft (size: parameters; n-gram: stored n-grams; 0: model-free)",
                         interactive=False)
    with gr.Row():
        acc = _chart("Acceptance per draft position: each later position needs the earlier ones accepted.")
        speed = _chart("Speedup: tokens/s over the baseline run in the same call.")
        tau = _chart("τ: tokens per round, i.e. tokens per target forward.")
    gr.Markdown("### Where they diverge and disagree")
    divergence = gr.Dataframe(label="First rejection per draft (position in the generated tokens)", interactive=False)
    position = gr.Slider(0, 1, value=0, step=1, label="Position in the baseline's generated text", interactive=False)
    note = gr.Markdown()
    with gr.Row():
        dis_table = gr.Dataframe(label="Top tokens: p (target) and q per draft", interactive=False)
        dis_chart = _chart("Where a draft's q misses the target's top token, its draft gets rejected.")
    run_btn.click(h.run_compare, [target, drafts, prompt, *settings, user_drafts, draft_stop],
                  [state, status, timelines, table, acc, speed, tau, divergence, position, note, dis_table, dis_chart],
                  api_visibility="undocumented", **MODEL_QUEUE)
    position.release(h.disagree, [state, position], [note, dis_table, dis_chart], api_visibility="undocumented",
                     **MODEL_QUEUE)
    return drafts


def _batch_tab(store: ModelStore, h) -> None:
    gr.Markdown("Several prompts decoded together (one batched target forward per round); each row accepts its "
                f"own number of drafts. Row b uses seed + b. At most {MAX_BATCH} prompts.")
    with gr.Row():
        target = gr.Dropdown(store.list_targets(), value=store.default_target(), label="Target")
        draft = gr.Dropdown(store.list_drafters(), value=store.default_draft(), label="Draft")
    prompts = gr.Textbox("\n\n".join(EXAMPLE_PROMPTS[:3]), lines=6, label="Prompts (separate with an empty line)")
    settings = _settings(32)
    with gr.Row():
        run_btn = gr.Button("Run batch", variant="primary")
        bench_btn = gr.Button(f"Benchmark batch sizes {', '.join(map(str, BENCH_SIZES))} (small, greedy)")
    rows = gr.HTML(elem_id="batch-rows")
    row_table = gr.Dataframe(label="Per row", interactive=False)
    bench_status = gr.Markdown()
    with gr.Row():
        bench_chart = _chart("Throughput: all rows' tokens over the batch's wall time.")
        bench_table = gr.Dataframe(label="Benchmark", interactive=False)
    run_btn.click(h.run_batch, [target, draft, prompts, *settings], [rows, row_table], api_visibility="undocumented",
                  **MODEL_QUEUE)
    bench_btn.click(h.run_bench, [target, draft, prompts, settings[0]], [bench_status, bench_chart, bench_table],
                    api_visibility="undocumented", **MODEL_QUEUE)


def build_compare_tabs(store: ModelStore, user_drafts: gr.State | None = None) -> gr.CheckboxGroup:
    """The Compare drafts and Batch tabs, inside the caller's gr.Blocks. ``user_drafts``: the user's trained
    drafts (a gr.State dict; a fresh one if None). Returns the compare tab's draft checkboxes."""
    h = make_compare_handlers(store)
    user_drafts = gr.State({}) if user_drafts is None else user_drafts
    with gr.Tabs():
        with gr.Tab("Compare drafts"):
            drafts = _compare_tab(store, h, user_drafts)
        with gr.Tab("Batch"):
            _batch_tab(store, h)
    return drafts
