"""The two feature drafts of the bundled target side by side in one run: ``target+eagle`` (EAGLE-1 shape: the
target's last hidden state, stored beside it) and ``target-eagle3`` (EAGLE-3 in the speculators layout: three tapped
layers, a pruned draft vocabulary), against the engine-grade baseline ``ours-ar``, greedy and sampled.

    python scripts/measure/eagle_vs_eagle3.py --threads 2 --prompts heldout --temperatures 0 0.8 --repeats 2

Per temperature, repeat and prompt the three methods run in a rotated order (``bench.run_order``) so that machine
noise falls on all alike. Per draft: acceptance (accepted / drafted), tokens per step (new tokens per target
verify round), target passes per token, tokens/s and the speedup over ours-ar's tokens/s in the same run; greedy
runs also compare their text with ours-ar's. The EAGLE-3 draft reads three of the target's layers, which specviz's
lean forward does not keep: its tap runs the target's transformers forward a second time over each round's new
tokens (``drafts.trained.tap``), a cost an engine that keeps those states does not pay.
"""
from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from specviz.config import DecodeConfig  # noqa: E402
from specviz.decoder import autoregressive_generate, speculative_generate  # noqa: E402
from specviz.labs.bench import Tally, common_args, run_order, target_and_prompts  # noqa: E402
from specviz.models import drafter_for  # noqa: E402
from specviz.trace import Trace  # noqa: E402

DRAFTS = ("target+eagle", "target-eagle3")


def methods(target, drafts: dict, cfg: DecodeConfig) -> dict:
    """name -> function(ids, seed) -> Trace: the baseline and one speculative run per draft."""
    fns = {"ours-ar": lambda ids, seed: autoregressive_generate(target, ids, replace(cfg, seed=seed))}
    for name, draft in drafts.items():
        fns[name] = lambda ids, seed, d=draft: speculative_generate(target, d, ids, replace(cfg, seed=seed))
    return fns


@torch.inference_mode()
def run(target, drafts: dict, prompts, cfg: DecodeConfig, repeats: int) -> dict[str, Tally]:
    fns = methods(target, drafts, cfg)
    for fn in fns.values():  # warm-up: first calls allocate
        fn(prompts[0], 0)
    tallies = {name: Tally() for name in fns}
    for rep in range(repeats):
        for i, ids in enumerate(prompts):
            texts = {}
            for name in run_order(list(fns), rep + i):
                t0 = time.perf_counter()
                trace: Trace = fns[name](ids, rep)
                tallies[name].add(len(trace.new_tokens), time.perf_counter() - t0, trace.counts())
                texts[name] = trace.new_tokens
            if cfg.greedy:
                for name in drafts:
                    tallies[name].compared += 1
                    tallies[name].differing += texts[name] != texts["ours-ar"]
    return tallies


def rows(tallies: dict[str, Tally], temperature: float) -> list[str]:
    base = tallies["ours-ar"].tokens_per_s
    out = [f"| ours-ar | {temperature:g} | - | 1.00 | 1.000 | {base:.1f} | 1.00x | - |"]
    for name, t in tallies.items():
        if name == "ours-ar":
            continue
        c = t.counts
        same = f"{t.compared - t.differing} of {t.compared}" if t.compared else "-"
        out.append(f"| {name} | {temperature:g} | {c.acceptance_rate:.3f} | {c.tau:.2f} | "
                   f"{c.target_forwards_per_token:.3f} | {t.tokens_per_s:.1f} | {t.tokens_per_s / base:.2f}x | {same} |")
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    common_args(ap, max_new_tokens=64, repeats=2, threads=2)
    ap.add_argument("--temperatures", type=float, nargs="+", default=[0.0, 0.8])
    ap.add_argument("--drafts", nargs="+", default=list(DRAFTS))
    ap.set_defaults(prompts="heldout")
    args = ap.parse_args(argv)
    target, _, prompts = target_and_prompts(args)
    drafts = {name: drafter_for(target, args.target, name, device=args.device) for name in args.drafts}
    print(f"target={args.target} drafts={' '.join(args.drafts)} k={args.k} max_new_tokens={args.max_new_tokens} "
          f"repeats={args.repeats} prompts={args.prompts} ({len(prompts)}) threads={torch.get_num_threads()}",
          flush=True)
    table = ["| method | T | acceptance | tokens per step | target passes per token | tokens/s | vs ours-ar "
             "| greedy text == ours-ar |", "|---|---|---|---|---|---|---|---|"]
    for temperature in args.temperatures:
        cfg = DecodeConfig(k=args.k, temperature=temperature, max_new_tokens=args.max_new_tokens)
        table += rows(run(target, drafts, prompts, cfg, args.repeats), temperature)
        print("\n".join(table[-len(drafts) - 1:]), flush=True)
    print("\n".join(table))


if __name__ == "__main__":
    main()
