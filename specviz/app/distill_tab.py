"""The distillation lab's tab: distil a draft towards the target (forward KL) for a short budget beside the same
budget of cross-entropy, watch acceptance climb, then decode with the trained drafts. They are this user's
alone (gr.State) and pickable by name in the explorer and the compare tab."""
from __future__ import annotations

import shutil
import time

import gradio as gr
import pandas as pd

from ..config import EXAMPLE_PROMPTS
from ..drafts.drafter import Drafter
from ..labs.distill_lab import CE, KL, POINT_COLUMNS, iter_distill_lab, lab_drafts
from ..models import ASSETS
from ..views import lab_plots
from ..views.summary import summary_markdown
from ..views.timeline import timeline_html
from . import runs
from .budget import Budget
from .forms import encode, make_config, number_in
from .runs import STREAM_EVERY_S
from .store import ModelStore, TrainedDraft
from .tempfiles import fresh_folder
from .widgets import LAB_QUEUE, SKIP, bind, chart, target_picker

LAB_TEXT = ASSETS.parent / "corpus_sample.txt"  # small, committed: enough for a lab
FRESH = "fresh tiny draft"
SHORT = {KL: "KL", CE: "CE"}  # method -> its tag in a trained draft's name


def distill_views(points: list[dict]) -> tuple:
    frame = pd.DataFrame(points).reindex(columns=POINT_COLUMNS)
    return lab_plots.training_loss(frame), lab_plots.checkpoints_chart(frame)


def zip_drafts(drafts: dict, tokenizer) -> str:
    """The trained drafts, save_pretrained each, zipped into a fresh temp folder; the zip's path."""
    folder = fresh_folder("draft-")
    for method, draft in drafts.items():
        out = folder / "drafts" / method.split()[0].replace("-", "_")
        draft.save_pretrained(out)
        tokenizer.save_pretrained(out)
    return shutil.make_archive(str(folder / "trained-drafts"), "zip", folder / "drafts")


MAX_USER_DRAFTS = 4  # trained drafts one session keeps (each a model in memory)


def keep_drafts(user_drafts: dict | None, drafts: dict, target: str, seconds: float) -> tuple[dict, list[str]]:
    """This user's drafts with the newly trained ones added (e.g. "lab: KL 30s #1"), stored without gradients,
    at most MAX_USER_DRAFTS of them: the oldest go first. Returns (drafts, names dropped)."""
    mine = dict(user_drafts or {})
    number = max((int(n.rsplit("#", 1)[1]) for n in mine if n.rsplit("#", 1)[-1].isdigit()), default=0)
    for method, d in drafts.items():  # the explorer and compare tabs list them too
        d.eval().requires_grad_(False)
        for p in d.parameters():
            p.grad = None
        number += 1
        mine[f"lab: {SHORT.get(method, method)} {seconds:g}s #{number}"] = TrainedDraft(d, target)
    dropped = list(mine)[: max(0, len(mine) - MAX_USER_DRAFTS)]
    for name in dropped:
        del mine[name]
    return mine, dropped


def run_distill(store: ModelStore, target, start, seconds, compare_ce, eval_every, user_drafts):
    """Streams (status, loss chart, checkpoint chart, user drafts state, zip, try-it dropdown)."""
    model, tok = store.target(target)
    base = None if start == FRESH else store.pair(target, start)[2]
    if isinstance(base, Drafter):
        raise ValueError(f"{start!r} is not a single draft model (a model-free rule or a hybrid): nothing to train. "
                         f"Pick a model draft or {FRESH!r}")
    seconds, eval_every = number_in(seconds, "budget", 2, 900), number_in(eval_every, "checkpoint every", 1, 900)
    Budget().refuse_over(seconds * (2 if compare_ce else 1), "this training", "a smaller time budget, or no "
                         "cross-entropy comparison")
    drafts = lab_drafts(model, base, bool(compare_ce))
    prompts = [encode(tok, p) for p in EXAMPLE_PROMPTS]
    points, last, began, total = [], 0.0, time.time(), seconds * len(drafts)
    stream = iter_distill_lab(model, drafts, [LAB_TEXT.read_text(encoding="utf-8")], prompts, tokenizer=tok,
                              seconds=seconds, eval_every_s=eval_every)
    for point in stream:
        points.append(point)
        if time.time() - last >= 2 * STREAM_EVERY_S:
            last = time.time()
            done = time.time() - began
            yield (f"**{point['method']}**: step {point['step']} · {done:.0f} / {total:.0f} s "
                   f"(about {max(0.0, total - done):.0f} s left; checkpoints included)",
                   *distill_views(points), SKIP, SKIP, SKIP)
    mine, dropped = keep_drafts(user_drafts, drafts, target, seconds)
    note = f" Your oldest trained drafts were dropped (at most {MAX_USER_DRAFTS} are kept): {', '.join(dropped)}." \
        if dropped else ""
    yield (f"**Done.** Try the trained drafts below, or download them.{note}", *distill_views(points), mine,
           zip_drafts(drafts, tok), gr.update(choices=list(mine), value=list(mine)[-len(drafts)]))


def try_draft(store: ModelStore, prompt, target, name, user_drafts, temperature):
    """(timeline, summary) of speculative decoding with one of this user's trained drafts."""
    if not user_drafts or name not in user_drafts:
        raise ValueError("train a draft first (run the distillation above), then pick it here")
    cfg = make_config(4, "fixed", temperature, 0, 1.0, 64, 0)
    trace = runs.generate(store, prompt, target, name, cfg, user_drafts)  # the user's draft is picked by name
    return timeline_html(trace), summary_markdown(trace, None)


def handlers(store: ModelStore):
    return bind(store, models=dict(run_distill=run_distill, try_draft=try_draft))


def build(store: ModelStore, mine: gr.State):
    """The tab; ``mine`` is this user's trained drafts (name -> TrainedDraft). Returns the Train event."""
    h = handlers(store)
    gr.Markdown("Distil a draft towards the target (forward KL) for a short budget and watch its acceptance rate "
                "climb as the held-out KL falls; beside it, an identical draft trained on the same batches with "
                "plain cross-entropy. Acceptance α (mean β) is measured on the example prompts (k = 4, T = 1, 16 tokens); "
                "the budget is wall time per method, checkpoints included (one before training and one after, at least).")
    with gr.Row():
        target = target_picker(store)
        start = gr.Dropdown([FRESH] + store.list_drafters(), value=FRESH, label="Start from")
        seconds = gr.Number(20, label="time budget per method (s, checkpoints included)")
        every = gr.Number(10, label="checkpoint every (s of training)")
        compare = gr.Checkbox(True, label="also train with cross-entropy")
    run_btn = gr.Button("Train", variant="primary")
    status = gr.Markdown()
    with gr.Row():
        loss, checks = chart("Training loss per step."), chart("Acceptance (solid) and held-out KL (dotted).")
    zipped = gr.File(label="Trained drafts (save_pretrained, zipped)", interactive=False)
    gr.Markdown("### Try a trained draft")
    with gr.Row():
        pick = gr.Dropdown([], label="Your trained drafts")
        prompt = gr.Textbox(EXAMPLE_PROMPTS[1], label="Prompt")
        temperature = gr.Slider(0, 2, value=0.8, step=0.05, label="Temperature")
    try_btn = gr.Button("Decode with it")
    timeline, summary = gr.HTML(), gr.Markdown()
    trained = run_btn.click(h.run_distill, [target, start, seconds, compare, every, mine],
                            [status, loss, checks, mine, zipped, pick], api_visibility="undocumented", **LAB_QUEUE)
    try_btn.click(h.try_draft, [prompt, target, pick, mine, temperature], [timeline, summary],
                  api_visibility="undocumented", **LAB_QUEUE)
    return trained
