"""specviz's batched autoregressive decode against llama.cpp's batched decoding of the same f32 weights, interleaved:
is the baseline the Load lab measures speculation against an engine-grade one?

    .venv/bin/python scripts/measure/batched_vs_llamacpp.py [--batches 1 2 4 8 16] [--context 128]
                                                            [--new-tokens 16] [--rounds 3] [--threads 2]

At each batch size B, each round (the batch sizes in a rotated order each round, the two sides alternating which
goes first):
  llama.cpp   llama-batched-bench -m target-f32.gguf -npp CONTEXT -ntg NEW -npl B -t THREADS -tb THREADS: B
              sequences of CONTEXT prompt tokens, then NEW steps of one token for every sequence in one batch; its
              S_TG (B x NEW over the decoding seconds, the prompt excluded); no sampling (random tokens are fed)
  specviz     specviz.batch.autoregressive_generate_batch on the Load lab's rows (``load.at_context``: the example
              prompts cycled, each after text up to CONTEXT tokens), greedy, NEW tokens a request, as
              scripts/measure/load_crossover.py runs it (on runtime.batch_lean's LeanBatchLM where the C layers
              load); every request's new tokens over the batch's decoding seconds (the prefill excluded), the
              sampling and the decoder's bookkeeping included
The ratio specviz / llama.cpp is taken within each round (the same moment's load): its median and range. THREADS
goes to both: llama.cpp's -t/-tb and specviz's torch threads with SPECVIZ_THREADS (every C call on that many).
Needs llama-batched-bench (scripts/measure/build_llamacpp.sh builds it) and the GGUF of llamacpp_convert.py. Run by
hand, never in CI: it prints; the log goes in docs/benchmarks/.
"""
from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[1]), str(HERE)]

from llamacpp_convert import default_llama_cpp  # noqa: E402
from timings import spread  # noqa: E402


def llama_batched(bin_dir: Path, gguf: Path, batch: int, context: int, new: int, threads: int) -> float:
    """llama-batched-bench's S_TG (decoding tokens/s of all B sequences) at one batch size."""
    from specviz.engines.llamacpp_load import read_batched_bench

    per_sequence = -(-(context + new) // 256) * 256  # llama.cpp pads a context to 256 cells and splits it per sequence
    cmd = [str(bin_dir / "llama-batched-bench"), "-m", str(gguf), "-c", str(batch * per_sequence), "-b", "2048",
           "-ub", "512", "-npp", str(context), "-ntg", str(new), "-npl", str(batch), "-t", str(threads), "-tb",
           str(threads)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    rows = [r for r in read_batched_bench(out) if r["batch"] == batch]
    if len(rows) != 1:
        raise SystemExit(f"llama-batched-bench printed no row at B = {batch}:\n{out}")
    return rows[0]["s_tg"]


def ours(target, prompts, sep, batch: int, context: int, cfg) -> float:
    """specviz's batched autoregressive tokens/s at one batch size, as the Load lab measures it."""
    from specviz.batch import autoregressive_generate_batch
    from specviz.labs import load

    traces = autoregressive_generate_batch(target, load.at_context(prompts, context, batch, sep), cfg)
    return load.decode_row(batch, "autoregressive", 0, traces)["tokens_per_s"]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    ap.add_argument("--context", type=int, default=128)
    ap.add_argument("--new-tokens", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--gguf", type=Path, default=Path("/work/ext/gguf/target-f32.gguf"))
    ap.add_argument("--llama-cpp", type=Path, default=default_llama_cpp())
    args = ap.parse_args(argv)
    os.environ["SPECVIZ_THREADS"] = str(args.threads)  # read per call by runtime.threads

    import torch
    from hostline import host_line, load_average

    from specviz.config import EXAMPLE_PROMPTS, DecodeConfig
    from specviz.labs import load
    from specviz.models import DEFAULT_TARGET, load_model

    torch.set_num_threads(args.threads)
    bin_dir = args.llama_cpp / "build" / "bin"
    target, tok = load_model(DEFAULT_TARGET, device="cpu")
    prompts, sep = [tok(p).input_ids for p in EXAMPLE_PROMPTS], tok("\n").input_ids
    cfg = DecodeConfig(temperature=0.0, max_new_tokens=args.new_tokens, record=False)
    print(f"{host_line()}; {args.threads} threads both sides; "
          f"{DEFAULT_TARGET} ({args.gguf.name} for llama.cpp), {args.new_tokens} new tokens a request after "
          f"{args.context} tokens, {args.rounds} rounds\ncommand: python scripts/measure/batched_vs_llamacpp.py "
          f"{shlex.join(argv if argv is not None else sys.argv[1:])}\nspecviz forward: {load.forward_used(target)}",
          flush=True)
    ours(target, prompts, sep, 1, args.context, cfg)  # warm-up: first calls allocate
    sides = {"llama.cpp": lambda b: llama_batched(bin_dir, args.gguf, b, args.context, args.new_tokens, args.threads),
             "specviz": lambda b: ours(target, prompts, sep, b, args.context, cfg)}
    got = {(b, s): [] for b in args.batches for s in sides}
    for r in range(args.rounds):
        order = args.batches[r % len(args.batches):] + args.batches[:r % len(args.batches)]
        for i, b in enumerate(order):
            for side in (list(sides) if (r + i) % 2 == 0 else list(sides)[::-1]):
                got[b, side].append(sides[side](b))
        print(f"round {r + 1} done, load average {load_average()}", flush=True)
    print("\n| batch | llama.cpp tok/s | specviz tok/s | specviz / llama.cpp (per round) |\n|---|---|---|---|")
    for b in args.batches:
        ratios = [s / x for s, x in zip(got[b, "specviz"], got[b, "llama.cpp"])]
        print(f"| {b} | {spread(got[b, 'llama.cpp'])} | {spread(got[b, 'specviz'])} | {spread(ratios, '.2f')}x |")
    print("\nmedian [min-max] over rounds; per round:\n" + "\n".join(
        f"B={b} {side}: " + ", ".join(f"{x:.1f}" for x in got[b, side]) for b in args.batches for side in sides))
    print(f"ended {time.strftime('%H:%M UTC', time.gmtime())}, load average {load_average()}")


if __name__ == "__main__":
    main()
