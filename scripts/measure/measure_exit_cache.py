"""An early exit with its own key/value cache against the same exit sharing the target's (``specviz.drafts.self_drafts``),
side by side in one run: tokens/s against the autoregressive baseline, prefill, draft time per round, and the
key/value cache each run's draft holds of its own.

    python scripts/measure/measure_exit_cache.py [--exits target@6 target@12 target@4+adapter] [--lengths 64 256]
                                         [--repeats 2] [--threads 2]

On the 5 example and 5 held-out prompts, greedy and at T = 0.8, k = 4; the three runs of a prompt are interleaved
(baseline, shared, own) so that a noisy machine slows them alike. Both runs of an exit draft the same tokens (a
test pins that), so the difference is the cache alone.
"""
import argparse
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import specviz  # noqa: E402
from specviz.decoder import Decoding  # noqa: E402
from specviz.drafts.early_exit import load_exit, parse  # noqa: E402
from specviz.drafts.self_drafts import ExitDrafter  # noqa: E402
from specviz.models import ASSETS  # noqa: E402


def run(target, drafter, prompt, cfg):
    d = Decoding(target, drafter, prompt, cfg)
    trace = d.run()
    draft_s = sum(r.draft_s for r in trace.rounds)
    kv = d.drafter.cache_bytes() if d.drafter is not None else 0
    return dict(s=trace.total_s, prefill=trace.prefill_s, tokens=len(trace.new_tokens), rounds=len(trace.rounds),
                draft_s=draft_s, kv=kv, out=trace.new_tokens)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--exits", nargs="+", default=["target@6", "target@12", "target@4+adapter"])
    ap.add_argument("--lengths", type=int, nargs="+", default=[64, 256])
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--temperatures", type=float, nargs="+", default=[0.0, 0.8])
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    target, tok = specviz.load_model(specviz.DEFAULT_TARGET)
    prompts = [tok(p, return_tensors="pt").input_ids for p in specviz.EXAMPLE_PROMPTS + specviz.config.HELDOUT_PROMPTS]
    print(f"threads={torch.get_num_threads()} prompts={len(prompts)} repeats={args.repeats} k={args.k}")
    print("| exit | T | tokens | speedup shared | speedup own | shared / own | prefill shared / own (ms) "
          "| draft per round shared / own (ms) | draft KV cache shared / own (KiB) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name in args.exits:
        exit_model = load_exit(target, ASSETS / specviz.DEFAULT_TARGET, parse(name))  # on this very target
        for temperature in args.temperatures:
            for n in args.lengths:
                cfg = specviz.DecodeConfig(k=args.k, temperature=temperature, max_new_tokens=n)
                rows = {"base": [], "shared": [], "own": []}
                for _ in range(args.repeats):
                    for prompt in prompts:
                        rows["base"].append(run(target, None, prompt, cfg))
                        rows["shared"].append(run(target, ExitDrafter(exit_model, name), prompt, cfg))
                        rows["own"].append(run(target, ExitDrafter(exit_model, name, shared=False), prompt, cfg))
                        if temperature == 0:  # the same drafts: the same output (sampled, float rounding in
                            assert rows["shared"][-1]["out"] == rows["own"][-1]["out"]  # the caches may tip a draw)
                tps = {k: sum(r["tokens"] for r in v) / sum(r["s"] for r in v) for k, v in rows.items()}
                pre = {k: 1000 * statistics.median(r["prefill"] for r in v) for k, v in rows.items()}
                per = {k: 1000 * sum(r["draft_s"] for r in v) / sum(r["rounds"] for r in v) for k, v in rows.items()}
                kv = {k: max(r["kv"] for r in v) / 1024 for k, v in rows.items()}
                print(f"| {name} | {temperature:g} | {n} | {tps['shared'] / tps['base']:.2f}x | "
                      f"{tps['own'] / tps['base']:.2f}x | {tps['shared'] / tps['own']:.3f} | {pre['shared']:.1f} / "
                      f"{pre['own']:.1f} | {per['shared']:.2f} / {per['own']:.2f} | {kv['shared']:.0f} / "
                      f"{kv['own']:.0f} |", flush=True)


if __name__ == "__main__":
    main()
