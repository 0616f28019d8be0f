"""The default pair's speedup over the autoregressive baseline on a busy machine: busy loops beside the run, the
speculative run and its baseline interleaved prompt by prompt, each with the thread count chosen per call
(``specviz.runtime.threads``) and, side by side, with every call on torch's full team (``SPECVIZ_THREADS``: what
ran before the choice).

    python scripts/measure/busy_speedup.py [--busy 2] [--threads 2] [--k 6] [--repeats 3] [--modes chosen full]
    python scripts/measure/busy_speedup.py --busy 0     # the same on an idle machine (as idle as the host is)

--busy N starts N ``python -c "while True: pass"`` loops for the whole run (ended at the end, by their ids). Other
work on the host counts too: the load average is printed at the start and the end. For each temperature (greedy,
T = 0.8) and each repeat and held-out prompt, the methods run in a rotating order; tokens/s is all tokens over all
wall time, and the speedup is the spec run's over the baseline's of the same mode. The floor: the chosen threads'
speedup >= 1.8x at both temperatures. At greedy every spec run's text is checked against its baseline's.
"""
from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from hostline import host_line, load_average  # noqa: E402

from specviz import DecodeConfig, autoregressive_generate, speculative_generate  # noqa: E402
from specviz.labs.bench import Tally, common_args, run_order, target_and_prompts  # noqa: E402
from specviz.models import DEFAULT_DRAFT, drafter_for  # noqa: E402
from specviz.runtime import threads  # noqa: E402

FLOOR = 1.8
TEMPERATURES = (0.0, 0.8)


@contextmanager
def busy_loops(count: int):
    """``count`` busy Python loops beside this process, ended (by their ids) when the block ends."""
    loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a kill of this run ends the loops too
    try:
        yield [p.pid for p in loops]
    finally:
        for p in loops:
            p.kill()
            p.wait()


@contextmanager
def mode(name: str):
    """"chosen": each call's threads as ``threads.policy`` chooses; "full": every call on torch's count."""
    before = os.environ.get(threads.ENV)
    if name == "full":
        os.environ[threads.ENV] = str(torch.get_num_threads())
    else:
        os.environ.pop(threads.ENV, None)
    try:
        yield
    finally:
        os.environ.pop(threads.ENV, None)
        if before is not None:
            os.environ[threads.ENV] = before


def calls_by_threads() -> Counter:
    """Calls of the C layers so far, by thread count (from the policy's timings)."""
    out = Counter()
    for t in threads.policy.timings.values():
        out.update(t.calls)
    return out


def methods(target, draft, cfg: DecodeConfig, modes: list[str]) -> dict:
    """name -> (mode, function(ids, seed) -> Trace)."""
    out = {}
    for m in modes:
        out[f"ar-{m}"] = (m, lambda ids, seed: autoregressive_generate(target, ids, replace(cfg, seed=seed)))
        out[f"spec-{m}"] = (m, lambda ids, seed: speculative_generate(target, draft, ids, replace(cfg, seed=seed)))
    return out


def run(target, draft, prompts, cfg: DecodeConfig, repeats: int, modes: list[str]) -> tuple[dict, dict, list]:
    """Every method over every prompt and repeat, interleaved; (tallies, calls by thread count, greedy mismatches)."""
    fns = methods(target, draft, cfg, modes)
    tallies, calls, mismatches = {n: Tally() for n in fns}, {n: Counter() for n in fns}, []
    for name, (m, fn) in fns.items():  # warm-up: first calls allocate, and the policy times its first calls
        with mode(m):
            fn(prompts[0], 0)
    for rep in range(repeats):
        for i, ids in enumerate(prompts):
            texts = {}
            for name in run_order(list(fns), rep * len(prompts) + i):
                m, fn = fns[name]
                before = calls_by_threads()
                with mode(m):
                    t0 = time.perf_counter()
                    trace = fn(ids, rep)
                    seconds = time.perf_counter() - t0
                tallies[name].add(len(trace.new_tokens), seconds)
                calls[name] += calls_by_threads() - before
                texts[name] = trace.new_tokens
            if cfg.greedy:
                mismatches += [(rep, i, m) for m in modes if texts[f"spec-{m}"] != texts[f"ar-{m}"]]
    return tallies, calls, mismatches


def report(tallies: dict, calls: dict, modes: list[str], label: str) -> list[tuple[str, float]]:
    """Prints the methods' table; returns (mode, speedup) per mode."""
    print(f"{'method':<14}{'tokens':>8}{'seconds':>9}{'tok/s':>9}   C calls on 1 / 2+ threads")
    for name, t in tallies.items():
        c = calls[name]
        print(f"{name:<14}{t.tokens:>8}{t.seconds:>9.2f}{t.tokens_per_s:>9.1f}   {c[1]} / {sum(c.values()) - c[1]}")
    out = []
    for m in modes:
        speedup = tallies[f"spec-{m}"].tokens_per_s / tallies[f"ar-{m}"].tokens_per_s
        out.append((m, speedup))
        print(f"{label}: speedup of spec-{m} over ar-{m}: {speedup:.2f}x")
    return out


def main(argv=None) -> bool:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    common_args(ap, max_new_tokens=64, repeats=3, threads=2)
    ap.set_defaults(k=6, prompts="heldout")
    ap.add_argument("--draft", default=DEFAULT_DRAFT)
    ap.add_argument("--busy", type=int, default=2, help="busy loops beside the run (0: none)")
    ap.add_argument("--modes", nargs="+", choices=("chosen", "full"), default=["chosen", "full"])
    args = ap.parse_args(argv)
    if args.busy < 0:
        raise SystemExit("--busy must be 0 or more")
    target, _, prompts = target_and_prompts(args)
    draft = drafter_for(target, args.target, args.draft, device=args.device)
    print(f"host: {host_line()}")
    print(f"target={args.target} draft={args.draft} k={args.k} max_new_tokens={args.max_new_tokens} "
          f"prompts={len(prompts)} ({args.prompts}) repeats={args.repeats} busy loops={args.busy} modes={args.modes}")
    held = True
    with busy_loops(args.busy) as pids:
        time.sleep(1.0)  # the loops up and running
        print(f"start: load average {load_average()}; busy loop pids {pids}; free cores as the policy reads them "
              f"{threads.policy.cores.free():.2f}", flush=True)
        for temperature in TEMPERATURES:
            cfg = DecodeConfig(k=args.k, temperature=temperature, max_new_tokens=args.max_new_tokens)
            label = "greedy" if cfg.greedy else f"T = {temperature:g}"
            print(f"\n{label} (load average {load_average()})", flush=True)
            tallies, calls, mismatches = run(target, draft, prompts, cfg, args.repeats, args.modes)
            for m, speedup in report(tallies, calls, args.modes, label):
                if m == "chosen":
                    held &= speedup >= FLOOR
            if cfg.greedy:
                runs = args.repeats * len(prompts) * len(args.modes)
                print(f"greedy text == the baseline's in {runs - len(mismatches)} of {runs} spec runs")
                held &= not mismatches
        print(f"\nend: load average {load_average()}; free cores as the policy reads them {threads.policy.cores.free():.2f}")
    if "chosen" in args.modes:
        print(f"floor (chosen threads >= {FLOOR}x at both temperatures, greedy text exact): "
              f"{'HOLDS' if held else 'MISSED'}")
    return held


if __name__ == "__main__":
    raise SystemExit(0 if main() else 1)
