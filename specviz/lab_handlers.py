"""The labs' handlers (k sweep, losslessness, distillation) as plain functions: ``make_lab_handlers(store)``
(the tests call them; ``ui_labs.build_lab_tabs`` wires them). Per-user results (the trained drafts) live
in gr.State and come in and go out as arguments."""
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
from .ui import _friendly

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
                  fixed_k, stop=0.4):
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
            stops = [_number(stop, "confidence stop", 0, 0.99)] if stop else []
            policy_runs, rounds = _collect(labs.iter_policies(model, drafts[first], prompts,
                                                              labs.policy_configs(cfg, [fixed], stops=stops)))
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
