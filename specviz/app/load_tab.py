"""The Load lab's tab: batched speculative against autoregressive decoding at growing batch sizes, the measured
crossover beside the goodput model's, the best k per batch and the verify-cost surface (``specviz.labs.load``)."""
from __future__ import annotations

import gradio as gr
import pandas as pd

from .. import goodput as gp
from ..config import EXAMPLE_PROMPTS
from ..labs import load
from ..views import load_plots
from ..views.tables import readable
from .budget import Budget, form_key, promise, promised, withdraw
from .forms import as_int, encode, split_prompts
from .store import ModelStore
from .widgets import LAB_QUEUE, bind, chart, lab_inputs

DEFAULT_BATCHES, CONTEXTS = ["1", "2", "4"], [128, 256, 512, 1024, 2048]
DEFAULT_K, DEFAULT_TOKENS, DEFAULT_REPEATS = 2, 8, 1
REDUCE = "pick fewer batch sizes (the largest costs most), a shorter context, fewer new tokens or one repeat"


def setup(store: ModelStore, target, draft, prompts_text, batches, context, k, new_tokens, repeats) -> dict:
    """The lab's arguments from the form, validated (ValueError saying what to change)."""
    if not batches:
        raise ValueError("pick at least one batch size")
    model, tok = store.target(target)
    prompts = [encode(tok, p)[0].tolist() for p in split_prompts(prompts_text)]
    args = dict(target=model, draft=store.pair(target, draft)[2], prompts=prompts, batches=[int(b) for b in batches],
                context=as_int(context, "context"), k=as_int(k, "k"), new_tokens=as_int(new_tokens, "new tokens"),
                repeats=as_int(repeats, "repeats"), sep=tok("\n").input_ids)
    load.check_setting(model, args["batches"], args["context"], args["k"], args["new_tokens"], args["repeats"])
    return args


def estimate_time(store: ModelStore, target, draft, prompts_text, batches, context, k, new_tokens, repeats) -> str:
    """Markdown: the pilot's estimate, and whether Run load lab will take it (the same gate it applies, and a
    promise it keeps: ``budget.promise``, or none where it would refuse: ``budget.withdraw``)."""
    form = (target, draft, prompts_text, batches, context, k, new_tokens, repeats)
    args, key = setup(store, *form), form_key("load", *form)
    budget, time_of = Budget(), load.estimate(**args)
    try:
        budget.refuse_over(time_of.likely, "this load run", REDUCE)
    except ValueError as refused:
        withdraw(key)
        return f"**Run load lab would refuse this now:** {refused}"
    promise(key, time_of.likely, budget.seconds)
    return f"**Estimated {time_of}**, from a pilot at batch 1 priced through the goodput model at each batch size."


def run_lab(store: ModelStore, target, draft, prompts_text, batches, context, k, new_tokens, repeats):
    """(status, verdict, throughput chart, speedup chart, surface chart, table) of one run, refused at once when
    its estimate is over the request's budget (unless Estimate time said this form fits), checked between passes
    and runs."""
    form = (target, draft, prompts_text, batches, context, k, new_tokens, repeats)
    budget = Budget()
    kept = promised(form_key("load", *form), budget.seconds)
    args = setup(store, *form)
    time_of, more = load.estimate(**args), ""
    if time_of.likely > budget.seconds and kept is not None:
        more = kept.words(time_of, budget)
    else:
        budget.refuse_over(time_of.likely, "this load run", f"its estimate {time_of}; {REDUCE}")
    result = load.run_lab(**args, check=budget.check)
    status = (f"**Done in {result.seconds:.1f} s** (estimated {time_of}): greedy, k = {args['k']}, "
              f"{args['new_tokens']} new tokens a request after {args['context']:,} tokens of context, "
              f"{args['repeats']} repeat(s), the methods interleaved. Forward: "
              f"{load.forward_used(args['target'])}{more}")
    s = result.summary
    return (status, verdict(result, args["batches"], args["k"]), load_plots.throughput_by_batch(s),
            load_plots.speedup_by_batch(s, result.measured.batch, result.prediction.crossover.batch),
            load_plots.verify_surface(result.passes), readable(s.round(3)))


def crossing_words(c: gp.Crossover) -> str:
    if c.verdict == "crosses":
        return f"stops paying at batch {c.batch} (it paid at {c.last_paying})"
    return {"never pays": "does not pay at any batch size measured",
            "pays throughout": "pays at every batch size measured",
            }.get(c.verdict, "loses at the small batch sizes and pays from a larger one")


def verdict(result: load.LoadResult, batches: list[int], k: int) -> str:
    """Markdown, every figure read from this run: the two crossovers, why, the best k, the model's assumptions."""
    p, s = result.prediction, result.summary
    first = s.iloc[0]
    b = int(first.batch)
    verify_ms = 1e3 * p.target.seconds(b * (k + 1), load_context(result))
    step_ms, draft_ms = 1e3 * p.target.seconds(b, load_context(result)), 1e3 * p.draft.seconds(b, k, load_context(result))
    agree = steps_apart(batches, result.measured, p.crossover)
    lines = [
        f"**Measured:** speculation {crossing_words(result.measured)}. **The goodput model:** it "
        f"{crossing_words(p.crossover)}" + (f" ({agree})." if agree else "."),
        f"**Why, at batch {b}:** a round verifies {b} x {k + 1} tokens in {verify_ms:.0f} ms and drafts in "
        f"{draft_ms:.0f} ms, and emits {first.tokens_per_step:.2f} tokens a request; a plain step of {b} token(s) "
        f"takes {step_ms:.0f} ms. A pass here costs {1e3 * p.target.fixed:.0f} ms + {1e3 * p.target.per_token:.1f} ms a "
        "token (fitted on the passes these runs timed): the more of a pass is per-token work, the less the extra verify rows "
        "come free, and every request in the batch pays for its own.",
        *([f"**No crossover in range, why:** {none}"] if (none := load.why_none(
            result.measured, p, s, load_context(result), k)) else []),
        "**Best k (the model's):** " + "; ".join(f"batch {lo}–{hi}: " + (f"k = {kk}" if kk else "no speculation")
                                                for lo, hi, kk in p.best_k) + ".",
        "**The model assumes:** " + "; ".join(gp.ASSUMPTIONS) + ". It saw the passes these runs timed, each batch's acceptance "
        f"per position (over all: {', '.join(f'{r:.2f}' for r in p.rates)}) and the smallest batch's bookkeeping "
        f"({1e3 * p.overhead_s:.2f} ms a request and step), never the runs' tokens/s.",
    ]
    return "\n\n".join(lines)


def load_context(result: load.LoadResult) -> int:
    return int(result.passes.context.iloc[0])


def steps_apart(batches: list[int], measured: gp.Crossover, model: gp.Crossover) -> str:
    """How far apart the two crossovers lie, in batch steps of this run ("" when either has none)."""
    if measured.batch is None or model.batch is None:
        return "the same verdict" if measured.verdict == model.verdict else ""
    apart = abs(batches.index(measured.batch) - batches.index(model.batch))
    return "the same batch" if apart == 0 else f"{apart} batch step{'s' * (apart > 1)} from the measured one"


def handlers(store: ModelStore):
    return bind(store, models=dict(estimate_load=estimate_time, run_load_lab=run_lab))


def build(store: ModelStore) -> None:
    h = handlers(store)
    gr.Markdown("Decode B requests together, with speculation and without, at growing B: where does speculation stop "
                "paying? Beside the measurement, the goodput model (a pass's cost fitted on the passes the runs "
                "themselves timed) predicts it; a run names the forward its batches ran on.")
    target, draft, prompts = lab_inputs(store, EXAMPLE_PROMPTS, model=True, lines=4)
    with gr.Row():
        batches = gr.CheckboxGroup([str(b) for b in load.BATCHES], value=DEFAULT_BATCHES, label="batch sizes",
                                  elem_id="load-batches")
        context = gr.Dropdown(CONTEXTS, value=CONTEXTS[0], label="context (tokens before decoding; at most the "
                              "target's window less the new tokens)")
    with gr.Row():
        k = gr.Slider(1, load.MAX_K, value=DEFAULT_K, step=1, label="k (drafts per round)")
        new = gr.Number(DEFAULT_TOKENS, precision=0, minimum=1, label="new tokens a request")
        repeats = gr.Number(DEFAULT_REPEATS, precision=0, minimum=1, label="repeats")
    with gr.Row():
        est_btn = gr.Button("Estimate time")
        run_btn = gr.Button("Run load lab", variant="primary", elem_id="load-run")
    status = gr.Markdown("*Press Estimate time, or Run load lab (it refuses at once what would overrun the budget).*",
                         elem_id="load-status")
    words = gr.Markdown(elem_id="load-verdict")
    with gr.Row():
        tps = chart("Tokens/s of decoding (the prefill excluded), all requests; bars: the range over repeats.")
        speed = chart("Speedup, measured (each repeat's own ratio) and the model's; the crossovers marked.",
                      elem_id="load-speedup")
    with gr.Row():
        surface = chart("One target pass of B requests x rows each, over a one-row pass of the same B.")
        table = gr.Dataframe(pd.DataFrame(), label="Per batch size", interactive=False)
    inputs = [target, draft, prompts, batches, context, k, new, repeats]
    est_btn.click(h.estimate_load, inputs, [status], api_visibility="undocumented", **LAB_QUEUE)
    run_btn.click(h.run_load_lab, inputs, [status, words, tps, speed, surface, table], api_visibility="undocumented",
                  **LAB_QUEUE)
