"""The distillation lab's tab: distil a draft towards the target (forward KL) beside an identical draft trained with
cross-entropy for the same number of steps, read what each step did to held-out KL and acceptance, then decode
with the trained drafts. They are this user's alone (gr.State) and pickable by name in the explorer and the
compare tab."""
from __future__ import annotations

import shutil
import time
from typing import NamedTuple

import gradio as gr
import pandas as pd
import torch

from ..config import EXAMPLE_PROMPTS
from ..drafts.distill import as_windows
from ..drafts.drafter import Drafter
from ..labs import claims
from ..labs.distill_lab import CE, KL, POINT_COLUMNS, iter_distill_lab, lab_drafts
from ..models import ASSETS
from ..runtime.threads import policy
from ..views import lab_plots
from ..views.summary import summary_markdown
from ..views.timeline import timeline_html
from . import runs
from .budget import Budget
from .forms import make_config, number_in
from .runs import STREAM_EVERY_S
from .store import ModelStore, TrainedDraft
from .tempfiles import fresh_folder
from .widgets import LAB_QUEUE, SKIP, bind, chart, target_picker

LAB_TEXT = ASSETS.parent / "corpus_sample.txt"  # small, committed: enough for a lab
FRESH = "fresh tiny draft"
SHORT = {KL: "KL", CE: "CE"}  # method -> its tag in a trained draft's name
STEPS, EVERY = 60, 15  # the form's defaults: 60 steps each fit the request's budget on a loaded 2-core host
SEQ_LEN, BATCH = 32, 4  # a training batch: 4 windows of 32 tokens


class Trained(NamedTuple):
    """What a training run sets (a field left unset keeps its component as it is), in ``build``'s wiring order."""
    status: object = SKIP
    loss: object = SKIP
    checkpoints: object = SKIP
    mine: object = SKIP  # gr.State: this user's trained drafts
    zipped: object = SKIP
    pick: object = SKIP


class Tried(NamedTuple):
    """A decode with one of this user's trained drafts: its timeline and summary."""
    timeline: object = SKIP
    summary: object = SKIP


def distill_views(points: list[dict]) -> dict:
    """The training loss and checkpoint charts of the points so far, as ``Trained`` fields."""
    frame = pd.DataFrame(points).reindex(columns=POINT_COLUMNS)
    return dict(loss=lab_plots.training_loss(frame), checkpoints=lab_plots.checkpoints_chart(frame))


def zip_drafts(drafts: dict, tokenizer) -> str:
    """The trained drafts, save_pretrained each, zipped into a fresh temp folder; the zip's path."""
    folder = fresh_folder("draft-")
    for method, draft in drafts.items():
        out = folder / "drafts" / method.split()[0].replace("-", "_")
        draft.save_pretrained(out)
        tokenizer.save_pretrained(out)
    return shutil.make_archive(str(folder / "trained-drafts"), "zip", folder / "drafts")


MAX_USER_DRAFTS = 4  # trained drafts one session keeps (each a model in memory)


def keep_drafts(user_drafts: dict | None, drafts: dict, target: str, steps: int) -> tuple[dict, list[str]]:
    """This user's drafts with the newly trained ones added (e.g. "lab: KL 40 steps #1"), stored without gradients,
    at most MAX_USER_DRAFTS of them: the oldest go first. Returns (drafts, names dropped)."""
    mine = dict(user_drafts or {})
    number = max((int(n.rsplit("#", 1)[1]) for n in mine if n.rsplit("#", 1)[-1].isdigit()), default=0)
    for method, d in drafts.items():  # the explorer and compare tabs list them too
        d.eval().requires_grad_(False)
        for p in d.parameters():
            p.grad = None
        number += 1
        mine[f"lab: {SHORT.get(method, method)} {steps:g} steps #{number}"] = TrainedDraft(d, target)
    dropped = list(mine)[: max(0, len(mine) - MAX_USER_DRAFTS)]
    for name in dropped:
        del mine[name]
    return mine, dropped


def outcome(points: list[dict], steps: int) -> str:
    """What the run shows, read off its checkpoints: per method held-out KL and acceptance α from the first
    checkpoint to the last, the directions ``claims`` reads, and the methods set against each other at the same
    step; and whether the budget stopped them before ``steps``."""
    evals = pd.DataFrame(points).reindex(columns=POINT_COLUMNS)
    evals = evals[evals.heldout_kl.notna()]
    if evals.empty:
        return "No checkpoint was taken."
    last_step = int(evals.step.max())
    parts, final = [], {}
    for method, g in evals.groupby("method", sort=False):
        a, b = g.iloc[0], g.iloc[-1]
        final[method] = b.alpha
        parts.append(f"**{method}**: held-out KL **{a.heldout_kl:.2f} → {b.heldout_kl:.2f}** "
                     f"({claims.moved(a.heldout_kl, b.heldout_kl)}), acceptance α **{a.alpha:.2f} → {b.alpha:.2f}** "
                     f"({claims.moved(a.alpha, b.alpha)})")
    text = f"**What this run shows**, {last_step} optimiser steps per method: " + "; ".join(parts) + "."
    if KL in final and CE in final:
        text += (f" At step {last_step}, distillation's α **{final[KL]:.2f}**, "
                 f"{claims.versus(final[KL], final[CE])} cross-entropy's **{final[CE]:.2f}**.")
    if last_step < steps:
        text += f" The request's time budget stopped both at step {last_step} of {steps}."
    return text + (" DistillSpec trains on KL because α = E[Σ min(p, q)] and KL(p || q) tend to move in opposite "
                   "directions; a few steps of a tiny draft on one small text can show either method ahead.")


@torch.no_grad()
def _floor_s(model, drafts: dict, windows: torch.Tensor, steps: int) -> float:
    """The least the lab can take, from timed passes over a batch of ``windows`` after an untimed short one (a
    model's first call lays out its weights), on the threads the lab's steps take: every KL step runs the target
    and its draft forward over a batch, every cross-entropy step its draft (backward passes not counted)."""
    draft = next(iter(drafts.values()))
    with policy.team():
        model(input_ids=windows[:1, :8]), draft(input_ids=windows[:1, :8])
        target_s, draft_s = _fastest(model, windows), _fastest(draft, windows)
    return steps * (target_s + len(drafts) * draft_s)


def _fastest(model, windows: torch.Tensor, times: int = 2) -> float:
    """The fastest of ``times`` timed passes over ``windows`` (other work only adds time)."""
    best = float("inf")
    for _ in range(times):
        t0 = time.perf_counter()
        model(input_ids=windows)
        best = min(best, time.perf_counter() - t0)
    return best


def run_distill(store: ModelStore, target, start, steps, compare_ce, eval_every, user_drafts):
    """Streams ``Trained``: the status and the two charts as it trains; at the end also this user's drafts, the zip
    and the try-it dropdown."""
    model, tok = store.target(target)
    base = None if start == FRESH else store.pair(target, start)[2]
    if isinstance(base, Drafter):
        raise ValueError(f"{start!r} is not a single draft model (a model-free rule or a hybrid): nothing to train. "
                         f"Pick a model draft or {FRESH!r}")
    steps = int(number_in(steps, "steps per method", 1, 2000))
    eval_every = int(number_in(eval_every, "checkpoint every", 1, 2000))
    budget, text = Budget(), [LAB_TEXT.read_text(encoding="utf-8")]
    drafts = lab_drafts(model, base, bool(compare_ce))
    batch = as_windows(text, tok, SEQ_LEN)[:BATCH]
    budget.refuse_over(_floor_s(model, drafts, batch, steps), "this training", "fewer steps, or no cross-entropy "
                       "comparison")
    points, last = [], 0.0
    stream = iter_distill_lab(model, drafts, text, [], tokenizer=tok, seq_len=SEQ_LEN, batch_size=BATCH,
                              steps=steps, eval_every=eval_every, seconds=budget.seconds - budget.elapsed)
    for point in stream:
        points.append(point)
        if time.time() - last >= 2 * STREAM_EVERY_S:
            last = time.time()
            yield Trained(status=f"Step {point['step']} of {steps} ({', '.join(drafts)} in turn, checkpoints included) · "
                          f"{budget.elapsed:.0f} s of at most {budget.seconds:.0f} s", **distill_views(points))
    mine, dropped = keep_drafts(user_drafts, drafts, target, max(p["step"] for p in points))
    note = f" Your oldest trained drafts were dropped (at most {MAX_USER_DRAFTS} are kept): {', '.join(dropped)}." \
        if dropped else ""
    yield Trained(status=f"**Done.** {outcome(points, steps)} Try the trained drafts below, or download them.{note}",
                  **distill_views(points), mine=mine, zipped=zip_drafts(drafts, tok),
                  pick=gr.update(choices=list(mine), value=list(mine)[-len(drafts)]))


def try_draft(store: ModelStore, prompt, target, name, user_drafts, temperature) -> Tried:
    """``Tried`` (timeline, summary):  speculative decoding with one of this user's trained drafts."""
    if not user_drafts or name not in user_drafts:
        raise ValueError("train a draft first (run the distillation above), then pick it here")
    cfg = make_config(4, "fixed", temperature, 0, 1.0, 64, 0)
    trace = runs.generate(store, prompt, target, name, cfg, user_drafts)  # the user's draft is picked by name
    return Tried(timeline=timeline_html(trace), summary=summary_markdown(trace, None))


def handlers(store: ModelStore):
    return bind(store, models=dict(run_distill=run_distill, try_draft=try_draft))


def build(store: ModelStore, mine: gr.State):
    """The tab; ``mine`` is this user's trained drafts (name -> TrainedDraft). Returns the Train event."""
    h = handlers(store)
    gr.Markdown("Distil a draft towards the target (forward KL) and, beside it, train an identical draft on the same "
                "batches with plain cross-entropy, for the same number of optimiser steps, one step of each in turn. "
                "Does the teacher's signal show in acceptance? At each checkpoint (both at the same step): held-out "
                "KL(p || q), and acceptance α = mean Σ min(p, q) at every position of the held-out text (T = 1, "
                "exact). Where the request's time budget runs out first, both stop at the same step.")
    with gr.Row():
        target = target_picker(store)
        start = gr.Dropdown([FRESH] + store.list_drafters(), value=FRESH, label="Start from")
        steps = gr.Number(STEPS, precision=0, label="optimiser steps per method")
        every = gr.Number(EVERY, precision=0, label="checkpoint every (steps)")
        compare = gr.Checkbox(True, label="also train with cross-entropy")
    run_btn = gr.Button("Train", variant="primary")
    status = gr.Markdown()
    with gr.Row():
        loss, checks = chart("Training loss per step."), chart("Acceptance α (solid) and held-out KL (dotted) at "
                                                                "each checkpoint, against the step.")
    zipped = gr.File(label="Trained drafts (save_pretrained, zipped)", interactive=False)
    gr.Markdown("### Try a trained draft")
    with gr.Row():
        pick = gr.Dropdown([], label="Your trained drafts")
        prompt = gr.Textbox(EXAMPLE_PROMPTS[1], label="Prompt")
        temperature = gr.Slider(0, 2, value=0.8, step=0.05, label="Temperature")
    try_btn = gr.Button("Decode with it")
    timeline, summary = gr.HTML(), gr.Markdown()
    outputs = Trained(status=status, loss=loss, checkpoints=checks, mine=mine, zipped=zipped, pick=pick)
    trained = run_btn.click(h.run_distill, [target, start, steps, compare, every, mine], list(outputs),
                            api_visibility="undocumented", **LAB_QUEUE)
    try_btn.click(h.try_draft, [prompt, target, pick, mine, temperature], list(Tried(timeline=timeline, summary=summary)),
                  api_visibility="undocumented", **LAB_QUEUE)
    return trained
