"""Does the engine advice pick the k the k sweep measures? On the bundled pair, greedy, the example prompts.

    python scripts/measure/advice_vs_sweep.py [--target target] [--draft lite] [--k-max 10] [--max-new-tokens 64]
                                              [--repeats 2] [--hw-repeats 7] [--threads 0]

specviz.labs.advice_check: the k sweep (k = 1..k-max, the autoregressive baseline interleaved) gives the measured
best k; its runs at the largest k, read as an engine's run (specviz.engines.specviz_trace), and the hardware lab's
measured CostModel (v(n) for n = 1..k-max + 1, c) give the advice's best k, from the i.i.d. fit and from the
measured per-position curve. The verdict: both within one step of the measured best k. On a host shared with
other work, --threads 1: with two threads and both cores contended the timings are the scheduler's, not the model's.
"""
import argparse
import time

import torch

from specviz.config import EXAMPLE_PROMPTS, DecodeConfig
from specviz.labs.advice_check import advice_check
from specviz.labs.hardware import table_text
from specviz.models import load_pair

SWEEP_COLUMNS = ["k", "acceptance_rate", "tau", "speedup", "speedup_median", "speedup_min", "speedup_max", "c", "v",
                 "speedup_theory"]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="target")
    ap.add_argument("--draft", default="lite")
    ap.add_argument("--k-max", type=int, default=10)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=2, help="sweep repeats (each: every prompt, baseline and k)")
    ap.add_argument("--hw-repeats", type=int, default=7, help="the hardware lab's repeats")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    target, draft, tok = load_pair(args.target, args.draft)
    prompts = [tok(p, return_tensors="pt").input_ids for p in EXAMPLE_PROMPTS]
    cfg = DecodeConfig(temperature=0.0, max_new_tokens=args.max_new_tokens, seed=0)
    print(f"{args.target} + {args.draft}, greedy, {len(prompts)} example prompts x {args.max_new_tokens} tokens, "
          f"k = 1..{args.k_max}, {args.repeats} sweep repeats, {torch.get_num_threads()} threads", flush=True)
    start = time.time()
    check = advice_check(target, draft, prompts, range(1, args.k_max + 1), cfg, args.repeats, args.hw_repeats,
                         args.draft)
    hw = check.hardware
    print(f"\n== the k sweep (measured; {time.time() - start:.0f} s with the rest) ==")
    print(check.summary[SWEEP_COLUMNS].round(3).to_string(index=False))
    print(f"\n== the hardware lab: v(n) and c ({args.hw_repeats} repeats, interleaved) ==\n{table_text(hw)}")
    print("\n".join(f"  {n}" for n in hw.cost.notes))
    run = check.run
    print(f"\n== the sweep's runs at k = {args.k_max} as an engine run ({run.source}) ==")
    print(f"steps {run.steps}, drafted {run.drafted}, accepted {run.accepted}, accepted per position "
          f"{', '.join(map(str, run.accepted_per_pos))}")
    print(f"\n== the advice under the measured CostModel ==\n{check.advice.table.to_string(index=False)}")
    print("\n".join(f"  {n}" for n in check.advice.notes))
    print(f"\nverdict: {check.verdict()}")


if __name__ == "__main__":
    main()
