"""The k-sweep lab's tab: every k on the same prompts beside the autoregressive baseline, theory beside
measurement, then fixed k against the adaptive k policies. Handlers are module-level functions taking the
store (``handlers(store)`` binds them); ``build`` lays the tab out."""
from __future__ import annotations

import time
from typing import NamedTuple

import gradio as gr
import pandas as pd

from ..config import EXAMPLE_PROMPTS
from ..labs import estimate as est
from ..labs import least, pilot_cache, policies
from ..labs.sweep import iter_sweep, per_position, position_rows, summarize
from ..views import lab_plots
from ..views.tables import readable
from .budget import Budget, Promise, form_key, promise, promised, withdraw
from .forms import as_int, encode, make_config, number_in, split_prompts
from .store import ModelStore
from .tempfiles import fresh_folder
from .widgets import LAB_QUEUE, SKIP, bind, chart, lab_inputs, sampling_controls

ROUND_COLUMNS = ["policy", "prompt", "round", "k", "drafted", "accepted"]
K_MIN, K_MAX, DEFAULT_TOKENS, FIXED_K, STOP = 1, 8, 32, 4, 0.4  # the form's defaults: within 120 s beside 2 busy loops


def write_csvs(frames: dict, prefix: str = "lab-") -> list[str]:
    """Each DataFrame as NAME.csv in a fresh temp folder; the paths."""
    folder = fresh_folder(prefix)
    for name, frame in frames.items():
        frame.to_csv(folder / f"{name}.csv", index=False)
    return [str(folder / f"{name}.csv") for name in frames]


def _collect(stream) -> tuple[pd.DataFrame, pd.DataFrame]:
    runs, rounds = [], []
    for row, rs in stream:
        runs.append(row)
        rounds += rs
    return pd.DataFrame(runs), pd.DataFrame(rounds, columns=ROUND_COLUMNS)


class Swept(NamedTuple):
    """The sweep's outputs by name, in the order ``build`` wires them; a field left unset keeps its component as it is."""
    status: object = SKIP
    table: object = SKIP  # per (draft, k)
    acceptance: object = SKIP  # the four charts against k
    tau: object = SKIP
    speedup: object = SKIP
    heatmaps: object = SKIP
    policy_table: object = SKIP  # fixed k against the adaptive policies
    policy_bars: object = SKIP
    policy_ks: object = SKIP
    files: object = SKIP


def _sweep_views(runs: pd.DataFrame, positions: pd.DataFrame) -> dict:
    """The summary table and the four charts against k, by their Swept names."""
    summary, pos = summarize(runs), per_position(positions)
    return dict(table=readable(summary), acceptance=lab_plots.acceptance_vs_k(summary), tau=lab_plots.tau_vs_k(summary),
                speedup=lab_plots.speedup_vs_k(summary), heatmaps=lab_plots.position_heatmaps(pos))


def sweep_setup(store: ModelStore, target, drafts, prompts_text, k_min, k_max, temperature, top_k, top_p, max_new,
                seed):
    """(target model, {name: draft}, prompts, ks, cfg) from the form, validated."""
    if not drafts:
        raise ValueError("pick at least one draft")
    ks = range(as_int(k_min, "smallest k"), as_int(k_max, "largest k") + 1)
    if not ks or ks[0] < 1 or ks[-1] > 16:
        raise ValueError(f"need 1 <= smallest k <= largest k <= 16, got {k_min}..{k_max}")
    cfg = make_config(ks[0], "fixed", temperature, top_k, top_p, max_new, seed)
    model, tok = store.target(target)
    prompts = [encode(tok, p) for p in split_prompts(prompts_text)]
    return model, {d: store.pair(target, d)[2] for d in drafts}, prompts, list(ks), cfg


def policy_configs(cfg, fixed_k, stop) -> dict:
    """The policy comparison's configs from the form: fixed k, the adaptive policies, the confidence stop."""
    stops = [number_in(stop, "confidence stop", 0, 0.99)] if stop else []
    return policies.policy_configs(cfg, [as_int(fixed_k, "fixed k")], stops=stops)


def estimate(store: ModelStore, target, drafts, prompts_text, k_min, k_max, temperature, top_k, top_p, max_new, seed,
             compare=False, fixed_k=4, stop=0.4):
    """Markdown: the predicted duration of everything Run sweep will run (the sweep, and the policy comparison
    when it is on) and its range, from a short timed pilot of the baseline and each draft, and whether Run sweep
    will take it: the very gate Run sweep applies (``gate``), and a promise Run sweep keeps (``budget.promise``), or
    none where the gate refuses (``budget.withdraw``)."""
    form = (target, drafts, prompts_text, k_min, k_max, temperature, top_k, top_p, max_new, seed)
    setup, budget, key = sweep_setup(store, *form), Budget(), form_key("sweep", *form, compare, fixed_k, stop)
    try:
        note, time_of, _ = gate(*setup, compare, fixed_k, stop, budget)
    except ValueError as refused:
        withdraw(key)
        return f"**Run sweep would refuse this now:** {refused}"
    promise(key, time_of.likely, budget.seconds)
    return note


def gate(model, drafts: dict, prompts, ks, cfg, compare, fixed_k, stop, budget: Budget,
         promised_by: Promise | None = None) -> tuple:
    """The one price both Estimate time and Run sweep read: a target pass timed now on this request's thread
    (``pilot_cache.pass_now``), the floor of that price (refused at once if even it is over the budget), then the
    pilot's estimate priced at the same pass (refused if its likely duration is over), unless Estimate time said
    this form fits (``promised_by``): then it runs, saying both prices. (note, Estimate, pricing)."""
    now_s = pilot_cache.pass_now(model, prompts[0], cfg)
    if promised_by is None:
        refuse_floor(model, drafts, prompts, ks, cfg, compare, fixed_k, stop, budget.seconds, now_s)
    note, time_of, pricing = pilot(model, drafts, prompts, ks, cfg, compare, fixed_k, stop, now_s)
    if time_of.likely > budget.seconds and promised_by is not None:
        note += promised_by.words(time_of, budget)
    elif time_of.likely > budget.seconds:
        budget.refuse_over(time_of.likely, "this sweep", f"its estimate {time_of}; " + refusal(
            pricing, cfg.max_new_tokens, list(ks), len(prompts), budget.seconds - budget.elapsed, compare))
    return note, time_of, pricing


def pilot(model, drafts: dict, prompts, ks, cfg, compare, fixed_k, stop, now_s: float | None = None) -> tuple:
    """(note, Estimate, pricing): the pilot's estimate in words and seconds (priced at ``now_s``, a target pass timed
    now), and pricing, (new tokens, ks, prompts) -> Estimate, for what a refusal suggests."""
    costs = est.measure_costs(model, drafts, prompts[0], ks, cfg, now_s=now_s)
    configs = policy_configs(cfg, fixed_k, stop) if compare else {}
    runs = est.sweep_runs(len(prompts), len(drafts), ks) + (est.policy_runs(len(prompts), len(configs)) if compare
                                                             else 0)

    def pricing(n: int, ks: list[int], n_prompts: int) -> est.Estimate:
        sweep = est.sweep_estimate(costs, n_prompts, ks, n)
        if not compare:
            return sweep
        more = est.policy_estimate(costs, next(iter(drafts)), n_prompts, configs, n)
        return est.Estimate(sweep.likely + more.likely, sweep.low + more.low, sweep.high + more.high)

    time_of = pricing(cfg.max_new_tokens, list(ks), len(prompts))
    note = (f"**Estimated {time_of}** for {runs} runs{' (the policy comparison included)' if compare else ''}, "
            f"from a pilot priced at target passes timed now: {costs.token_s * 1e3:.1f} ms per baseline token, "
            f"slow rounds {costs.spread:.1f}x the typical; α "
            + ", ".join(f"{a:.2f} ± {2 * costs.alpha_se.get(n, 0):.2f} ({n})" for n, a in costs.alpha.items()) + ".")
    return note, time_of, pricing


def refusal(pricing, n: int, ks: list[int], n_prompts: int, budget_s: float, compare: bool = False,
            bound: str = "") -> str:
    """What to reduce, and to what, so that the likely duration fits the budget: new tokens, the largest k or the
    prompts, each alone (``bound`` "at most " where ``pricing`` is a floor: the most each could be)."""
    options = []
    if (tokens := est.fitting(lambda m: pricing(m, ks, n_prompts).likely, n, 1, budget_s)) is not None:
        options.append(f"new tokens to {bound}{tokens}")
    if (top := est.fitting(lambda m: pricing(n, ks[: m - ks[0] + 1], n_prompts).likely, ks[-1], ks[0],
                           budget_s)) is not None and top < ks[-1]:
        options.append(f"the largest k to {bound}{top}")
    if (few := est.fitting(lambda m: pricing(n, ks, m).likely, n_prompts, 1, budget_s)) is not None:
        options.append(f"the prompts to {bound}{few}")
    return ("reduce " + ", or ".join(options) if options else "reduce the drafts, k values, prompts and new tokens "
            "together") + (", or turn off the policy comparison" if compare else "")


def warm(store: ModelStore) -> None:
    """Prices the default form's pilot into ``pilot_cache`` beside a pass timed with it, as a first Estimate time
    would: after this, the default's estimate and any refusal of it answer after a few passes timed now."""
    form = (store.default_target(), [store.default_draft()], "\n\n".join(EXAMPLE_PROMPTS), K_MIN, K_MAX, 0.0, 0, 1.0,
            DEFAULT_TOKENS, 0)
    model, drafts, prompts, ks, cfg = sweep_setup(store, *form)
    pilot(model, drafts, prompts, ks, cfg, True, FIXED_K, STOP)


def refuse_floor(model, drafts: dict, prompts, ks, cfg, compare, fixed_k, stop, budget_s: float,
                 now_s: float | None = None) -> None:
    """Refused before any pilot where even the target passes alone (at ``now_s``, a pass timed now) would overrun
    the budget (``labs.least``)."""
    pass_s = least.pass_seconds(model, prompts[0], cfg, now_s)
    configs = list(policy_configs(cfg, fixed_k, stop).values())

    def floor(n: int, ks: list[int], n_prompts: int) -> est.Estimate:
        s = least.sweep_floor(pass_s, n, n_prompts, len(drafts), ks) + (
            least.configs_floor(pass_s, n, n_prompts, configs) if compare else 0.0)
        return est.Estimate(s, s, s)

    n, ks = cfg.max_new_tokens, list(ks)
    least.refuse_below(floor(n, ks, len(prompts)).likely, budget_s, "this sweep",
                       refusal(floor, n, ks, len(prompts), budget_s, compare, bound="at most "))


def _policy_step(model, drafts: dict, prompts, cfg, fixed_k, stop) -> tuple:
    """Fixed k against the adaptive policies with the first draft: (frames, summary, 2 charts)."""
    first = next(iter(drafts))
    runs, rounds = _collect(policies.iter_policies(model, drafts[first], prompts, policy_configs(cfg, fixed_k, stop)))
    summary = policies.policy_summary(runs)
    frames = dict(policy_runs=runs, policy_rounds=rounds, policy_summary=summary)
    return first, frames, summary, lab_plots.policy_bars(summary), lab_plots.k_per_round(policies.round_ks(rounds))


def run_sweep(store: ModelStore, target, drafts, prompts_text, k_min, k_max, temperature, top_k, top_p, max_new, seed,
              compare, fixed_k, stop=0.4):
    """Streams ``Swept``: the status, the table and the four charts as runs come in, then the policies and files."""
    form = (target, drafts, prompts_text, k_min, k_max, temperature, top_k, top_p, max_new, seed)
    budget = Budget()
    kept = promised(form_key("sweep", *form, compare, fixed_k, stop), budget.seconds)
    model, drafts, prompts, ks, cfg = sweep_setup(store, *form)
    note, time_of, pricing = gate(model, drafts, prompts, ks, cfg, compare, fixed_k, stop, budget, kept)
    yield Swept(status=note + "\n\n*Running…*")
    total, rows, positions, start, last = est.sweep_runs(len(prompts), len(drafts), ks), [], [], time.perf_counter(), 0.0
    drawing, every = 0.0, 1.0  # seconds spent drawing the tables and charts as rows came in; seconds between draws
    for row, trace in iter_sweep(model, drafts, prompts, ks, cfg):
        budget.check()
        rows.append(row)
        if trace is not None:
            positions += position_rows(trace, draft=row["draft"], k=row["k"], prompt=row["prompt"])
        if positions and (time.perf_counter() - last >= every or len(rows) == total):
            drawn = time.perf_counter()
            views = _sweep_views(pd.DataFrame(rows), pd.DataFrame(positions))
            last, drawing = time.perf_counter(), drawing + time.perf_counter() - drawn
            every = max(1.0, 4 * (last - drawn))  # redraw at most a fifth of the time: the runs come first
            left = (last - start) * (total - len(rows)) / len(rows)
            yield Swept(status=f"{note}\n\n**{len(rows)} / {total} runs** in {last - start:.1f} s (about {left:.0f} s "
                               "left)", **views)
    runs = pd.DataFrame(rows)
    frames = dict(sweep_runs=runs, sweep_summary=summarize(runs), per_position=per_position(pd.DataFrame(positions)))
    took = time.perf_counter() - start
    note += (f"\n\n**Done: {total} runs in {est.seconds(took - drawing)} s**, and {est.seconds(drawing)} s drawing "
             f"the charts (measured, on the machine as loaded).")
    if not compare:
        yield Swept(status=note, files=write_csvs(frames))
        return
    yield Swept(status=note + " *Comparing k policies…*")
    first, more, summary, bars, ks_chart = _policy_step(model, drafts, prompts, cfg, fixed_k, stop)
    yield Swept(status=note + f" Policies compared with draft {first!r}.", policy_table=readable(summary),
                policy_bars=bars, policy_ks=ks_chart, files=write_csvs(frames | more))


def handlers(store: ModelStore):
    return bind(store, models=dict(estimate=estimate, run_sweep=run_sweep))


def build(store: ModelStore) -> None:
    h = handlers(store)
    gr.Markdown("Run every k on the same prompts beside the autoregressive baseline; theory (dashed) uses the α and "
                "c measured in this run. ★ best k measured, ◆ best k predicted.")
    target, drafts, prompts = lab_inputs(store, EXAMPLE_PROMPTS, multi=True, lines=6)
    with gr.Row():
        k_min = gr.Number(K_MIN, precision=0, label="smallest k")
        k_max = gr.Number(K_MAX, precision=0, label="largest k")
        max_new = gr.Number(DEFAULT_TOKENS, precision=0, label="new tokens per run")
        seed = gr.Number(0, precision=0, label="seed")
    sampling = sampling_controls(0.0)
    with gr.Row():
        compare = gr.Checkbox(True, label="Then compare fixed k with the adaptive policies (history, heuristic, "
                                          "confidence stop)")
        fixed_k = gr.Number(FIXED_K, precision=0, label="fixed k for the comparison")
        stop = gr.Number(STOP, label="confidence stop: draft up to 10, stop below this q(x) (0 = leave out)")
    with gr.Row():
        est_btn = gr.Button("Estimate time")
        run_btn = gr.Button("Run sweep", variant="primary")
    status = gr.Markdown("*Press Estimate time, or Run sweep (it says its estimate first).*")
    table = gr.Dataframe(pd.DataFrame(columns=["draft", "k", "acceptance rate", "α", "τ (tokens / round)", "tokens/s",
                                                "speedup"]), label="Per (draft, k)", interactive=False)
    with gr.Row():
        acc, tau = chart("Acceptance rate and α."), chart("τ: tokens per round, measured against eq. 1.")
    with gr.Row():
        speed = chart("Speedup: measured against Leviathan's prediction.")
        heat = chart("Left: of all drafts at a position, the share accepted (falls with position: each needs every "
                     "earlier one accepted). Right: of those reached, the share accepted (the draft's own quality).")
    policy_table = gr.Dataframe(pd.DataFrame(columns=["policy", "tokens/s", "acceptance rate", "speedup"]),
                                label="k policies", interactive=False)
    with gr.Row():
        bars, ks = chart("tokens/s and acceptance per policy."), chart("The drafts each round made.")
    files = gr.File(label="Results (CSV)", file_count="multiple", interactive=False)
    inputs = [target, drafts, prompts, k_min, k_max, *sampling, max_new, seed]
    est_btn.click(h.estimate, inputs + [compare, fixed_k, stop], [status], api_visibility="undocumented", **LAB_QUEUE)
    run_btn.click(h.run_sweep, inputs + [compare, fixed_k, stop],
                  list(Swept(status=status, table=table, acceptance=acc, tau=tau, speedup=speed, heatmaps=heat,
                             policy_table=policy_table, policy_bars=bars, policy_ks=ks, files=files)),
                  api_visibility="undocumented", **LAB_QUEUE)
