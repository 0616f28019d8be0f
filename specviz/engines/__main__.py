"""python -m specviz.engines FILE... : read an engine's run, print its counts, what the doctor finds and the k to
run with.

  python -m specviz.engines vllm.log --c 0.05
  python -m specviz.engines before.prom after.prom --cost llama-bench.json
  python -m specviz.engines greedy.jsonl sampled.jsonl --separate --temperature 0 --temperature 0.7 --c 0.1
  python -m specviz.engines dflash.log --drafter block --c 0.3
Several files are one run (parts of a log, two scrapes) unless --separate reads each as its own run (runs to
compare, such as greedy against sampled).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import DRAFTERS, CostModel, advice_text, advise, cost_from_llama_bench, diagnose, parse_verify, rates, read_engine_run
from .run import count_fields


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m specviz.engines", description=__doc__.split("\n\n")[0])
    p.add_argument("files", nargs="+", help="engine output: log, /metrics scrape, responses (JSON/JSONL/SSE), trace")
    p.add_argument("--separate", action="store_true", help="read each file as its own run")
    p.add_argument("--temperature", type=float, action="append",
                   help="sampling temperature of each run, where its format does not say (repeat per run)")
    p.add_argument("--model", help="the model to read from a scrape holding several")
    p.add_argument("--cost", help="llama-bench output (JSON, JSONL, CSV or its markdown table) for c and v(n)")
    p.add_argument("--c", type=float, help="a draft step over a target forward")
    p.add_argument("--v", help="verify cost: one number, or rows:cost pairs like 1:1,2:1.05,8:1.3")
    p.add_argument("--drafter", choices=sorted(DRAFTERS), default=None,
                   help="how the draft proposes its k tokens (prices the advice): " + "; ".join(
                       f"{kind}: {how}" for kind, how in DRAFTERS.items()))
    return p


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    try:
        runs = read_runs(args)
        cost = cost_model(args)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    for run in runs:
        print(run_text(run))
    print("\nfindings:")
    for finding in diagnose(runs if len(runs) > 1 else runs[0], cost, drafter=args.drafter):
        print(f"  [{finding.severity}] {finding.code}: {finding.text}")
    if cost is None:
        print("\n(no cost model: give --c [--v] or --cost llama-bench output for the advice)")
        return 0
    for run in runs:
        try:
            advice = advise(run, cost, drafter=args.drafter)
        except ValueError as error:
            print(f"\nno advice for {run.source}: {error}")
            continue
        print(f"\nadvice for {run.source}:\n{advice.table.to_string(index=False)}\n{advice_text(advice)}")
    return 0


def read_runs(args) -> list:
    temperatures = args.temperature or []
    files = [Path(f) for f in args.files]
    groups = [[f] for f in files] if args.separate else [files]
    if temperatures and len(temperatures) != len(groups):
        raise ValueError(f"{len(temperatures)} temperatures for {len(groups)} runs: give one per run")
    return [read_engine_run(group if len(group) > 1 else group[0], model=args.model,
                            temperature=temperatures[i] if temperatures else None) for i, group in enumerate(groups)]


def cost_model(args) -> CostModel | None:
    if args.cost:
        return cost_from_llama_bench(args.cost, c=args.c)
    if args.c is None:
        if args.v:
            raise ValueError("--v needs --c (the draft step's cost) too")
        return None
    return CostModel(c=args.c, verify=parse_verify(args.v) if args.v else ((1, 1.0),), source="given")


def run_text(run) -> str:
    counts = ", ".join(f"{name} {getattr(run, name)}" for name in count_fields() if getattr(run, name) is not None)
    lines = [f"format: {run.source}", f"counts: {counts}"]
    if run.accepted_per_pos is not None:
        lines.append(f"accepted per position: {', '.join(map(str, run.accepted_per_pos))}")
    if run.temperature is not None:
        lines.append(f"temperature: {run.temperature:g}")
    if run.series:
        lines.append(f"series: {len(run.series)} intervals (requests, log lines or scrapes), in order")
    lines += [f"{r.name}: {r.value:.4g}  ({r.definition})" for r in rates(run) if "position" not in r.name]
    lines += [f"note: {n}" for n in run.notes]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
