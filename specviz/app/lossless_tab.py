"""The losslessness lab's tab: one context, thousands of vectorised verify steps; the emitted tokens must
follow p exactly, and the tutorial's two mistakes visibly do not. Notation: p target, q draft."""
from __future__ import annotations

import time
from typing import NamedTuple

import gradio as gr

from ..config import EXAMPLE_PROMPTS, LOSSY, RULES
from ..labs import claims, lossless
from ..views import lab_plots
from ..views.tables import readable
from .budget import Budget
from .forms import encode, make_config, number_in
from .store import ModelStore
from .widgets import LAB_QUEUE, bind, chart, draft_picker, follow_target, sampling_controls, target_picker


class TokenLabels(dict):
    """token id -> its text (repr), decoded on first use."""

    def __init__(self, tokenizer):
        super().__init__()
        self.tokenizer = tokenizer

    def get(self, token, default=None):
        if token not in self:
            self[token] = repr(self.tokenizer.decode([int(token)], clean_up_tokenization_spaces=False))
        return self[token]


def title(variant: str, raw_note: str | None = None) -> str:
    """A chart's title; the 'unprocessed q' variant says so where it cannot differ from the correct step."""
    if variant == lossless.CORRECT:
        return "Correct verify step"
    if variant == lossless.WRONG_RAW and raw_note:
        return "Unprocessed q: the same as the correct step here (see the note)"
    return f"WRONG ({variant[7:]}): biased"


class Drawn(NamedTuple):
    """One update of the draws: the status, the goodness-of-fit table, the emitted-token chart of each variant
    (``lossless.VARIANTS``) and the decomposition chart, in ``build``'s wiring order."""
    status: object
    table: object
    correct: object
    wrong_scalar: object
    wrong_raw: object
    decomposition: object


def run_lossless(store: ModelStore, target, draft, prompt, extra, temperature, top_k, top_p, seed, draws, batch,
                 rule="leviathan"):
    """Streams ``Drawn`` (status, test table, three emitted-token charts, decomposition chart); the correct column under
    ``rule``, a lossless accept rule (a lossy one is refused: it is not correct)."""
    lossless.check_correct_rule(rule)
    extra, draws = int(number_in(extra, "generated tokens", 0, 256)), int(number_in(draws, "draws", 100, 1_000_000))
    cfg = make_config(1, "fixed", temperature, top_k, top_p, max(extra, 1), seed)
    model, tok = store.target(target)
    d = lossless.next_token_dists(model, store.pair(target, draft)[2], encode(tok, prompt), cfg, extra)
    labels, raw_note = TokenLabels(tok), lossless.raw_mistake_note(d, cfg)
    decomp = lab_plots.decomposition_bars(lossless.decomposition(d.p, d.q), labels)
    start, budget, first = time.perf_counter(), Budget(), None
    for frame in lossless.iter_lossless(d, draws, int(number_in(batch, "batch", 100, draws)), seed=cfg.seed, rule=rule):
        table = lossless.fit_table(frame)
        rate = table.draws[0] * len(table) / (time.perf_counter() - start)
        # the first batch measures the rate: the whole request's time follows from it
        budget.refuse_over(budget.elapsed + draws * len(table) / rate - table.draws[0] * len(table) / rate,
                           f"{draws:,} draws per variant", "fewer draws or generated tokens")
        budget.check()
        figs = {v: lab_plots.emitted_bars(frame[frame.variant == v], title(v, raw_note), labels) for v in lossless.VARIANTS}
        first = first if first is not None else table.iloc[0]
        yield Drawn(status=f"**{table.draws[0]} draws per variant** ({rate:,.0f} verify steps/s). "
                    + tv_trend(first, table.iloc[0]) + (f" {raw_note}" if raw_note else ""), table=readable(table, 4),
                    correct=figs[lossless.CORRECT], wrong_scalar=figs[lossless.WRONG_SCALAR],
                    wrong_raw=figs[lossless.WRONG_RAW], decomposition=decomp)


def tv_trend(first, now) -> str:
    """What lossless looks like, and what this run's correct column did: its TV from p at the first update and now,
    with the direction read off those two numbers (sampling noise alone shrinks like 1 / sqrt(draws))."""
    text = ("Lossless means the emitted tokens follow p: a chi-square p-value that is not small, and a TV distance "
            "from p that is sampling noise alone, about 1 / sqrt(draws).")
    if now.draws <= first.draws:
        return text
    return text + (f" Here the correct column's TV from p went from {first.tv_to_p:.4f} at {int(first.draws):,} draws to "
                   f"{now.tv_to_p:.4f} at {int(now.draws):,} ({claims.moved(first.tv_to_p, now.tv_to_p)}).")


def handlers(store: ModelStore):
    return bind(store, models=dict(run_lossless=run_lossless))


def build(store: ModelStore) -> None:
    h = handlers(store)
    gr.Markdown("One context, thousands of verify steps at once: the emitted token must follow **p** exactly. "
                "The two WRONG variants are the classic bugs: a residual built from the scalar q(x), and q taken "
                "from unprocessed logits while the draft samples from processed ones.")
    with gr.Row():
        target, draft = target_picker(store), draft_picker(store, model=True)
    follow_target(store, target, draft)
    prompt = gr.Textbox(EXAMPLE_PROMPTS[0], lines=2, label="Context")
    with gr.Row():
        extra = gr.Number(0, precision=0, label="then generate this many tokens with the target")
        seed = gr.Number(0, precision=0, label="seed")
        draws = gr.Number(5000, precision=0, label="draws")
        batch = gr.Number(500, precision=0, label="draws per update")
    sampling = sampling_controls(0.7)
    rule = gr.Dropdown([r for r in RULES if r not in LOSSY], value="leviathan", label="Rule of the correct column",
                       info="lossless rules only (lossy ones: the acceptance rule lab)")
    run_btn = gr.Button("Draw", variant="primary")
    status = gr.Markdown()
    table = gr.Dataframe(label="Goodness of fit against p", interactive=False)
    with gr.Row():
        right, decomp = chart("Correct: the bars follow p."), chart("min(p, q) + (1 − β)·residual = p, token by token.")
    with gr.Row():
        wrong_a, wrong_b = chart("WRONG residual max(0, p − q(x))."), chart("WRONG q from the raw logits.")
    run_btn.click(h.run_lossless, [target, draft, prompt, extra, *sampling, seed, draws, batch, rule],
                  list(Drawn(status=status, table=table, correct=right, wrong_scalar=wrong_a, wrong_raw=wrong_b,
                             decomposition=decomp)), api_visibility="undocumented", **LAB_QUEUE)
