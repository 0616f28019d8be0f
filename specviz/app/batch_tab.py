"""The Batch tab: several prompts decoded together (one batched target forward per round, each row accepting its
own number of drafts), and a small benchmark of batch sizes."""
from __future__ import annotations

import time
from dataclasses import replace
from typing import NamedTuple

import gradio as gr

from ..batch import BatchDecoding
from ..config import EXAMPLE_PROMPTS
from ..labs.batch_bench import run_batch_bench
from ..views.compare_plots import tokens_per_s_by_batch
from ..views.runs import batch_rows_frame, batch_rows_html
from .budget import Budget, token_seconds
from .forms import encode, make_config, split_prompts
from .runs import STREAM_EVERY_S
from .store import ModelStore
from .widgets import LAB_QUEUE, bind, chart, draft_picker, follow_target, run_settings, target_picker

MAX_BATCH = 8  # rows one Batch run decodes together
BENCH_SIZES, BENCH_TOKENS = (1, 2, 4), 12  # the small-scale benchmark: a few tokens per row, < ~30 s


class Batched(NamedTuple):
    """A batched run's views: the per-row timelines and the row table."""
    rows: object
    table: object


class Benched(NamedTuple):
    """The batch-size benchmark's views: its status, chart and table."""
    status: object
    chart: object
    table: object


def batch_views(traces: list, tokenizer, seed: int) -> Batched:
    """The per-row timelines and the row table, token texts filled in."""
    for trace in traces:
        trace.fill_texts(tokenizer)
    return Batched(rows=batch_rows_html(traces, seed), table=batch_rows_frame(traces, seed))


def batch_prompts(tok, prompts_text) -> list:
    """The prompts as ids, at most MAX_BATCH of them (each held to the prompt's length limit by ``encode``)."""
    texts = split_prompts(prompts_text)
    if len(texts) > MAX_BATCH:
        raise ValueError(f"{len(texts)} prompts: a batch here holds at most {MAX_BATCH}")
    return [encode(tok, p) for p in texts]


def run_batch(store: ModelStore, target, draft, prompts_text, k, temperature, top_k, top_p, max_new, seed):
    """Streams ``Batched`` (per-row timelines, row table) of one batched speculative run, within the request's budget: refused
    at once when rows x new tokens at this model's pace would overrun it, checked between rounds."""
    budget = Budget()
    cfg = make_config(k, "fixed", temperature, top_k, top_p, max_new, seed)
    model, tok = store.target(target)
    prompts = batch_prompts(tok, prompts_text)
    budget.refuse_over(len(prompts) * cfg.max_new_tokens * token_seconds(model, prompts[0], cfg),
                       f"this batch ({len(prompts)} rows of {cfg.max_new_tokens} tokens)", "fewer prompts or new tokens")
    run = BatchDecoding(model, store.pair(target, draft)[2], prompts, cfg)
    last = time.perf_counter()
    for _ in run:
        budget.check()
        if time.perf_counter() - last >= STREAM_EVERY_S:
            last = time.perf_counter()
            yield batch_views(run.traces, tok, cfg.seed)
    yield batch_views(run.traces, tok, cfg.seed)


def run_bench(store: ModelStore, target, draft, prompts_text, k):
    """``Benched`` (status, chart, table): batched speculative vs autoregressive tokens/s at batch sizes 1, 2, 4, refused at
    once when its rows (a warm-up and each size, both methods) at this model's pace would overrun the budget, and
    checked before each measurement (stopped there once past the budget or once its visitor has left)."""
    budget = Budget()
    cfg = replace(make_config(k, "fixed", 0.0, 0, 1.0, BENCH_TOKENS, 0), record=False)  # k checked as the forms do
    model, tok = store.target(target)
    prompts = [encode(tok, p) for p in split_prompts(prompts_text)[: max(BENCH_SIZES)]]  # cycled to fill a batch
    rows = 2 * (2 + sum(BENCH_SIZES))  # both methods: the warm-up's 2 rows, then each size
    budget.refuse_over(rows * BENCH_TOKENS * token_seconds(model, prompts[0], cfg), "this benchmark",
                       "a smaller model")
    start = time.perf_counter()
    frame = run_batch_bench(model, store.pair(target, draft)[2], prompts, cfg, sizes=BENCH_SIZES, repeats=1,
                            check=budget.check)
    status = (f"**Done in {time.perf_counter() - start:.1f} s**: greedy, k = {cfg.k}, {BENCH_TOKENS} tokens per "
              f"row, batch sizes {', '.join(map(str, BENCH_SIZES))} (your prompts cycled to fill a batch), one "
              "repeat, methods interleaved. Small scale: expect noise.")
    return Benched(status=status, chart=tokens_per_s_by_batch(frame), table=frame.round(3))


def handlers(store: ModelStore):
    return bind(store, models=dict(run_batch=run_batch, run_bench=run_bench))


def build(store: ModelStore) -> None:
    h = handlers(store)
    gr.Markdown("Several prompts decoded together (one batched target forward per round); each row accepts its "
                f"own number of drafts. Row b uses seed + b. At most {MAX_BATCH} prompts.")
    with gr.Row():
        target, draft = target_picker(store), draft_picker(store, model=True)
    follow_target(store, target, draft)
    prompts = gr.Textbox("\n\n".join(EXAMPLE_PROMPTS[:3]), lines=6, label="Prompts (separate with an empty line)")
    form = run_settings(32)
    with gr.Row():
        run_btn = gr.Button("Run batch", variant="primary")
        bench_btn = gr.Button(f"Benchmark batch sizes {', '.join(map(str, BENCH_SIZES))} (small, greedy)")
    rows = gr.HTML(elem_id="batch-rows")
    row_table = gr.Dataframe(label="Per row", interactive=False)
    bench_status = gr.Markdown()
    with gr.Row():
        bench_chart = chart("Throughput: all rows' tokens over the batch's wall time.")
        bench_table = gr.Dataframe(label="Benchmark", interactive=False)
    run_btn.click(h.run_batch, [target, draft, prompts, *form], list(Batched(rows=rows, table=row_table)),
                  api_visibility="undocumented", **LAB_QUEUE)
    bench_btn.click(h.run_bench, [target, draft, prompts, form[0]],
                    list(Benched(status=bench_status, chart=bench_chart, table=bench_table)),
                    api_visibility="undocumented", **LAB_QUEUE)
