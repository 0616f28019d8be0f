"""The temperature lab's tab: acceptance against temperature for one pair, measured by the decoder beside alpha
computed exactly from the two models' distributions. Handlers take the store (``handlers(store)`` binds them)."""
from __future__ import annotations

import time
from typing import NamedTuple

import gradio as gr

from ..config import EXAMPLE_PROMPTS
from ..labs import claims
from ..labs.temperature import COLUMNS, temperature_lab
from ..views import lab_plots
from ..views.tables import empty, readable
from .budget import Budget, token_seconds
from .forms import encode, make_config, split_prompts
from .store import ModelStore
from .widgets import LAB_QUEUE, SKIP, bind, chart, lab_inputs

WHY = ("**Why:** p and q are both divided by T before the softmax. At T = 0 a draft is accepted exactly where the "
       "two argmaxes agree (α is that agreement rate). Raising T flattens both: where their top tokens differ they "
       "gain common ground, where they agree they can lose some, and only as T goes to infinity do both tend to "
       "the uniform law and α to 1. Which way a pair goes between 0 and 2 is what its runs measure; the measured "
       "acceptance carries the noise of a few short runs (± two standard errors of its count), α at the fixed "
       "contexts none.")


def caption(lab) -> str:
    """What the run shows, read off its table (``temperature_lab``'s frame, rows in the order run): each column's
    first and last temperature, with the direction ``claims`` reads (the acceptance within its counted noise),
    its highest and lowest, then why."""
    lab = lab.sort_values("temperature", kind="stable")
    first, last = lab.iloc[0], lab.iloc[-1]
    if len(lab) < 2:
        return f"**What this run shows**: acceptance {first.acceptance:.2f} at T = {first.temperature:g} (give two " \
               f"temperatures or more to see how it moves). {WHY}"
    span = f"T = {first.temperature:g} → T = {last.temperature:g}"
    noise = claims.rate_noise(first.acceptance, first.drafted, last.acceptance, last.drafted)
    parts = [f"measured acceptance **{first.acceptance:.2f} → {last.acceptance:.2f}** "
             f"({claims.moved(first.acceptance, last.acceptance, noise=noise)}, noise ±{min(noise, 1.0):.2f} over "
             f"{first.drafted:.0f} and {last.drafted:.0f} drafts)"]
    for column, name in (("alpha_visited", "α at the contexts the runs met"), ("alpha_fixed", "α at the fixed contexts")):
        if lab[column].notna().all():
            top, low = lab.loc[lab[column].idxmax()], lab.loc[lab[column].idxmin()]
            parts.append(f"{name} **{first[column]:.2f} → {last[column]:.2f}** "
                         f"({claims.moved(first[column], last[column])}; its highest {top[column]:.2f} at "
                         f"T = {top.temperature:g}, its lowest {low[column]:.2f} at T = {low.temperature:g})")
    return f"**What this run shows**, {span}: " + "; ".join(parts) + ". " + WHY


def parse_temperatures(text) -> list[float]:
    try:
        values = [float(v) for v in str(text or "").replace(" ", "").split(",") if v]
    except ValueError:
        raise ValueError(f"temperatures must be numbers separated by commas, got {text!r}") from None
    if not values or len(values) > 12 or any(not (v == 0 or 0.01 <= v <= 2) for v in values):
        raise ValueError("give 1 to 12 temperatures, each 0 (greedy) or between 0.01 and 2")
    return values


class TemperatureLab(NamedTuple):
    """What a run of the lab sets (a field left unset keeps its component as it is), in ``build``'s wiring order."""
    status: object = SKIP
    table: object = SKIP
    curves: object = SKIP


def run_lab(store: ModelStore, target, draft, prompts_text, temperatures_text, k, max_new, seed):
    """Streams ``TemperatureLab``: the status while it runs, then the table and the chart."""
    temperatures = parse_temperatures(temperatures_text)
    cfg = make_config(k, "fixed", 1.0, 0, 1.0, max_new, seed)
    model, tok, drafter = store.pair(target, draft)
    prompts = [encode(tok, p) for p in split_prompts(prompts_text)][:5]
    budget, runs = Budget(), len(temperatures) * len(prompts)
    token_s = token_seconds(model, prompts[0], cfg)
    budget.refuse_over(runs * cfg.max_new_tokens * token_s, f"this temperature lab ({runs} runs)",
                       "fewer temperatures, prompts or new tokens")
    yield TemperatureLab(status=f"*Running {runs} runs…*")
    start = time.time()
    lab = temperature_lab(model, drafter, prompts, temperatures, cfg, check=budget.check)
    yield TemperatureLab(status=f"**Done: {runs} runs in {time.time() - start:.1f} s.** {caption(lab)}",
                         table=readable(lab), curves=lab_plots.temperature_curves(lab))


def handlers(store: ModelStore):
    return bind(store, models=dict(run_temperature_lab=run_lab))


def build(store: ModelStore) -> None:
    h = handlers(store)
    gr.Markdown("Acceptance against temperature for one pair on the same prompts (at most 5), k and seed. "
                "α at fixed contexts needs a draft model with logits (not an n-gram, a hybrid or prompt lookup).")
    target, draft, prompts = lab_inputs(store, EXAMPLE_PROMPTS[:3], model=True)
    if "lite" in store.list_drafters():
        draft.value = "lite"  # a draft model: both α columns
    with gr.Row():
        temperatures = gr.Textbox("0, 0.3, 0.6, 0.8, 1.0, 1.5", label="Temperatures")
        k = gr.Number(4, precision=0, label="k")
        max_new = gr.Number(32, precision=0, label="new tokens per run")
        seed = gr.Number(0, precision=0, label="seed")
    run_btn = gr.Button("Run temperature lab", variant="primary")
    status = gr.Markdown("*Press Run temperature lab.*")
    table = gr.Dataframe(empty(COLUMNS), label="Per temperature", interactive=False)
    curves = chart("Measured acceptance beside the exact α: at the contexts the runs met, and at one fixed set.")
    run_btn.click(h.run_temperature_lab, [target, draft, prompts, temperatures, k, max_new, seed],
                  list(TemperatureLab(status=status, table=table, curves=curves)), api_visibility="undocumented",
                  **LAB_QUEUE)
