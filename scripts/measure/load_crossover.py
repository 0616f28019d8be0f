"""Where does speculation stop paying as requests are batched, measured, and does the goodput model predict it?
The Load lab's measurement as a benchmark, on the bundled pair, greedy:

    python scripts/measure/load_crossover.py [--batches 1 2 4 8 16] [--repeats 3] [--k 4] [--new-tokens 16]
                                             [--context 128] [--threads 0]

specviz.labs.load.run_load: at each batch size, batched speculative and autoregressive decoding (``specviz.batch``
as it is) of the example prompts cycled into the batch, the two methods interleaved (their order alternating each
repeat and batch size), every repeat going through every batch size. Tokens/s of decoding (prefill excluded): the
median and range over repeats; the speedup: each repeat's own ratio (the same moment's load), median and range.
The measured crossover reads the median speedups (``goodput.crossover``), and says whether a range holds 1 there.
The goodput model is fitted on the passes these same runs timed (``load.run_passes``: the target's verify and
plain passes, the draft's passes), with the runs' acceptance per position and the batch-1 runs' bookkeeping; it
never sees the runs' tokens/s. The verdict: the two crossovers within one batch step (a crossover beyond the range
counts as the step after its last batch size, "never pays" as the step before its first).

The context axis (``--contexts``, e.g. ``--contexts 128 256 512 1008 --batches 1 4``): the same runs at each
context (each request's tokens before decoding; at most the target's window less the new tokens), every repeat
going through every context and, within it, every batch size; the goodput model fitted once on all the contexts'
passes (so its KV term, per_kv, is fitted) and priced at each context with that context's acceptance; per batch
size, the context where speculation stops paying, measured and predicted.
"""
import argparse
import shlex
import sys
import time

import pandas as pd
import torch
from hostline import host_line, load_average

from specviz import goodput as gp
from specviz.config import EXAMPLE_PROMPTS, DecodeConfig
from specviz.labs import load
from specviz.models import load_pair


def position(batches: list[int], c: gp.Crossover) -> float | None:
    """Where a crossover lies along the batch sizes, in steps: the index of its batch; "pays throughout": one step
    past the last; "never pays": one step before the first; None: "pays only at larger batches"."""
    if c.batch is not None:
        return batches.index(c.batch)
    return {"pays throughout": len(batches), "never pays": -1}.get(c.verdict)


def undecided(summary, measured: gp.Crossover) -> list[int]:
    """Batch sizes at the measured change whose speedup range holds 1 (the repeats do not agree on the side)."""
    rows = summary.set_index("batch")
    near = [measured.last_paying, measured.batch] if measured.batch else list(rows.index)
    return [b for b in near if b is not None and rows.speedup_min[b] < 1 <= rows.speedup_max[b]]


HEADER = "batch  spec tok/s (range)       AR tok/s (range)         speedup (range)      model  tokens/step"


def row_text(r, model: float) -> str:
    """One batch size's summary row beside the model's speedup."""
    return (f"{int(r.batch):>5}  {r.spec_tps:7.1f} ({r.spec_min:6.1f}-{r.spec_max:6.1f})  "
            f"{r.ar_tps:7.1f} ({r.ar_min:6.1f}-{r.ar_max:6.1f})  {r.speedup:5.2f} ({r.speedup_min:4.2f}-"
            f"{r.speedup_max:4.2f})  {model:5.2f}  {r.tokens_per_step:5.2f}")


def table(summary, prediction: load.Prediction) -> str:
    return "\n".join([HEADER] + [row_text(r, m) for (_, r), m in zip(summary.iterrows(), prediction.speedups)])


def words(c: gp.Crossover, axis: str = "batch") -> str:
    """A crossover in words along ``axis`` (batch sizes, or contexts: ``gp.crossover`` reads any increasing axis)."""
    if c.batch is not None:
        return f"{axis} {c.batch} (paid at {c.last_paying}, not at {c.batch})"
    return {"pays throughout": f"none in range: pays at every {axis} measured",
            "never pays": f"none in range: pays at no {axis} measured"}.get(
                c.verdict, f"loses at the smaller {axis} values and pays from a larger one")


def prediction_of(kept: dict, fitted, batches: list[int], context: int, k: int, model_free: bool) -> load.Prediction:
    """The goodput model on ``fitted`` passes, priced at ``context`` with these runs' acceptance (each batch's own)
    and bookkeeping, as the Load lab prices it (``load.run_lab``)."""
    first = {m: kept[batches[0], m] for m in ("speculative", "autoregressive")}
    per_batch = {b: load.acceptance_rates(kept[b, "speculative"], k) for b in batches}
    pooled = load.acceptance_rates([t for b in batches for t in kept[b, "speculative"]], k)
    each = load.lookup_s(first["speculative"], batches[0]) if model_free else 0.0
    return load.predict(fitted, pooled, load.bookkeeping_s(first, batches[0]), batches, context, k, each, per_batch)


def fit_words(prediction: load.Prediction, passes: int) -> str:
    t, d = prediction.target, prediction.draft
    drafting = (f"draft {1e3 * d.step.fixed:.3g} ms + {1e3 * d.step.per_token:.3g} ms a token" if d.step else
                f"draft lookups {1e6 * d.seconds_each:.3g} us a token and request")
    return (f"fitted on the runs' own passes ({passes} pass sizes): target {1e3 * t.fixed:.3g} ms + "
            f"{1e3 * t.per_token:.3g} ms a token + {1e6 * t.per_kv:.3g} us a token and cached position; {drafting}; "
            f"bookkeeping {1e3 * prediction.overhead_s:.3g} ms a request and step; acceptance per position "
            + ", ".join(f"{r:.2f}" for r in prediction.rates))


def batch_sweep(args, target, draft, prompts, sep, batches, cfg) -> None:
    """Speculative against autoregressive along the batch sizes at one context, and the model's crossover."""
    start = time.perf_counter()
    runs, kept = load.run_load(target, draft, prompts, batches, args.context, cfg, args.repeats, sep=sep)
    summary = load.summarize(runs)
    model_free = load.draft_model(draft) is None
    fitted = load.run_passes(kept, args.context, not model_free)
    prediction = prediction_of(kept, fitted, batches, args.context, args.k, model_free)
    measured = gp.crossover(batches, list(summary.speedup))
    print(f"runs: {time.perf_counter() - start:.0f} s\n")
    print(table(summary, prediction))
    print("\n" + fit_words(prediction, len(fitted)))
    print("best k per batch (model): " + ", ".join(f"{lo}-{hi}: k = {k}" for lo, hi, k in prediction.best_k))
    print(f"\ncrossover measured: {words(measured)}")
    print(f"crossover predicted: {words(prediction.crossover)}")
    why = load.why_none(measured, prediction, summary, args.context, args.k)
    if why:
        print(f"no crossover in range, why (the Load lab's words): {why}")
    hold = undecided(summary, measured)
    if hold:
        print(f"the speedup's range over repeats holds 1 at batch {', '.join(map(str, hold))}: the repeats do not "
              "agree on which side of 1 it lies there")
    apart = [position(batches, c) for c in (measured, prediction.crossover)]
    if None in apart:
        print("verdict: not comparable (a speedup below 1 at small batches and above at larger ones)")
    else:
        steps = abs(apart[0] - apart[1])
        print(f"verdict: {steps:g} batch step(s) apart: " + ("within one batch step" if steps <= 1 else
                                                             "NOT within one batch step"))


def context_runs(target, draft, prompts, sep, batches, contexts, cfg, repeats) -> dict:
    """{context: (runs frame, kept traces)}: every repeat through every context (in a rotated order), each
    context's batch sizes interleaved as ``load.run_load`` does."""
    frames, kept = {c: [] for c in contexts}, {c: {} for c in contexts}
    for rep in range(repeats):
        for i, c in enumerate(contexts[rep % len(contexts):] + contexts[:rep % len(contexts)]):
            runs, got = load.run_load(target, draft, prompts, batches, c, cfg, 1, sep=sep, warm=rep == i == 0,
                                      first_repeat=rep)
            frames[c].append(runs)
            for key, traces in got.items():
                kept[c].setdefault(key, []).extend(traces)
    return {c: (pd.concat(frames[c], ignore_index=True), kept[c]) for c in contexts}


def context_sweep(args, target, draft, prompts, sep, batches, cfg) -> None:
    """Speculative against autoregressive along the contexts at each batch size, and the model's prediction."""
    contexts = sorted(set(args.contexts))
    for c in contexts:
        load.check_setting(target, batches, c, args.k, args.new_tokens, args.repeats)
    start = time.perf_counter()
    measured = context_runs(target, draft, prompts, sep, batches, contexts, cfg, args.repeats)
    model_free = load.draft_model(draft) is None
    fitted = pd.concat([load.run_passes(kept, c, not model_free) for c, (_, kept) in measured.items()],
                       ignore_index=True)
    lines, by_batch = [], {b: ([], []) for b in batches}
    for c, (runs, kept) in measured.items():
        summary, prediction = load.summarize(runs), prediction_of(kept, fitted, batches, c, args.k, model_free)
        for (_, r), model in zip(summary.iterrows(), prediction.speedups):
            by_batch[int(r.batch)][0].append(r.speedup)
            by_batch[int(r.batch)][1].append(model)
            lines.append(f"{c:>7}  {row_text(r, model)}")
    print(f"runs: {time.perf_counter() - start:.0f} s\n")
    print(f"context  {HEADER}")
    print("\n".join(lines))
    print("\n" + fit_words(prediction, len(fitted)) + " (one fit over every context; acceptance shown: the last "
          "context's)")
    for b, (meas, model) in by_batch.items():
        print(f"batch {b}: where speculation stops paying along the context: measured "
              f"{words(gp.crossover(contexts, meas), 'context')}; predicted "
              f"{words(gp.crossover(contexts, model), 'context')}")
        print("  " + context_why(prediction, b, contexts, args.k))


def context_why(prediction: load.Prediction, batch: int, contexts: list[int], k: int) -> str:
    """Which way the break-even (tokens a request a round must bring to pay) moves along the contexts, from the
    fit: the KV reads grow a verify pass k + 1 times as fast as a plain step."""
    first, last = (load.break_even(prediction, batch, c, k) for c in (contexts[0], contexts[-1]))
    way = ("rises" if last["needed"] > first["needed"] else "falls" if last["needed"] < first["needed"]
           else "stays")
    return (f"the break-even {way} from {first['needed']:.2f} tokens a request at context {contexts[0]} to "
            f"{last['needed']:.2f} at {contexts[-1]} (a verify pass {first['verify'] / first['plain']:.2f} -> "
            f"{last['verify'] / last['plain']:.2f} plain passes; drafting {first['drafting'] / first['round']:.0%} -> "
            f"{last['drafting'] / last['round']:.0%} of a round)")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="target")
    ap.add_argument("--draft", default="lite")
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--new-tokens", type=int, default=16)
    ap.add_argument("--context", type=int, default=128)
    ap.add_argument("--contexts", type=int, nargs="+", help="sweep these contexts at each of --batches")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    target, draft, tok = load_pair(args.target, args.draft)
    prompts, sep = [tok(p).input_ids for p in EXAMPLE_PROMPTS], tok("\n").input_ids
    batches = load.check_setting(target, args.batches, args.context, args.k, args.new_tokens, args.repeats)
    cfg = DecodeConfig(k=args.k, k_policy="fixed", temperature=0.0, max_new_tokens=args.new_tokens, record=False)
    where = (f"contexts {', '.join(map(str, sorted(set(args.contexts))))}" if args.contexts else
             f"{args.context} tokens of context")
    print(f"{host_line()}; {args.target} + {args.draft}, greedy, k = {args.k}, "
          f"{args.new_tokens} new tokens a request after {where}, {args.repeats} repeats\n"
          f"command: python scripts/measure/load_crossover.py {shlex.join(argv if argv is not None else sys.argv[1:])}")
    print(f"batched forward: {load.forward_used(target)}")
    (context_sweep if args.contexts else batch_sweep)(args, target, draft, prompts, sep, batches, cfg)
    print(f"ended {time.strftime('%H:%M UTC', time.gmtime())}, load average {load_average()}")


if __name__ == "__main__":
    main()
