"""The tree lab's tab: chains and token trees of one draft on the same prompts, beside the autoregressive
baseline: tokens per target pass (measured, and the positional model's prediction) and the measured speedup.
Handlers are module-level functions taking the store (``handlers(store)`` binds them); ``build`` lays it out."""
from __future__ import annotations

import time
from dataclasses import replace
from typing import NamedTuple

import gradio as gr
import pandas as pd

from ..config import EXAMPLE_PROMPTS, TreeConfig
from ..labs import estimate as est
from ..labs import least, pilot_cache
from ..labs.trees import settings, tree_lab
from ..views import lab_plots
from .budget import Budget
from .forms import as_int, encode, make_config, number_in, split_prompts
from .store import ModelStore
from .widgets import LAB_QUEUE, SKIP, bind, chart, lab_inputs, sampling_controls

MAX_PROMPTS, MAX_SETTINGS, MAX_TOKENS, MAX_REPEATS = 10, 10, 256, 3  # one request's work stays bounded
TREES = "chain:11,3,0.08\n3,2,2,1\ndynamic:12,10,2,0.3"
CHAINS, DEFAULT_PROMPTS, DEFAULT_TOKENS = "6,11", 2, 32  # the defaults fit a 120 s budget on a busy 2-core machine
MIN_TOKENS = 12  # the default length shortens itself to fit the budget down to this, and is refused below it


def lab_setup(chains_text, trees_text) -> tuple[list[int], list[TreeConfig]]:
    """The chain ks and the trees from the form (comma-separated ks; one tree spec per line), validated."""
    try:
        chains = [int(k) for k in str(chains_text or "").replace(" ", "").split(",") if k]
    except ValueError:
        raise ValueError(f"chain ks must be whole numbers separated by commas, got {chains_text!r}") from None
    if any(not 1 <= k <= 16 for k in chains):
        raise ValueError("every chain k must lie in 1..16")
    trees = [TreeConfig.parse(line) for line in str(trees_text or "").splitlines() if line.strip()]
    if not chains and not trees:
        raise ValueError("give at least one chain k or one tree")
    if len(chains) + len(trees) > MAX_SETTINGS:
        raise ValueError(f"at most {MAX_SETTINGS} settings at once, got {len(chains) + len(trees)}")
    return chains, trees


class TreeLab(NamedTuple):
    """What a run of the lab sets (a field left unset keeps its component as it is), in ``build``'s wiring order."""
    status: object = SKIP
    table: object = SKIP
    per_pass: object = SKIP
    speedup: object = SKIP


def run_lab(store: ModelStore, target, draft, prompts_text, chains_text, trees_text, temperature, top_k, top_p,
            max_new, repeats, seed):
    """Streams ``TreeLab``: the status with its estimate while it runs, then the table and the two charts."""
    chains, trees = lab_setup(chains_text, trees_text)
    max_new = as_int(number_in(max_new, "new tokens per run", 1, MAX_TOKENS), "new tokens per run")
    repeats = as_int(number_in(repeats, "repeats", 1, MAX_REPEATS), "repeats")
    cfg = make_config(4, "fixed", temperature, top_k, top_p, max_new, seed)
    model, tok, drafter = store.pair(target, draft)
    prompts = [encode(tok, p) for p in split_prompts(prompts_text)]
    if len(prompts) > MAX_PROMPTS:
        raise ValueError(f"at most {MAX_PROMPTS} prompts, got {len(prompts)}")
    budget = Budget()
    configs = list(settings(chains, trees, cfg).values())
    now_s = pilot_cache.pass_now(model, prompts[0], cfg)  # one price for the floor and the pilot: passes timed now
    refuse_floor(model, prompts, configs, cfg, repeats, budget.seconds, now_s)
    costs = est.measure_tree_costs(model, drafter, prompts[0], configs, now_s=now_s)  # priced before: no pilot

    def pricing(n: int, n_prompts: int, reps: int) -> est.Estimate:
        return est.tree_estimate(costs, len(configs), n_prompts, n, reps)

    runs, fitted = repeats * len(prompts) * (1 + len(configs)), fit_default(pricing, max_new, len(prompts), repeats,
                                                                               budget.seconds)
    cfg, max_new = replace(cfg, max_new_tokens=fitted or max_new), fitted or max_new
    time_of = pricing(max_new, len(prompts), repeats)
    budget.refuse_over(time_of.likely, f"this tree lab ({runs} runs)",
                       f"its estimate {time_of}; " + refusal(pricing, max_new, len(prompts), repeats, budget.seconds))
    shortened = (f" The default {DEFAULT_TOKENS} new tokens per run would not fit this server's {budget.seconds:.0f} s "
                 f"on this machine as loaded now: {max_new} a run." if fitted else "")
    yield TreeLab(status=f"*Running {runs} runs (the baseline and every setting, prompt by prompt): estimated {time_of} "
                  f"from a pilot priced at target passes timed now ({costs.token_s * 1e3:.0f} ms a baseline token; the "
                  f"settings took {costs.ratio:.2f}× a baseline token's time per token).{shortened}…*")
    start = time.time()
    lab = tree_lab(model, drafter, prompts, chains, trees, cfg, repeats, check=budget.check)
    est.remember_tree_run(model, drafter, prompts[0], configs, lab, costs)  # the next estimate's price
    note = (f"**Done: {runs} runs in {time.time() - start:.1f} s** (estimated {time_of}).{shortened} Tokens per target "
            "pass is what a tree buys; whether it is faster depends on what verifying its nodes costs on this machine. "
            "*vs best chain*: each setting's tokens/s over the fastest chain's, with a 90% interval from resampling "
            "the prompts.")
    if rows := lab.attrs.get("rows"):
        note += (f" A verified row cost {rows['ms per row']:.2f} ms here (fitted over {rows['rounds']} rounds), so at "
                 f"{rows['best chain']}'s speed a row pays where it wins more than {rows['break-even tokens per row']:.3f} "
                 "tokens (*tokens per extra row*).")
    yield TreeLab(status=note + time_note(lab), table=lab.round(3), per_pass=lab_plots.tree_tokens_per_pass(lab),
                  speedup=lab_plots.tree_speedup(lab))


def warm(store: ModelStore) -> None:
    """Prices the default form's pilot into ``pilot_cache`` beside a pass timed with it, as a first press would:
    after this, the default's estimate and any refusal of it answer after a few passes timed now."""
    target, draft = store.default_target(), store.default_draft(model=True)
    cfg = make_config(4, "fixed", 0.0, 0, 1.0, DEFAULT_TOKENS, 0)
    model, tok, drafter = store.pair(target, draft)
    ids = encode(tok, EXAMPLE_PROMPTS[0])
    configs = list(settings(*lab_setup(CHAINS, TREES), cfg).values())
    est.measure_tree_costs(model, drafter, ids, configs)


def refuse_floor(model, prompts, configs, cfg, repeats: int, budget_s: float, now_s: float | None = None) -> None:
    """Refused before any pilot where even the target passes alone (at ``now_s``, a pass timed now) would overrun
    the budget (``labs.least``), at the shortest length the default may shrink to."""
    pass_s, n = least.pass_seconds(model, prompts[0], cfg, now_s), cfg.max_new_tokens

    def floor(m: int, n_prompts: int, reps: int) -> est.Estimate:
        s = least.configs_floor(pass_s, m, n_prompts, configs, reps)
        return est.Estimate(s, s, s)

    least.refuse_below(floor(MIN_TOKENS if n == DEFAULT_TOKENS else n, len(prompts), repeats).likely, budget_s,
                       f"this tree lab ({repeats * len(prompts) * (1 + len(configs))} runs)",
                       refusal(floor, n, len(prompts), repeats, budget_s, bound="at most "))


def fit_default(pricing, n: int, n_prompts: int, repeats: int, budget_s: float) -> int | None:
    """The default length shortened to fit the budget (its work scales with the machine's load): the most new tokens
    per run, at least MIN_TOKENS, whose likely duration fits, where the default ``n`` does not; None otherwise
    (a length the visitor chose is run as asked, or refused)."""
    if n != DEFAULT_TOKENS or pricing(n, n_prompts, repeats).likely <= budget_s:
        return None
    return est.fitting(lambda m: pricing(m, n_prompts, repeats).likely, n, MIN_TOKENS, budget_s)


def refusal(pricing, n: int, n_prompts: int, repeats: int, budget_s: float, bound: str = "") -> str:
    """What to reduce, and to what, so that the likely duration fits the budget: repeats, prompts or new tokens,
    each alone (``pricing(new tokens, prompts, repeats)`` -> Estimate, the estimate's own cost model; ``bound``
    "at most " where it is a floor)."""
    options = []
    if repeats > 1 and (few := est.fitting(lambda m: pricing(n, n_prompts, m).likely, repeats, 1, budget_s)):
        options.append(f"repeats to {bound}{few}")
    if n_prompts > 1 and (few := est.fitting(lambda m: pricing(n, m, repeats).likely, n_prompts, 1, budget_s)):
        options.append(f"the prompts to {bound}{few}")
    if (tokens := est.fitting(lambda m: pricing(m, n_prompts, repeats).likely, n, 1, budget_s)) is not None:
        options.append(f"new tokens per run to {bound}{tokens}")
    return ("reduce " + ", or ".join(options) if options else
            "reduce the settings (chains and trees), prompts and new tokens together")


def time_note(lab) -> str:
    """Where the fastest tree's rounds spent their time against the best chain's (the table's ms columns), and
    what that bought: the sentence that says why a tree is or is not faster on this machine."""
    rows, trees = lab.attrs.get("rows"), lab[lab["setting"].str.startswith("tree ")]
    if not rows or trees.empty:
        return ""
    chain, tree = lab[lab["setting"] == rows["best chain"]].iloc[0], trees.loc[trees["tokens/s"].idxmax()]
    d = {k: tree[k] - chain[k] for k in ("draft ms", "verify ms", "rest ms", "tau")}
    return (f" Per round, *{tree['setting']}* spent {d['draft ms']:+.2f} ms drafting, {d['verify ms']:+.2f} ms "
            f"verifying and {d['rest ms']:+.2f} ms on the rest against *{chain['setting']}*, for {d['tau']:+.2f} "
            "tokens a round.")


def handlers(store: ModelStore):
    return bind(store, models=dict(run_tree_lab=run_lab))


def build(store: ModelStore) -> None:
    h = handlers(store)
    gr.Markdown("Chains of k drafts against token trees of the same draft, verified in one target pass each. "
                "Trees: a chain with sibling leaves (chain:DEPTH,SIBLINGS[,THRESHOLD]: drafted as the chain, no draft "
                "pass more), a static shape (children per depth, e.g. 3,2,2,1) or dynamic:BUDGET,DEPTH,WIDTH[,THRESHOLD] "
                "(EAGLE-2, ranked by the acceptance this run has seen).")
    target, draft, prompts = lab_inputs(store, EXAMPLE_PROMPTS[:DEFAULT_PROMPTS], model=True)
    with gr.Row():
        chains = gr.Textbox(CHAINS, label="Chains: k values")
        trees = gr.Textbox(TREES, lines=3, label="Trees: one per line")
    with gr.Row():
        max_new = gr.Number(DEFAULT_TOKENS, precision=0, label="new tokens per run",
                            info=f"the default {DEFAULT_TOKENS} shortens itself to fit the server's budget on a busy "
                                 "machine")
        repeats = gr.Number(1, precision=0, label="repeats")
        seed = gr.Number(0, precision=0, label="seed")
    sampling = sampling_controls(0.0)
    run_btn = gr.Button("Run tree lab", variant="primary", elem_id="run-tree-lab")
    status = gr.Markdown("*Press Run tree lab.*")
    table = gr.Dataframe(pd.DataFrame(columns=["setting", "nodes per round", "tau", "target passes per token", "tokens/s",
                                                "speedup"]), label="Per setting", interactive=False)
    with gr.Row():
        per_pass = chart("Tokens per target pass: a tree accepts more per pass than a chain of its depth.")
        speed = chart("Speedup: a tree pays for verifying every node, and on a CPU more rows cost more.")
    inputs = [target, draft, prompts, chains, trees, *sampling, max_new, repeats, seed]
    run_btn.click(h.run_tree_lab, inputs, list(TreeLab(status=status, table=table, per_pass=per_pass, speedup=speed)),
                  api_visibility="undocumented", **LAB_QUEUE)
