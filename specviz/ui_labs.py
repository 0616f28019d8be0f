"""The labs' tabs: k sweep, losslessness, distillation. ``make_lab_handlers(store)`` gives the handlers
as plain functions (the tests call them); ``build_lab_tabs(store)`` lays the tabs out inside
``ui.build_demo``'s Blocks. Per-user results (the trained drafts) live in gr.State."""
from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import gradio as gr
import pandas as pd

from . import handlers, lab_plots, labs, lossless
from .config import EXAMPLE_PROMPTS
from .decoder import Decoding
from .drafters import Drafter
from .gpu import gpu_task
from .handlers import STREAM_EVERY_S, ModelStore, TrainedDraft, encode, make_config, user_pair
from .lab_distill import CE, KL, iter_distill_lab, lab_drafts
from .models import ASSETS
from .sweep import iter_sweep, summarize
from .timeline import fill_token_text, timeline_html
from .ui import MODEL_QUEUE, _chart, _friendly

LAB_TEXT = ASSETS.parent / "corpus_sample.txt"  # small, committed: enough for a lab
FRESH = "fresh tiny draft"
SKIP = gr.skip()
SHORT = {KL: "KL", CE: "CE"}  # method -> its tag in a trained draft's name
NO_RAW = (" This draft exposes no unprocessed logits (a point mass or an n-gram), so the 'unprocessed q' "
          "mistake cannot happen with it: pick a model draft to see it.")


def split_prompts(text) -> list[str]:
    """Prompts separated by an empty line (a prompt may hold single newlines)."""
    prompts = [p.strip("\n") for p in (text or "").split("\n\n") if p.strip()]
    if not prompts:
        raise ValueError("give at least one prompt (separate prompts with an empty line)")
    return prompts


def _number(x, name: str, low: float, high: float) -> float:
    x = handlers._float(x, name)
    if not low <= x <= high:
        raise ValueError(f"{name} must lie in [{low:g}, {high:g}], got {x:g}")
    return x


def _write_csvs(frames: dict) -> list[str]:
    folder = Path(tempfile.mkdtemp(prefix="specviz-lab-"))
    for name, frame in frames.items():
        frame.to_csv(folder / f"{name}.csv", index=False)
    return [str(folder / f"{name}.csv") for name in frames]


def _collect(stream) -> tuple[pd.DataFrame, pd.DataFrame]:
    runs, rounds = [], []
    for row, rs in stream:
        runs.append(row)
        rounds += rs
    return pd.DataFrame(runs), pd.DataFrame(rounds, columns=["policy", "prompt", "round", "k", "drafted", "accepted"])


def _sweep_views(runs: pd.DataFrame, positions: pd.DataFrame) -> tuple:
    """The summary table and the four charts against k."""
    summary, pos = summarize(runs), labs.per_position(positions)
    return (summary.round(3), lab_plots.acceptance_vs_k(summary), lab_plots.tau_vs_k(summary),
            lab_plots.speedup_vs_k(summary), lab_plots.position_heatmap(pos))


def make_lab_handlers(store: ModelStore) -> SimpleNamespace:
    def sweep_setup(target, drafts, prompts_text, k_min, k_max, temperature, top_k, top_p, max_new, seed):
        if not drafts:
            raise ValueError("pick at least one draft")
        ks = range(handlers._int(k_min, "smallest k"), handlers._int(k_max, "largest k") + 1)
        if not ks or ks[0] < 1 or ks[-1] > 16:
            raise ValueError(f"need 1 <= smallest k <= largest k <= 16, got {k_min}..{k_max}")
        cfg = make_config(ks[0], "fixed", temperature, top_k, top_p, max_new, seed)
        model, tok = store.target(target)
        prompts = [encode(tok, p) for p in split_prompts(prompts_text)]
        return model, {d: store.pair(target, d)[2] for d in drafts}, prompts, list(ks), cfg

    def estimate(*args):
        """Markdown: the predicted duration, from a short timed pilot run of the baseline and each draft."""
        model, drafts, prompts, ks, cfg = sweep_setup(*args)
        costs = labs.measure_costs(model, drafts, prompts[0], ks, cfg)
        likely, lo, hi = (labs.estimate_seconds(costs, len(prompts), ks, cfg.max_new_tokens, a) for a in (None, 1, 0))
        return (f"**Estimated ≈ {likely:.0f} s** ({lo:.0f}–{hi:.0f} s if drafts were always / never accepted) for "
                f"{len(prompts) * (1 + len(drafts) * len(ks))} runs, from a pilot: {costs.token_s * 1e3:.1f} ms per "
                "baseline token; α " + ", ".join(f"{a:.2f} ({n})" for n, a in costs.alpha.items()) + ".")

    def run_sweep(target, drafts, prompts_text, k_min, k_max, temperature, top_k, top_p, max_new, seed, compare,
                  fixed_k):
        """Streams (status, table, 4 charts, policy table, 2 policy charts, files)."""
        args = (target, drafts, prompts_text, k_min, k_max, temperature, top_k, top_p, max_new, seed)
        note = estimate(*args)
        model, drafts, prompts, ks, cfg = sweep_setup(*args)
        yield (note + "\n\n*Running…*", *(SKIP,) * 9)
        total, rows, positions, start, last = len(prompts) * (1 + len(drafts) * len(ks)), [], [], time.time(), 0.0
        for row, trace in iter_sweep(model, drafts, prompts, ks, cfg):
            rows.append(row)
            if trace is not None:
                positions += labs.position_rows(trace, draft=row["draft"], k=row["k"], prompt=row["prompt"])
            if positions and (time.time() - last >= 1.0 or len(rows) == total):
                last = time.time()
                views = _sweep_views(pd.DataFrame(rows), pd.DataFrame(positions))
                yield (f"{note}\n\n**{len(rows)} / {total} runs** in {last - start:.1f} s", *views, *(SKIP,) * 4)
        runs = pd.DataFrame(rows)
        frames = dict(sweep_runs=runs, sweep_summary=summarize(runs), per_position=labs.per_position(pd.DataFrame(positions)))
        note += f"\n\n**Done: {total} runs in {time.time() - start:.1f} s** (measured; an idle CPU is faster)."
        if compare:
            yield (note + " *Comparing k policies…*", *(SKIP,) * 9)
            first, fixed = next(iter(drafts)), handlers._int(fixed_k, "fixed k")
            policy_runs, rounds = _collect(labs.iter_policies(model, drafts[first], prompts,
                                                              labs.policy_configs(cfg, [fixed])))
            summary = labs.policy_summary(policy_runs)
            frames |= dict(policy_runs=policy_runs, policy_rounds=rounds, policy_summary=summary)
            yield (note + f" Policies compared with draft {first!r}.", *(SKIP,) * 5, summary.round(3),
                   lab_plots.policy_bars(summary), lab_plots.k_per_round(labs.round_ks(rounds)), _write_csvs(frames))
        else:
            yield (note, *(SKIP,) * 8, _write_csvs(frames))

    def run_lossless(target, draft, prompt, extra, temperature, top_k, top_p, seed, draws, batch):
        """Streams (status, test table, three emitted-token charts, decomposition chart)."""
        extra, draws = int(_number(extra, "generated tokens", 0, 256)), int(_number(draws, "draws", 100, 1_000_000))
        cfg = make_config(1, "fixed", temperature, top_k, top_p, max(extra, 1), seed)
        model, tok = store.target(target)
        d = lossless.next_token_dists(model, store.pair(target, draft)[2], encode(tok, prompt), cfg, extra)
        labels, same_q = _LabelCache(tok), bool((d.q == d.q_raw).all())
        decomp = lab_plots.decomposition_bars(lossless.decomposition(d.p, d.q), labels)
        start = time.perf_counter()
        for frame in lossless.iter_lossless(d, draws, int(_number(batch, "batch", 100, draws)), seed=cfg.seed):
            table = lossless.fit_table(frame)
            rate = table.draws[0] * len(table) / (time.perf_counter() - start)
            figs = [lab_plots.emitted_bars(frame[frame.variant == v], _title(v), labels) for v in lossless.VARIANTS]
            yield (f"**{table.draws[0]} draws per variant** ({rate:,.0f} verify steps/s). Lossless means the emitted "
                   "tokens follow p: a large chi-square p-value and a TV distance that shrinks as draws accumulate."
                   + (NO_RAW if same_q else ""),
                   table.round(4), *figs, decomp)

    def run_distill(target, start, seconds, compare_ce, eval_every, user_drafts):
        """Streams (status, loss chart, checkpoint chart, user drafts state, zip, try-it dropdown)."""
        model, tok = store.target(target)
        base = None if start == FRESH else store.pair(target, start)[2]
        if isinstance(base, Drafter):
            raise ValueError(f"{start!r} is model-free: nothing to train. Pick a model draft or {FRESH!r}")
        seconds, eval_every = _number(seconds, "budget", 2, 900), _number(eval_every, "checkpoint every", 1, 900)
        drafts = lab_drafts(model, base, bool(compare_ce))
        prompts = [encode(tok, p) for p in EXAMPLE_PROMPTS]
        points, last = [], 0.0
        stream = iter_distill_lab(model, drafts, [LAB_TEXT.read_text(encoding="utf-8")], prompts, tokenizer=tok,
                                  seconds=seconds, eval_every_s=eval_every)
        for point in stream:
            points.append(point)
            if time.time() - last >= 2 * STREAM_EVERY_S:
                last = time.time()
                yield (f"**{point['method']}**: step {point['step']}, {point['seconds']:.0f} / {seconds:.0f} s",
                       *_distill_views(points), SKIP, SKIP, SKIP)
        mine = dict(user_drafts or {})
        for method, d in drafts.items():  # e.g. "lab: KL 30s #1"; the explorer and compare tabs list them too
            mine[f"lab: {SHORT.get(method, method)} {seconds:g}s #{len(mine) + 1}"] = TrainedDraft(d.eval(), target)
        yield ("**Done.** Try the trained drafts below, or download them.", *_distill_views(points), mine,
               _zip(drafts, tok), gr.update(choices=list(mine), value=list(mine)[-len(drafts)]))

    def try_draft(prompt, target, name, user_drafts, temperature):
        """Streams (timeline, summary) of speculative decoding with one of this user's trained drafts."""
        if not user_drafts or name not in user_drafts:
            raise ValueError("train a draft first (run the distillation above), then pick it here")
        model, tok, drafter = user_pair(store, target, name, user_drafts)
        run = Decoding(model, drafter, encode(tok, prompt), make_config(4, "fixed", temperature, 0, 1.0, 64, 0))
        run.trace.target_name, run.trace.draft_name = target, name
        for _ in run:
            pass
        fill_token_text(run.trace, tok)
        return timeline_html(run.trace), handlers.summary_markdown(run.trace, None)

    return SimpleNamespace(estimate=gpu_task(_friendly(estimate)), run_sweep=gpu_task(_friendly(run_sweep)),
                           run_lossless=gpu_task(_friendly(run_lossless)), run_distill=gpu_task(_friendly(run_distill)),
                           try_draft=gpu_task(_friendly(try_draft)))


def _title(variant: str) -> str:
    return "Correct verify step" if variant == lossless.CORRECT else f"WRONG ({variant[7:]}): biased"


class _LabelCache(dict):
    """token id -> its text, decoded on first use."""

    def __init__(self, tokenizer):
        super().__init__()
        self.tokenizer = tokenizer

    def get(self, token, default=None):
        if token not in self:
            self[token] = repr(self.tokenizer.decode([int(token)], clean_up_tokenization_spaces=False))
        return self[token]


def _distill_views(points: list[dict]) -> tuple:
    frame = pd.DataFrame(points).reindex(columns=["method", "step", "seconds", "loss", "heldout_kl", "acceptance",
                                                  "alpha"])
    return lab_plots.training_loss(frame), lab_plots.checkpoints_chart(frame)


def _zip(drafts: dict, tokenizer) -> str:
    folder = Path(tempfile.mkdtemp(prefix="specviz-draft-"))
    for method, draft in drafts.items():
        out = folder / "drafts" / method.split()[0].replace("-", "_")
        draft.save_pretrained(out)
        tokenizer.save_pretrained(out)
    return shutil.make_archive(str(folder / "trained-drafts"), "zip", folder / "drafts")


# -- layout --------------------------------------------------------------------------------------------
def _sampling_controls(temperature: float = 1.0) -> list:
    with gr.Row():
        t = gr.Slider(0, 2, value=temperature, step=0.05, label="Temperature (0 = greedy)")
        top_k = gr.Number(value=0, precision=0, minimum=0, label="top-k (0 = off)")
        top_p = gr.Slider(0.05, 1, value=1.0, step=0.05, label="top-p (1 = off)")
    return [t, top_k, top_p]


def _sweep_tab(store: ModelStore, h) -> None:
    gr.Markdown("Run every k on the same prompts beside the autoregressive baseline; theory (dashed) uses the α and "
                "c measured in this run. ★ best k measured, ◆ best k predicted.")
    with gr.Row():
        target = gr.Dropdown(store.list_targets(), value=store.default_target(), label="Target")
        drafts = gr.Dropdown(store.list_drafters(), value=[store.default_draft()], multiselect=True, label="Drafts")
    prompts = gr.Textbox("\n\n".join(EXAMPLE_PROMPTS), lines=6, label="Prompts (separate with an empty line)")
    with gr.Row():
        k_min = gr.Number(1, precision=0, label="smallest k")
        k_max = gr.Number(8, precision=0, label="largest k")
        max_new = gr.Number(64, precision=0, label="new tokens per run")
        seed = gr.Number(0, precision=0, label="seed")
    sampling = _sampling_controls(0.0)
    with gr.Row():
        compare = gr.Checkbox(True, label="Then compare fixed k with the adaptive policies (history, heuristic)")
        fixed_k = gr.Number(4, precision=0, label="fixed k for the comparison")
    with gr.Row():
        est_btn = gr.Button("Estimate time")
        run_btn = gr.Button("Run sweep", variant="primary")
    status = gr.Markdown("*Press Estimate time, or Run sweep (it says its estimate first).*")
    table = gr.Dataframe(label="Per (draft, k)", interactive=False)
    with gr.Row():
        acc, tau = _chart("Acceptance rate and α."), _chart("τ: tokens per round, measured against eq. 1.")
    with gr.Row():
        speed = _chart("Speedup: measured against Leviathan's prediction.")
        heat = _chart("Each later position needs every earlier draft accepted.")
    policy_table = gr.Dataframe(label="k policies", interactive=False)
    with gr.Row():
        bars, ks = _chart("tokens/s and acceptance per policy."), _chart("The k each round chose.")
    files = gr.File(label="Results (CSV)", file_count="multiple", interactive=False)
    inputs = [target, drafts, prompts, k_min, k_max, *sampling, max_new, seed]
    est_btn.click(h.estimate, inputs, [status], api_visibility="undocumented", **MODEL_QUEUE)
    run_btn.click(h.run_sweep, inputs + [compare, fixed_k], [status, table, acc, tau, speed, heat, policy_table, bars,
                                                            ks, files], api_visibility="undocumented", **MODEL_QUEUE)


def _lossless_tab(store: ModelStore, h) -> None:
    gr.Markdown("One context, thousands of verify steps at once: the emitted token must follow **p** exactly. "
                "The two WRONG variants are the classic bugs: a residual built from the scalar q(x), and q taken "
                "from unprocessed logits while the draft samples from processed ones.")
    with gr.Row():
        target = gr.Dropdown(store.list_targets(), value=store.default_target(), label="Target")
        draft = gr.Dropdown(store.list_drafters(), value=store.default_draft(), label="Draft")
    prompt = gr.Textbox(EXAMPLE_PROMPTS[0], lines=2, label="Context")
    with gr.Row():
        extra = gr.Number(0, precision=0, label="then generate this many tokens with the target")
        seed = gr.Number(0, precision=0, label="seed")
        draws = gr.Number(5000, precision=0, label="draws")
        batch = gr.Number(500, precision=0, label="draws per update")
    sampling = _sampling_controls(0.7)
    run_btn = gr.Button("Draw", variant="primary")
    status = gr.Markdown()
    table = gr.Dataframe(label="Goodness of fit against p", interactive=False)
    with gr.Row():
        right, decomp = _chart("Correct: the bars follow p."), _chart("min(p, q) + (1 − β)·residual = p, token by token.")
    with gr.Row():
        wrong_a, wrong_b = _chart("WRONG residual max(0, p − q(x))."), _chart("WRONG q from the raw logits.")
    run_btn.click(h.run_lossless, [target, draft, prompt, extra, *sampling, seed, draws, batch],
                  [status, table, right, wrong_a, wrong_b, decomp], api_visibility="undocumented", **MODEL_QUEUE)


def _distill_tab(store: ModelStore, h, mine: gr.State):
    """The tab; ``mine`` is this user's trained drafts (name -> TrainedDraft). Returns the Train event."""
    gr.Markdown("Distil a draft towards the target (forward KL) for a short budget and watch its acceptance rate "
                "climb as the held-out KL falls; beside it, an identical draft trained on the same batches with "
                "plain cross-entropy. Acceptance α (mean β) is measured on the example prompts (k = 4, T = 1, 16 tokens); "
                "checkpoints are not counted in the budget.")
    with gr.Row():
        target = gr.Dropdown(store.list_targets(), value=store.default_target(), label="Target")
        start = gr.Dropdown([FRESH] + store.list_drafters(), value=FRESH, label="Start from")
        seconds = gr.Number(20, label="training budget per method (s)")
        every = gr.Number(10, label="checkpoint every (s of training)")
        compare = gr.Checkbox(True, label="also train with cross-entropy")
    run_btn = gr.Button("Train", variant="primary")
    status = gr.Markdown()
    with gr.Row():
        loss, checks = _chart("Training loss per step."), _chart("Acceptance (solid) and held-out KL (dotted).")
    zipped = gr.File(label="Trained drafts (save_pretrained, zipped)", interactive=False)
    gr.Markdown("### Try a trained draft")
    with gr.Row():
        pick = gr.Dropdown([], label="Your trained drafts")
        prompt = gr.Textbox(EXAMPLE_PROMPTS[1], label="Prompt")
        temperature = gr.Slider(0, 2, value=0.8, step=0.05, label="Temperature")
    try_btn = gr.Button("Decode with it")
    timeline, summary = gr.HTML(), gr.Markdown()
    trained = run_btn.click(h.run_distill, [target, start, seconds, compare, every, mine],
                  [status, loss, checks, mine, zipped, pick], api_visibility="undocumented", **MODEL_QUEUE)
    try_btn.click(h.try_draft, [prompt, target, pick, mine, temperature], [timeline, summary],
                  api_visibility="undocumented", **MODEL_QUEUE)
    return trained


def build_lab_tabs(store: ModelStore, user_drafts: gr.State | None = None):
    """The three lab tabs, inside the caller's gr.Blocks. Drafts trained in the distillation lab go into
    ``user_drafts`` (a gr.State dict, per user; a fresh one if None). Returns the Train event (chain
    ``.then`` on it to refresh other draft pickers)."""
    h = make_lab_handlers(store)
    user_drafts = gr.State({}) if user_drafts is None else user_drafts
    with gr.Tabs():
        with gr.Tab("k sweep lab"):
            _sweep_tab(store, h)
        with gr.Tab("Losslessness lab"):
            _lossless_tab(store, h)
        with gr.Tab("Distillation lab"):
            trained = _distill_tab(store, h, user_drafts)
    return trained
