"""The acceptance-rule lab's tab: the same prompts and seed under every rule engines use, what each costs in
acceptance and in truth, and which rule each engine runs by default. Handlers take the store (``handlers(store)``
binds them). Notation: p target, q draft, TV the total variation of the emitted token's law from p."""
from __future__ import annotations

import time
from typing import NamedTuple

import gradio as gr

from ..config import EXAMPLE_PROMPTS
from ..labs import claims
from ..labs.rule_presets import presets_frame
from ..labs.rules import COLUMNS, VARIANTS, rules_lab, variant_config
from ..views import rule_plots, tables
from ..views.tables import empty, readable
from .budget import Budget, token_seconds
from .forms import as_float, encode, make_config, split_prompts
from .store import ModelStore
from .widgets import LAB_QUEUE, SKIP, bind, chart, lab_inputs

WHY = ("**Why:** Leviathan's rule accepts with min(1, p/q), so its acceptance is Σ min(p, q), the overlap of the "
       "two models, which flattening both can add to or take from. An engine that drafts the argmax, or ignores q (a "
       "point mass), accepts with p(x) for that one token, which flattening p takes probability from. Both keep the "
       "target's law (TV 0). A lossy rule (typical, optimistic, lenient) changes the law, and how its acceptance "
       "compares with Leviathan's depends on its parameters, the temperature and the text: its TV column is "
       "what it costs in truth. Each rate here counts a few dozen positions.")
LEVIATHAN = "leviathan"


def caption(lab) -> str:
    """What the run shows, read off its table (``rules_lab``'s frame): each rule's acceptance (accepted / verified,
    the chart's) from its lowest sampled temperature to its highest, and each lossy rule against Leviathan's at the
    highest; the directions ``claims`` reads. Then why."""
    sampled = lab[lab.temperature > 0].sort_values("temperature", kind="stable")
    temps = sorted(sampled.temperature.unique())
    if not temps:
        return f"**What this run shows**: greedy only, where every lossless rule is the same match. {WHY}"
    lo, hi, parts = temps[0], temps[-1], []
    for rule, g in sampled.groupby("rule", sort=False):
        a, b = g.alpha.iloc[0], g.alpha.iloc[-1]
        parts.append(f"{tables.rule_name(rule)} **{a:.2f}**" if lo == hi else
                     f"{tables.rule_name(rule)} **{a:.2f} → {b:.2f}** ({claims.moved(a, b)})")
    span = f"at T = {hi:g}" if lo == hi else f"from T = {lo:g} to T = {hi:g}"
    text = f"**What this run shows**: acceptance (accepted / verified) {span}: " + "; ".join(parts) + "."
    top = sampled[sampled.temperature == hi].set_index("rule")
    if LEVIATHAN in top.index:
        ref = top.loc[LEVIATHAN, "alpha"]
        lossy = [f"{tables.rule_name(r)} **{row.alpha:.2f}**, {claims.versus(row.alpha, ref)} Leviathan's "
                 f"**{ref:.2f}** (TV {row.tv_closed:.2f})" for r, row in top.iterrows() if not row.lossless]
        if lossy:
            text += f" The lossy rules at T = {hi:g}: " + "; ".join(lossy) + "."
    return f"{text} {WHY}"


TAB_TEMPERATURES = (0.0, 0.7, 1.0)  # the tab's default: greedy, where engines' rules start to cost, and T = 1


def parse_temperatures(text) -> list[float]:
    """Comma-separated temperatures, each 0 (greedy) or in [0.01, 2], 1 to 8 of them."""
    try:
        values = [float(v) for v in str(text or "").replace(" ", "").split(",") if v]
    except ValueError:
        raise ValueError(f"temperatures must be numbers separated by commas, got {text!r}") from None
    if not values or len(values) > 8 or any(not (v == 0 or 0.01 <= v <= 2) for v in values):
        raise ValueError("give 1 to 8 temperatures, each 0 (greedy) or between 0.01 and 2")
    return values


def rule_options(epsilon, delta, lenience) -> dict:
    """The lossy rules' parameters, checked by DecodeConfig (epsilon in (0, 1), delta > 0, lenience in (0, 1])."""
    return dict(typical_epsilon=as_float(epsilon, "typical epsilon"), typical_delta=as_float(delta, "typical delta"),
                lenience=as_float(lenience, "lenience"))


class RuleLab(NamedTuple):
    """What a run of the lab sets (a field left unset keeps its component as it is), in ``build``'s wiring order."""
    status: object = SKIP
    table: object = SKIP
    acceptance: object = SKIP
    tv: object = SKIP
    speedup: object = SKIP


def run_lab(store: ModelStore, target, draft, prompts_text, temperatures_text, variants, k, max_new, seed,
            epsilon=0.09, delta=0.3, lenience=0.5, draws=4000):
    """Streams ``RuleLab``: the status while it runs, then the table and the three charts."""
    temperatures, variants = parse_temperatures(temperatures_text), list(variants or [])
    if not variants:
        raise ValueError("pick at least one acceptance rule")
    cfg = make_config(k, "fixed", 1.0, 0, 1.0, max_new, seed, rule_options=rule_options(epsilon, delta, lenience))
    for v in variants:
        variant_config(cfg, v)  # a bad name fails here, before any model work
    model, tok, drafter = store.pair(target, draft)
    prompts = [encode(tok, p) for p in split_prompts(prompts_text)][:3]
    budget, runs = Budget(), len(temperatures) * (len(variants) + 1) * len(prompts)
    token_s = token_seconds(model, prompts[0], cfg)
    budget.refuse_over(runs * cfg.max_new_tokens * token_s, f"this rule lab ({runs} runs)",
                       "fewer temperatures, rules, prompts or new tokens")
    yield RuleLab(status=f"*Running {runs} runs…*")
    start = time.time()
    lab = rules_lab(model, drafter, prompts, temperatures, cfg, variants, int(as_float(draws, "draws")), tok,
                    check=budget.check)
    yield RuleLab(status=f"**Done: {runs} runs in {time.time() - start:.1f} s.** {caption(lab)}", table=readable(lab),
                  acceptance=rule_plots.acceptance_vs_temperature(lab), tv=rule_plots.tv_vs_temperature(lab),
                  speedup=rule_plots.speedup_by_rule(lab))


def handlers(store: ModelStore):
    return bind(store, models=dict(run_rules_lab=run_lab))


def build(store: ModelStore) -> None:
    h = handlers(store)
    gr.Markdown("The same prompts (at most 3), k and seed decoded under each acceptance rule, beside its closed form; "
                "lossy rules also show their total variation from the target's p. The last table says which rule "
                "each engine uses by default, read from its source.")
    target, draft, prompts = lab_inputs(store, EXAMPLE_PROMPTS[:2], model=True)
    if "lite" in store.list_drafters():
        draft.value = "lite"  # a draft model: q is its own distribution, so the rules differ
    with gr.Row():
        temperatures = gr.Textbox(", ".join(f"{t:g}" for t in TAB_TEMPERATURES), label="Temperatures")
        k = gr.Number(4, precision=0, label="k")
        max_new = gr.Number(24, precision=0, label="new tokens per run")
        seed = gr.Number(0, precision=0, label="seed")
    variants = gr.CheckboxGroup([(tables.rule_name(v), v) for v in VARIANTS], value=list(VARIANTS), label="Rules")
    with gr.Row():
        epsilon = gr.Number(0.09, label="typical ε (Medusa: 0.09)")
        delta = gr.Number(0.3, label="typical δ (Medusa: 0.3)")
        lenience = gr.Number(0.5, label="lenience l (1 = Leviathan)")
        draws = gr.Number(4000, precision=0, label="draws at one context (Monte Carlo)")
    run_btn = gr.Button("Run acceptance rule lab", variant="primary")
    status = gr.Markdown("*Press Run acceptance rule lab.*")
    table = gr.Dataframe(empty(COLUMNS), label="Per rule and temperature", interactive=False)
    with gr.Row():
        acceptance = chart("Measured acceptance per rule (solid) beside its closed form over the same contexts (dashed).")
        tv = chart("Lossy rules: what they change, TV of the emitted token's law from p (×: one context, sampled).")
    speed = chart("Expected speedup τ / (k c + v) per rule, with this machine's measured c and v.")
    gr.Dataframe(presets_frame(), label="Engines' default rules (from their source)", interactive=False, wrap=True)
    run_btn.click(h.run_rules_lab, [target, draft, prompts, temperatures, variants, k, max_new, seed, epsilon, delta,
                                    lenience, draws],
                  list(RuleLab(status=status, table=table, acceptance=acceptance, tv=tv, speedup=speed)),
                  api_visibility="undocumented", **LAB_QUEUE)
