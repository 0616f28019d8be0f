"""The Load lab: where speculation stops paying as more requests are decoded together, measured on this machine
beside the goodput model's prediction (``specviz.goodput``; B = batch, L = context, k = drafts per round).

    python -m specviz.labs.load [--batches 1 2 4 8 16 32] [--context 256] [--k 4] [--new-tokens 16] [--repeats 2]

What it measures:
  the verify-cost surface: one batched target pass of B requests x w tokens over each request's cached L tokens,
  for every batch size and w = 1 .. k + 1 (the rows one round verifies), and the draft's one-token pass, each
  repeat in a shuffled order so load from other work falls on all of them alike;
  the runs: batched speculative and autoregressive greedy decoding of the example prompts (cycled to fill a
  batch, each after natural text from the other prompts up to L tokens), the two methods interleaved (their
  order alternating each repeat and batch size); tokens/s of decoding (the prefill excluded: the same for both),
  its median and range over the repeats; the speedup of each repeat taken within the repeat (the same load).
The model's prediction sees the passes the runs themselves timed (``run_passes``: the same forward, the same
repeats, interleaved as the runs were), each batch's acceptance per position (counts, not the clock: the prompts
cycled into a batch differ in how well the draft guesses them), and the smallest batch's bookkeeping per request
and step; never the batched runs' tokens/s. The surface's passes, timed apart, draw the verify-cost picture.
"""
from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from dataclasses import dataclass

import pandas as pd
import torch

from .. import goodput as gp
from ..batch import BatchDecoding, autoregressive_generate_batch, speculative_generate_batch
from ..config import EXAMPLE_PROMPTS, DecodeConfig
from ..drafts.drafter import ModelDrafter, as_drafter
from ..models import load_pair
from ..runtime.batch_lm import BatchLM
from ..runtime.lm import Stopwatch, context_window
from ..theory import positional_rates
from .estimate import Estimate

BATCHES, CONTEXTS, MAX_K = (1, 2, 4, 8, 16, 32), (128, 256, 512, 1024, 2048), 8
RUN_COLUMNS = ["batch", "method", "repeat", "tokens", "seconds", "tokens_per_s", "steps", "drafted", "accepted"]
SURFACE_COLUMNS = ["model", "batch", "width", "tokens", "context", "ms", "ms_min", "ms_max"]


def forward_used(target) -> str:
    """The forward ``specviz.batch`` runs batched passes on: the class it builds for a batch of the target's rows
    and the first paragraph of its module's docstring (read off the code, so it stays true when that changes)."""
    probe = BatchDecoding(target, None, [torch.tensor([[0]])], DecodeConfig(k_policy="fixed", max_new_tokens=1,
                                                                             temperature=0.0, record=False))
    kind = type(probe.target)
    doc = (sys.modules[kind.__module__].__doc__ or kind.__doc__ or "").strip().split("\n\n")[0]
    return f"{kind.__module__}.{kind.__qualname__}: {' '.join(doc.split())}"


def check_setting(target, batches, context: int, k: int, new_tokens: int, repeats: int) -> list[int]:
    """The batch sizes sorted, or a ValueError saying what to change."""
    batches = sorted({int(b) for b in batches})
    if not batches or batches[0] < 1 or batches[-1] > max(BATCHES):
        raise ValueError(f"batch sizes must lie in 1..{max(BATCHES)}, got {batches}")
    if not 1 <= k <= MAX_K or new_tokens < 1 or repeats < 1:
        raise ValueError(f"need 1 <= k <= {MAX_K}, new tokens >= 1 and repeats >= 1, got {k}, {new_tokens}, {repeats}")
    window = context_window(target)
    if context < 1 or (window is not None and context + new_tokens > window):
        raise ValueError(f"a context of {context:,} tokens + {new_tokens} new ones exceeds the target's window of "
                         f"{window:,} tokens: pick a context up to {window - new_tokens:,}" if window else
                         f"the context must be at least 1 token, got {context}")
    return batches


def at_context(prompts: list[list[int]], context: int, size: int, sep: list[int] = ()) -> list[torch.Tensor]:
    """``size`` requests: the prompts cycled, each after natural text up to ``context`` tokens (the other prompts
    whole, each followed by ``sep``, from the next one on, repeated); [1, L] each."""
    out = []
    for i in range(size):
        j = i % len(prompts)
        prompt = prompts[j][-context:]
        pool = [t for p in prompts[j + 1:] + prompts[: j + 1] for t in (*p, *sep)]
        need = context - len(prompt)
        filler = (pool * (need // len(pool) + 1))[-need:] if need > 0 else []
        out.append(torch.tensor([filler + prompt]))
    return out


def pass_timer(model, rows: list[torch.Tensor], seed: int = 0):
    """``time(w)``: seconds of ONE batched pass of w new tokens per row over the rows' cached context, rolled back
    (untimed) after; ``time.prefill_s``: the context's own batched pass."""
    lm, watch = BatchLM(model, len(rows)), Stopwatch(next(model.parameters()).device)
    vocab = model.get_input_embeddings().weight.shape[0]
    with watch.running():
        lm.feed([[t % vocab for t in r[0].tolist()] for r in rows])
    prefill_s = watch.take()
    new = torch.randint(vocab, (MAX_K + 1,), generator=torch.Generator().manual_seed(seed)).tolist()

    def time_pass(width: int) -> float:
        with watch.running():
            lm.feed([new[:width]] * len(rows))
        lm.drop_last(width)
        return watch.take()

    time_pass.prefill_s = prefill_s
    return time_pass


def surface(target, draft, prompts, batches, context: int, k: int, repeats: int, check=None,
            sep: list[int] = ()) -> pd.DataFrame:
    """The timed passes (SURFACE_COLUMNS): the target at widths 1..k+1 and the draft at widths 1 and 2 (a round's
    first draft pass feeds one or two tokens a request; ``draft`` None: a drafter without a model), per batch size."""
    order, out = random.Random(0), []
    for batch in batches:
        rows = at_context(prompts, context, batch, sep)
        timers = {("target", w): t for t in [pass_timer(target, rows)] for w in range(1, k + 2)}
        if draft is not None:
            draft_pass = pass_timer(draft, rows)
            timers.update({("draft", 1): draft_pass, ("draft", 2): draft_pass})
        for time_pass in {id(t): t for t in timers.values()}.values():
            time_pass(1)  # warm-up, untimed
        samples = {key: [] for key in timers}
        for _ in range(repeats):
            if check is not None:
                check()
            for key in order.sample(list(timers), len(timers)):
                samples[key].append(timers[key](key[1]))
        out += [dict(model=m, batch=batch, width=w, tokens=batch * w, context=context, ms=1e3 * statistics.median(s),
                     ms_min=1e3 * min(s), ms_max=1e3 * max(s)) for (m, w), s in samples.items()]
    return pd.DataFrame(out, columns=SURFACE_COLUMNS)


def decode_row(batch: int, method: str, repeat: int, traces) -> dict:
    """One run's row: every request's tokens over the batch's decoding seconds (its prefill taken out)."""
    longest = max(traces, key=lambda t: t.total_s)
    counts = sum((t.counts() for t in traces), start=type(longest.counts())())
    seconds = max(longest.total_s - longest.prefill_s, 1e-9)
    return dict(batch=batch, method=method, repeat=repeat, tokens=counts.new_tokens, seconds=seconds,
                tokens_per_s=counts.new_tokens / seconds, steps=len(longest.rounds), drafted=counts.drafted,
                accepted=counts.accepted)


def run_load(target, draft, prompts, batches, context: int, cfg: DecodeConfig, repeats: int, check=None,
             sep: list[int] = (), warm: bool = True, first_repeat: int = 0):
    """(runs frame, {(batch, method): the runs' traces}): speculative and autoregressive interleaved. ``warm``
    False: no warm-up run (a caller that already made one); ``first_repeat``: the first repeat's number (a caller
    interleaving contexts runs one repeat at a time)."""
    fns = {"speculative": lambda ids: speculative_generate_batch(target, draft, ids, cfg),
           "autoregressive": lambda ids: autoregressive_generate_batch(target, ids, cfg)}
    for fn in fns.values() if warm else ():  # warm-up: first calls allocate
        fn(at_context(prompts, context, 1, sep))
    rows, kept = [], {(batch, name): [] for batch in batches for name in fns}
    for rep in range(first_repeat, first_repeat + repeats):
        for i, batch in enumerate(batches):
            ids = at_context(prompts, context, batch, sep)
            for method in (list(fns) if (rep + i) % 2 == 0 else list(fns)[::-1]):
                if check is not None:
                    check()
                traces = fns[method](ids)
                rows.append(decode_row(batch, method, rep, traces))
                kept[batch, method] += traces
    return pd.DataFrame(rows, columns=RUN_COLUMNS), kept


def summarize(runs: pd.DataFrame) -> pd.DataFrame:
    """Per batch size: tokens/s both ways (median, min, max over repeats) and the speedup, each repeat's own ratio."""
    wide = runs.pivot_table(index=["batch", "repeat"], columns="method", values="tokens_per_s").reset_index()
    wide["speedup"] = wide.speculative / wide.autoregressive
    steps = runs[runs.method == "speculative"].groupby("batch")
    out = wide.groupby("batch").agg(
        spec_tps=("speculative", "median"), spec_min=("speculative", "min"), spec_max=("speculative", "max"),
        ar_tps=("autoregressive", "median"), ar_min=("autoregressive", "min"), ar_max=("autoregressive", "max"),
        speedup=("speedup", "median"), speedup_min=("speedup", "min"), speedup_max=("speedup", "max"))
    out["tokens_per_step"] = steps.tokens.sum() / (steps.steps.sum() * out.index.to_series())
    return out.reset_index()


def run_passes(kept: dict, context: int, drafts: bool = True) -> pd.DataFrame:
    """The passes the runs themselves timed (SURFACE_COLUMNS, per model and tokens processed: median, min, max over
    the batch rounds): a batch round's target pass carries its live rows x (the longest proposal + 1) tokens (rows
    padded to one width), its draft passes the live rows' newest token each (``draft_s`` over the round's drafts).
    ``kept``: ``run_load``'s traces by (batch, method); rows stay live from round 0 until they finish. ``drafts``
    False: a model-free drafter, whose lookups are no pass. Round 0 is left out: the prefill's last logits serve its
    pending token, so its pass carries the drafts alone (none for autoregressive decoding: no pass at all)."""
    samples: dict = {}
    for (batch, method), traces in kept.items():
        for run in _runs_of(traces, batch):
            for i in range(1, max(len(t.rounds) for t in run)):  # round 0 feeds no pending token: see above
                live = [t.rounds[i] for t in run if len(t.rounds) > i]
                width = max(len(r.drafted) for r in live) + 1
                samples.setdefault(("target", batch, width, len(live) * width), []).append(live[0].target_s)
                if drafts and width > 1:
                    samples.setdefault(("draft", batch, 1, len(live)), []).append(live[0].draft_s / (width - 1))
    rows = [dict(model=m, batch=b, width=w, tokens=n, context=context, ms=1e3 * statistics.median(s),
                 ms_min=1e3 * min(s), ms_max=1e3 * max(s)) for (m, b, w, n), s in sorted(samples.items())]
    return pd.DataFrame(rows, columns=SURFACE_COLUMNS)


def _runs_of(traces: list, batch: int) -> list[list]:
    """``run_load`` keeps each run's ``batch`` traces one after another: split them back into runs."""
    return [traces[i:i + batch] for i in range(0, len(traces), batch)]


def acceptance_rates(traces, k: int) -> list[float]:
    """Per-position acceptance (P(draft i accepted | the drafts before it were)) over these runs' rounds."""
    rates = positional_rates(r for t in traces for r in t.rounds)
    return [a / n if n else 0.0 for a, n in (rates.get((i, 0), (0, 0)) for i in range(k))]


def bookkeeping_s(traces_by_method: dict, batch: int) -> float:
    """Seconds per request and step outside the passes (sampling, acceptance, cache upkeep): a batch round's wall
    time less its draft and target passes (each row's Round carries the batch's), over the batch's requests,
    averaged over both methods."""
    per = [r.wall_s - r.draft_s - r.target_s for traces in traces_by_method.values() for t in traces for r in t.rounds]
    return max(statistics.mean(per), 0.0) / batch if per else 0.0


def lookup_s(traces, batch: int) -> float:
    """A model-free drafter's seconds per drafted token and request: the batch rounds' draft time (each row's Round
    carries the batch's, so a round counts once over ``batch`` rows) over the tokens drafted."""
    rounds = [r for t in traces for r in t.rounds]
    drafted = sum(len(r.drafted) for r in rounds)
    return sum(r.draft_s for r in rounds) / batch / drafted if drafted else 0.0


@dataclass(frozen=True)
class Prediction:
    target: gp.StepCost  # fitted from the timed target passes
    draft: gp.DraftCost  # sequential (a draft model's pass fitted from its timed passes) or ngram (its lookups)
    rates: list  # acceptance per position over every batch's runs (each batch is priced at its own requests')
    overhead_s: float  # bookkeeping per request and step, from the same runs
    speedups: list  # the model's speedup at each batch size
    crossover: gp.Crossover
    best_k: list  # (first batch, last batch, best k), k = 0: no speculation


def predict(passes: pd.DataFrame, rates, overhead_s: float, batches, context: int, k: int,
            seconds_each: float = 0.0, per_batch: dict | None = None) -> Prediction:
    """The goodput model fitted on the timed passes, at the measured acceptance and bookkeeping: each batch size at
    ``per_batch[batch]``'s rates where given (its requests' own prompts), else at ``rates``; a drafter without timed
    passes drafts at ``seconds_each`` per token and request (kind "ngram")."""
    fit = {m: _fit(g) for m, g in passes.groupby("model")}
    target = fit["target"]
    draft = gp.DraftCost("sequential", fit["draft"]) if "draft" in fit else gp.DraftCost("ngram",
                                                                                          seconds_each=seconds_each)
    speedups = [gp.speedup(b, context, k, (per_batch or {}).get(b, rates), target, draft, overhead_s) for b in batches]
    ranges = gp.best_k_ranges(batches, context, range(1, MAX_K + 1), rates, target, draft, overhead_s)
    return Prediction(target, draft, list(rates), overhead_s, speedups, gp.crossover(batches, speedups), ranges)


def _fit(passes: pd.DataFrame) -> gp.StepCost:
    """A model's StepCost from its passes; passes of one size only (a draft at one batch size) give no slope: their
    median as the fixed cost."""
    if passes.tokens.nunique() < 2:
        return gp.StepCost(float(passes.ms.median()) / 1e3, 0.0)
    return gp.fit_step_cost(zip(passes.tokens, passes.context, passes.ms / 1e3))


def break_even(prediction: Prediction, batch: int, context: int, k: int) -> dict:
    """A round's parts at ``batch`` requests (seconds, from the fitted model): the verify pass, the drafting, the
    round, a plain step; ``needed``: the tokens a request a round must bring to pay (round / step); ``limit``: the
    same for the next request added (what each added request adds to a round over what it adds to a plain step),
    toward which ``needed`` moves as the batch grows."""
    t, d, over = prediction.target, prediction.draft, prediction.overhead_s
    verify, plain, drafting = t.seconds(batch * (k + 1), context), t.seconds(batch, context), d.seconds(batch, k, context)
    added_round = t.seconds((batch + 1) * (k + 1), context) - verify + d.seconds(batch + 1, k, context) - drafting + over
    added_step = t.seconds(batch + 1, context) - plain + over
    round_s, step_s = verify + drafting + batch * over, plain + batch * over
    return dict(verify=verify, drafting=drafting, round=round_s, plain=plain, step=step_s, needed=round_s / step_s,
                limit=added_round / added_step if added_step > 0 else float("inf"))


def why_none(measured: gp.Crossover, prediction: Prediction, summary: pd.DataFrame, context: int, k: int) -> str:
    """Why the run shows no crossover in range, in words read from its numbers ("" when it shows one, or pays only
    at larger batches): at the batch where speculation is likeliest to change side (the smallest when it never
    paid, the largest when it always did), the round's parts, the tokens a request it brought and the tokens a
    request that would have paid; then which way that break-even moves as requests are added."""
    if measured.verdict not in ("never pays", "pays throughout"):
        return ""
    row = summary.iloc[0] if measured.verdict == "never pays" else summary.iloc[-1]
    b, tau = int(row.batch), float(row.tokens_per_step)
    e = break_even(prediction, b, context, k)
    parts = (f"a round took {1e3 * e['round']:.1f} ms (verifying {b} x {k + 1} tokens {1e3 * e['verify']:.1f} ms, "
             f"{e['verify'] / e['plain']:.2f} times a plain pass of {b}; drafting {1e3 * e['drafting']:.1f} ms, "
             f"{e['drafting'] / e['round']:.0%} of the round) and brought {tau:.2f} tokens a request, where "
             f"{e['needed']:.2f} would pay for it")
    rises = e["limit"] > e["needed"]
    trend = (f"Each request added to the batch {'raises' if rises else 'lowers'} that break-even, toward "
             f"{e['limit']:.2f} tokens a request (" + ("a verify pass grows by k + 1 tokens a request, a plain step "
                                                       "by one" if rises else "the fixed part of a pass is shared by "
                                                       "more requests") + ")")
    beyond = e["limit"] > tau  # past the range, a round's tokens a request stay below the break-even
    if (tau >= e["needed"]) == (measured.verdict == "never pays"):  # the fitted passes disagree with the clock
        return (f"{'Speculation lost' if measured.verdict == 'never pays' else 'Speculation still paid'} at batch "
                f"{b}: {parts}, so by the passes the runs timed it should have "
                + ("paid" if tau >= e["needed"] else "lost") + ": the runs' own rounds cost "
                + ("more" if tau >= e["needed"] else "less") + " than their passes and bookkeeping add up to (other "
                "work on the host between passes, or bookkeeping a speculative round has and a plain step has not). "
                + trend + ".")
    if measured.verdict == "never pays":
        return (f"Speculation lost even at batch {b}, the smallest measured: {parts}. {trend}: "
                + ("larger batches only widen the gap." if rises else
                   "larger batches do not make it pay either." if beyond else
                   f"it may pay at larger batches, once the break-even falls below {tau:.2f}."))
    return (f"Speculation still paid at batch {b}, the largest measured: {parts}. {trend}: "
            + (f"it stops paying at a larger batch, once the break-even passes {tau:.2f}." if beyond else
               "at these rates it keeps paying at larger batches."))


@dataclass(frozen=True)
class LoadResult:
    runs: pd.DataFrame  # RUN_COLUMNS, one row per (batch, method, repeat)
    passes: pd.DataFrame  # SURFACE_COLUMNS: the timed passes
    summary: pd.DataFrame  # per batch: tokens/s both ways and the speedup with their ranges, the model's speedup
    measured: gp.Crossover
    prediction: Prediction
    seconds: float  # the lab's own wall time
    fitted: pd.DataFrame | None = None  # SURFACE_COLUMNS: the runs' own passes, which the model is fitted on


def draft_model(draft):
    """The model a drafter runs (a draft model's passes are timed), or None (n-gram, prompt lookup...)."""
    drafter = as_drafter(draft)
    return drafter.model if isinstance(drafter, ModelDrafter) else None


def run_lab(target, draft, prompts, batches=BATCHES, context: int = 128, k: int = 4, new_tokens: int = 16,
            repeats: int = 2, check=None, sep: list[int] = ()) -> LoadResult:
    """The timed passes, then the runs, then the model fitted on the first and compared with the second."""
    start = time.perf_counter()
    batches = check_setting(target, batches, context, k, new_tokens, repeats)
    cfg = DecodeConfig(k=k, k_policy="fixed", temperature=0.0, max_new_tokens=new_tokens, record=False)
    passes = surface(target, draft_model(draft), prompts, batches, context, k, repeats, check, sep)
    runs, kept = run_load(target, draft, prompts, batches, context, cfg, repeats, check, sep)
    first = {m: kept[batches[0], m] for m in ("speculative", "autoregressive")}
    per_batch = {b: acceptance_rates(kept[b, "speculative"], k) for b in batches}
    pooled = acceptance_rates([t for b in batches for t in kept[b, "speculative"]], k)
    fitted = run_passes(kept, context, draft_model(draft) is not None)
    prediction = predict(fitted, pooled, bookkeeping_s(first, batches[0]), batches, context, k,
                         lookup_s(first["speculative"], batches[0]), per_batch)
    summary = summarize(runs)
    summary["model_speedup"] = prediction.speedups
    measured = gp.crossover(batches, list(summary.speedup))
    return LoadResult(runs, passes, summary, measured, prediction, time.perf_counter() - start, fitted)


def estimate(target, draft, prompts, batches, context: int, k: int, new_tokens: int, repeats: int,
             sep: list[int] = ()) -> Estimate:
    """Seconds ``run_lab`` will take, from a pilot at batch 1: its prefill, its target passes of 1 and k + 1 tokens
    and the draft model's pass (none for a model-free drafter), timed three times, priced through the goodput
    model at every batch (acceptance taken as half; the range: acceptance all and the pilot's fastest passes, to
    acceptance none and its slowest)."""
    batches = check_setting(target, batches, context, k, new_tokens, repeats)
    rows, model = at_context(prompts, context, 1, sep), draft_model(draft)
    t_pass = pass_timer(target, rows)
    d_pass = pass_timer(model, rows) if model is not None else None
    t_pass(1), d_pass and d_pass(1)
    ones, wides, drafts = zip(*[(t_pass(1), t_pass(k + 1), d_pass(1) if d_pass else 0.0) for _ in range(3)])
    prefill = t_pass.prefill_s + (d_pass.prefill_s if d_pass else 0.0)

    def price(pick, alpha: float) -> float:
        tgt = gp.fit_step_cost([(1, context, pick(ones)), (k + 1, context, max(pick(wides), pick(ones) * 1.0001))])
        dft = gp.StepCost(max(pick(drafts), 1e-9), 0.0)
        tau = gp.chain_tokens([alpha] * k)
        total = 0.0
        for b in batches:
            passes = sum(tgt.seconds(b * w, context) for w in range(1, k + 2)) + dft.seconds(b)
            spec = new_tokens / tau * (tgt.seconds(b * (k + 1), context) + k * dft.seconds(b))
            total += 2 * b * prefill + (repeats + 1) * passes + repeats * (3 * b * prefill + spec
                                                                            + new_tokens * tgt.seconds(b, context))
        return total

    return Estimate(price(statistics.median, 0.5), price(min, 1.0), price(max, 0.0))


def report(result: LoadResult) -> str:
    """The summary as text, the crossovers side by side."""
    lines = [result.summary.round(3).to_string(index=False)]
    m, p = result.measured, result.prediction.crossover
    lines.append(f"crossover measured: {m.batch or '-'} ({m.verdict}); the model's: {p.batch or '-'} ({p.verdict})")
    lines.append("best k per batch (model): " + ", ".join(f"{lo}-{hi}: k = {k}" for lo, hi, k in
                                                          result.prediction.best_k))
    t = result.prediction.target
    lines.append(f"target pass: {1e3 * t.fixed:.3g} ms + {1e3 * t.per_token:.3g} ms a token; bookkeeping "
                 f"{1e3 * result.prediction.overhead_s:.3g} ms a request and step; acceptance per position "
                 + ", ".join(f"{r:.2f}" for r in result.prediction.rates))
    return "\n".join(lines)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m specviz.labs.load", description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", default="target")
    ap.add_argument("--draft", default="lite")
    ap.add_argument("--batches", type=int, nargs="+", default=list(BATCHES))
    ap.add_argument("--context", type=int, default=128)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--new-tokens", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    target, draft, tok = load_pair(args.target, args.draft)
    prompts = [tok(p).input_ids for p in EXAMPLE_PROMPTS]
    result = run_lab(target, draft, prompts, args.batches, args.context, args.k, args.new_tokens, args.repeats,
                     sep=tok("\n").input_ids)
    print(f"{args.target} + {args.draft}, k={args.k}, context {args.context}, {args.new_tokens} new tokens, "
          f"{args.repeats} repeats, {torch.get_num_threads()} threads, {result.seconds:.0f} s\nforward: {forward_used(target)}")
    print(report(result))


if __name__ == "__main__":
    main()
