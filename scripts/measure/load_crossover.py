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
"""
import argparse
import os
import time
from pathlib import Path

import torch

from specviz import goodput as gp
from specviz.config import EXAMPLE_PROMPTS, DecodeConfig
from specviz.labs import load
from specviz.models import load_pair


def host() -> str:
    """CPU model, logical CPUs, the load average as the run starts."""
    names = [line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
             if line.startswith("model name")] if Path("/proc/cpuinfo").exists() else []
    return (f"{names[0] if names else 'unknown CPU'}, {os.cpu_count()} logical CPUs, load average "
            + " ".join(f"{x:.2f}" for x in os.getloadavg()))


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


def table(summary, prediction: load.Prediction) -> str:
    lines = ["batch  spec tok/s (range)       AR tok/s (range)         speedup (range)      model  tokens/step"]
    for (_, r), model in zip(summary.iterrows(), prediction.speedups):
        lines.append(f"{int(r.batch):>5}  {r.spec_tps:7.1f} ({r.spec_min:6.1f}-{r.spec_max:6.1f})  "
                     f"{r.ar_tps:7.1f} ({r.ar_min:6.1f}-{r.ar_max:6.1f})  {r.speedup:5.2f} ({r.speedup_min:4.2f}-"
                     f"{r.speedup_max:4.2f})  {model:5.2f}  {r.tokens_per_step:5.2f}")
    return "\n".join(lines)


def words(c: gp.Crossover) -> str:
    if c.batch is not None:
        return f"batch {c.batch} (paid at {c.last_paying}, not at {c.batch})"
    return {"pays throughout": "none in range: pays at every batch size",
            "never pays": "none in range: pays at no batch size"}.get(c.verdict, c.verdict)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="target")
    ap.add_argument("--draft", default="lite")
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--new-tokens", type=int, default=16)
    ap.add_argument("--context", type=int, default=128)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    target, draft, tok = load_pair(args.target, args.draft)
    prompts, sep = [tok(p).input_ids for p in EXAMPLE_PROMPTS], tok("\n").input_ids
    batches = load.check_setting(target, args.batches, args.context, args.k, args.new_tokens, args.repeats)
    cfg = DecodeConfig(k=args.k, k_policy="fixed", temperature=0.0, max_new_tokens=args.new_tokens, record=False)
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {host()}, "
          f"{torch.get_num_threads()} torch threads; {args.target} + {args.draft}, greedy, k = {args.k}, "
          f"{args.new_tokens} new tokens a request after {args.context} tokens of context, {args.repeats} repeats")
    print(f"batched forward: {load.forward_used(target)}")
    start = time.perf_counter()
    runs, kept = load.run_load(target, draft, prompts, batches, args.context, cfg, args.repeats, sep=sep)
    summary = load.summarize(runs)
    fitted = load.run_passes(kept, args.context)
    first = {m: kept[batches[0], m] for m in ("speculative", "autoregressive")}
    per_batch = {b: load.acceptance_rates(kept[b, "speculative"], args.k) for b in batches}
    pooled = load.acceptance_rates([t for b in batches for t in kept[b, "speculative"]], args.k)
    prediction = load.predict(fitted, pooled, load.bookkeeping_s(first, batches[0]), batches, args.context, args.k,
                              per_batch=per_batch)
    measured = gp.crossover(batches, list(summary.speedup))
    print(f"runs: {time.perf_counter() - start:.0f} s\n")
    print(table(summary, prediction))
    t, d = prediction.target, prediction.draft.step
    print(f"\nfitted on the runs' own passes ({len(fitted)} pass sizes): target {1e3 * t.fixed:.3g} ms + "
          f"{1e3 * t.per_token:.3g} ms a token; draft {1e3 * d.fixed:.3g} ms + {1e3 * d.per_token:.3g} ms a token; "
          f"bookkeeping {1e3 * prediction.overhead_s:.3g} ms a request and step; acceptance per position "
          + ", ".join(f"{r:.2f}" for r in prediction.rates))
    print("best k per batch (model): " + ", ".join(f"{lo}-{hi}: k = {k}" for lo, hi, k in prediction.best_k))
    print(f"\ncrossover measured: {words(measured)}")
    print(f"crossover predicted: {words(prediction.crossover)}")
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


if __name__ == "__main__":
    main()
