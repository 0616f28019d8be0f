"""The Compare drafts tab: one target, several drafts, the same prompt, settings and seed, with the baseline in the
same call; then where the drafts diverge and what each draft's q looked like against p at a position. Per-user
results (the last comparison's settings and baseline run) live in gr.State."""
from __future__ import annotations

import time
from typing import NamedTuple

import gradio as gr
import pandas as pd

from .. import models
from ..config import EXAMPLE_PROMPTS
from ..drafts.trained.coverage import vocabulary
from ..drafts.trained.formats import describe
from ..labs.compare import BASELINE, compare_table, context_at, disagreement, divergence_frame, draft_facts, iter_compare
from ..views import compare_plots
from ..views.runs import compare_timelines_html
from ..views.tables import readable
from .budget import Budget, token_seconds
from .forms import as_int, encode, make_config
from .store import ModelStore, user_pair
from .widgets import LAB_QUEUE, SKIP, bind, chart, follow_target, run_settings, target_picker


class Disagreement(NamedTuple):
    """Each draft's q beside the target's p at one position: the note, the table and the chart."""
    note: object = SKIP
    table: object = SKIP
    chart: object = SKIP


class Compared(NamedTuple):
    """What a comparison sets (a field left unset keeps its component as it is): ``build`` wires its components in
    these fields' order."""
    state: object = SKIP  # gr.State: the last comparison's settings and baseline run
    status: object = SKIP
    timelines: object = SKIP
    table: object = SKIP
    acceptance: object = SKIP
    speedup: object = SKIP
    tau: object = SKIP
    divergence: object = SKIP
    position: object = SKIP
    note: object = SKIP
    disagreement: object = SKIP
    disagreement_chart: object = SKIP


def table_views(table: pd.DataFrame) -> dict:
    """The comparison table (rounded) and its three charts (None while no draft has finished), as ``Compared`` fields."""
    if table.empty:
        return dict(table=table, acceptance=None, speedup=None, tau=None)
    return dict(table=readable(table), acceptance=compare_plots.acceptance_by_position(table),
                speedup=compare_plots.speedup_bars(table), tau=compare_plots.tau_bars(table))


def run_compare(store: ModelStore, target, drafts, prompt, k, temperature, top_k, top_p, max_new, seed,
                user_drafts=None, draft_stop=0.0):
    """Streams ``Compared``: while the drafts run, the status, timelines, table and charts; at the end the state, the
    status, the first rejections, the position slider and the disagreement at the earliest one.
    ``user_drafts``: this user's trained drafts ({name: TrainedDraft}), picked by name before the store's."""
    if not drafts:
        raise ValueError("pick at least one draft to compare")
    cfg = make_config(k, "fixed", temperature, top_k, top_p, max_new, seed, draft_stop)
    model, tok = store.target(target)
    ids, chosen = encode(tok, prompt), {d: user_pair(store, target, d, user_drafts)[2] for d in drafts}
    budget = Budget()
    token_s = token_seconds(model, ids, cfg)
    budget.refuse_over((1 + len(chosen)) * cfg.max_new_tokens * token_s, "this comparison",
                       "fewer drafts or new tokens")
    sizes, runs, start = {d: draft_facts(x) for d, x in chosen.items()}, [], time.perf_counter()
    vocabs = vocabularies(chosen)
    for run in iter_compare(model, chosen, ids, cfg, target_name=target):
        budget.check()
        runs.append(run)
        run.trace.fill_texts(tok)
        done = f"**{len(runs) - 1} / {len(chosen)} drafts** done ({time.perf_counter() - start:.1f} s)…"
        yield Compared(status=done, timelines=compare_timelines_html(runs, BASELINE, vocabs),
                       **table_views(compare_table(runs, sizes)))
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
    note, table, chart = disagree(store, state, position)
    yield Compared(state=state, status=status, divergence=readable(divergence), position=slider, note=note,
                   disagreement=table, disagreement_chart=chart)


def disagree(store: ModelStore, state, position) -> Disagreement:
    """``Disagreement`` (markdown, table, chart): each draft's q beside the target's p at generated token ``position``."""
    if not state:
        raise ValueError("run a comparison first: the position indexes into its baseline run")
    budget = Budget()  # one pass of the target and of each draft: checked once the drafts are loaded
    model, tok = store.target(state["target"])
    mine = state.get("user_drafts")
    drafts = {d: user_pair(store, state["target"], d, mine)[2] for d in state["drafts"]}
    base = state["baseline"]
    position = as_int(position, "position")
    budget.check()
    frame = disagreement(model, drafts, base, position, state["cfg"],
                         text=lambda t: tok.decode([int(t)], clean_up_tokenization_spaces=False))
    context = "".join(base.text(t) for t in context_at(base, position)[-24:])
    put = base.text(base.new_tokens[position])
    note = (f"Position **{position}** after …`{context!r}`: the target's run put **{put!r}** here. "
            "p is the target's distribution, each q a draft's (a model-free draft: a point mass on its "
            "proposal, all zeros if it proposes nothing).")
    return Disagreement(note=note, table=frame.round(4), chart=compare_plots.disagreement_bars(frame))


def trained_folder(name):
    """The folder of a draft trained elsewhere that ``name`` names (None for any other draft)."""
    try:
        return models.trained_folder(name) if isinstance(name, str) and name.strip() else None
    except ValueError:
        return None


def vocabularies(drafts) -> dict:
    """The target ids each trained draft's pruned vocabulary holds, by name (read from its d2t)."""
    return {d: vocabulary(folder) for d in drafts if (folder := trained_folder(d)) is not None}


def format_lines(drafts) -> str:
    """One line per checked draft trained elsewhere: its layout as read from its files (config.json, the safetensors
    headers); "" where none is checked."""
    lines = []
    for name in drafts or []:
        folder = trained_folder(name)
        if folder is not None and (line := describe(folder)):
            lines.append(f"- **{name}** (trained draft, read from its files): {line}")
    return "\n".join(lines)


def formats_shown(drafts) -> dict:
    """The format lines' update for the drafts checked: shown where one is a trained draft, hidden otherwise."""
    lines = format_lines(drafts)
    return gr.update(value=lines, visible=bool(lines))


def handlers(store: ModelStore):
    return bind(store, models=dict(run_compare=run_compare, disagree=disagree))


def build(store: ModelStore, user_drafts: gr.State) -> gr.CheckboxGroup:
    """The tab; returns its draft checkboxes (their choices grow with the user's trained drafts)."""
    h, state = handlers(store), gr.State(None)
    gr.Markdown("One target, several drafts, the same prompt, settings and seed; the autoregressive baseline runs "
                "in the same call, so every speedup has the same denominator. Timelines appear as each draft finishes.")
    with gr.Row():
        target = target_picker(store)
        drafts = gr.CheckboxGroup(store.list_drafters(), value=store.list_drafters(), label="Drafts")
    follow_target(store, target, drafts, user_drafts)
    lines = format_lines(drafts.value)  # hidden while no trained draft is checked
    formats = gr.Markdown(lines, visible=bool(lines), elem_id="compare-formats")
    drafts.change(formats_shown, [drafts], [formats], queue=False, api_visibility="private")
    prompt = gr.Textbox(EXAMPLE_PROMPTS[1], lines=2, label="Prompt")
    form = run_settings(48)
    draft_stop = gr.Number(0, minimum=0, maximum=0.99, label="stop drafting below draft confidence q(x) (0 = off; "
                           "transformers' default is 0.4)")
    run_btn = gr.Button("Compare", variant="primary")
    status = gr.Markdown()
    timelines = gr.HTML(elem_id="compare-timelines")
    table = gr.Dataframe(pd.DataFrame(columns=["draft", "size", "acceptance rate", "τ (tokens / round)",
                                                "target passes / token", "tokens/s", "speedup"]),
                         label="Per draft (size: parameters; n-gram: stored n-grams; 0: model-free)",
                         interactive=False)
    with gr.Row():
        acc = chart("Acceptance per draft position: each later position needs the earlier ones accepted.")
        speed = chart("Speedup: tokens/s over the baseline run in the same call.")
        tau = chart("τ: tokens per round, i.e. tokens per target forward.")
    gr.Markdown("### Where they diverge and disagree")
    divergence = gr.Dataframe(label="First rejection per draft (position in the generated tokens)", interactive=False)
    position = gr.Slider(0, 1, value=0, step=1, label="Position in the baseline's generated text", interactive=False)
    note = gr.Markdown()
    with gr.Row():
        dis_table = gr.Dataframe(label="Top tokens: p (target) and q per draft", interactive=False)
        dis_chart = chart("Where a draft's q misses the target's top token, its draft gets rejected.")
    compared = Compared(state=state, status=status, timelines=timelines, table=table, acceptance=acc, speedup=speed,
                        tau=tau, divergence=divergence, position=position, note=note, disagreement=dis_table,
                        disagreement_chart=dis_chart)
    run_btn.click(h.run_compare, [target, drafts, prompt, *form, user_drafts, draft_stop], list(compared),
                  api_visibility="undocumented", **LAB_QUEUE)
    position.release(h.disagree, [state, position], list(Disagreement(note=note, table=dis_table, chart=dis_chart)),
                     api_visibility="undocumented", **LAB_QUEUE)
    return drafts
