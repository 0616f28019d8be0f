"""Batched decoding on the two forwards side by side: transformers' DynamicCache ("dynamic", what batches ran on
before) and the lean forward's C layers ("lean-c", one C call a pass for every row: ``specviz.runtime.batch_lean``),
batched autoregressive and speculative tokens/s at each batch size, ratios taken within one run.

    python scripts/measure/batched_lean.py [--batches 1 2 4 8 16] [--context 128] [--k 4] [--new-tokens 32]
                                           [--repeats 2] [--target target] [--draft lite]

Each request is an example prompt (cycled to fill the batch) after natural text from the other prompts up to
``--context`` tokens. Greedy decoding; tokens/s is every request's new tokens over the batch's decoding seconds (its
prefill excluded, as the Load lab counts). Per repeat and batch size the four runs (2 forwards x 2 methods) go in a
rotating order, so load from other work falls on all alike; each ratio is taken within its repeat and the median
over repeats printed, with the tokens/s medians and ranges. Every lean run's text is compared with its dynamic
twin's (the same greedy decode on other kernels: a difference would be a near-tie rounded the other way).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
from contextlib import contextmanager
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from hostline import host_line, load_average  # noqa: E402
from timings import spread  # noqa: E402

from specviz import DecodeConfig  # noqa: E402
from specviz.batch import autoregressive_generate_batch, speculative_generate_batch  # noqa: E402
from specviz.config import EXAMPLE_PROMPTS  # noqa: E402
from specviz.models import load_pair  # noqa: E402
from specviz.runtime import lm  # noqa: E402

FORWARDS = ("dynamic", "lean-c")
METHODS = ("autoregressive", "speculative")


@contextmanager
def forward(name: str):
    """Batches on ``name``: "dynamic" by SPECVIZ_FORWARD=dynamic (BatchLM stays on the DynamicCache), "lean-c" by
    the default."""
    before = os.environ.pop(lm.PATH_ENV, None)
    if name == "dynamic":
        os.environ[lm.PATH_ENV] = "dynamic"
    try:
        yield
    finally:
        os.environ.pop(lm.PATH_ENV, None)
        if before is not None:
            os.environ[lm.PATH_ENV] = before


def requests(prompts: list[list[int]], context: int, size: int) -> list[torch.Tensor]:
    """``size`` requests of ``context`` tokens: prompt i % n after the other prompts' text, cycled."""
    out = []
    for i in range(size):
        j = i % len(prompts)
        pool = [t for p in prompts[j + 1:] + prompts[:j] for t in p]
        need = max(context - len(prompts[j]), 0)
        out.append(torch.tensor([((pool * (need // len(pool) + 1))[-need:] if need else []) + prompts[j][-context:]]))
    return out


def run(target, draft, ids, method: str, cfg: DecodeConfig):
    """(tokens/s of decoding, the traces, the forward the traces say ran)."""
    traces = speculative_generate_batch(target, draft, ids, cfg) if method == "speculative" else \
        autoregressive_generate_batch(target, ids, cfg)
    longest = max(traces, key=lambda t: t.total_s)
    tokens = sum(len(t.new_tokens) for t in traces)
    return tokens / max(longest.total_s - longest.prefill_s, 1e-9), traces, traces[0].forward


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    ap.add_argument("--context", type=int, default=128)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--target", default="target")
    ap.add_argument("--draft", default="lite")
    args = ap.parse_args(argv)
    print(f"# {host_line()}; torch {torch.__version__}")
    print(f"# python scripts/measure/batched_lean.py {' '.join(sys.argv[1:] if argv is None else argv)}")
    target, draft, tok = load_pair(args.target, args.draft)
    prompts = [tok(p).input_ids for p in EXAMPLE_PROMPTS]
    cfg = DecodeConfig(k=args.k, max_new_tokens=args.new_tokens, temperature=0, record=False)
    combos = [(f, m) for f in FORWARDS for m in METHODS]
    for f, m in combos:  # warm-up: first calls allocate, the C layers build and time their thread counts
        with forward(f):
            run(target, draft, requests(prompts, args.context, 2), m, cfg)
    tps = {(b, f, m): [] for b in args.batches for f, m in combos}
    differ = {b: 0 for b in args.batches}
    for rep in range(args.repeats):
        for i, batch in enumerate(args.batches):
            ids, texts = requests(prompts, args.context, batch), {}
            shift = (rep + i) % len(combos)
            for f, m in combos[shift:] + combos[:shift]:
                with forward(f):
                    speed, traces, ran = run(target, draft, ids, m, cfg)
                assert ran == f, f"asked for {f}, the trace says {ran}"
                tps[batch, f, m].append(speed)
                texts[f, m] = [t.new_tokens for t in traces]
                print(f"#   repeat {rep} batch {batch:2d} {f:7s} {m:14s} {speed:8.1f} tokens/s", flush=True)
            differ[batch] += sum(a != b for m in METHODS for a, b in zip(texts["dynamic", m], texts["lean-c", m]))
    print(f"# load average at the end {load_average()}")
    print(table(args.batches, tps, differ, args.repeats))


def table(batches, tps: dict, differ: dict, repeats: int) -> str:
    """The Markdown table: tokens/s medians [min-max] and the ratios, each repeat's own, median over repeats."""
    def cell(key):
        return spread(tps[key])

    def ratio(a, b):
        return f"{statistics.median(x / y for x, y in zip(tps[a], tps[b])):.2f}x"

    lines = ["| batch | AR dynamic | AR lean-c | AR lean/dynamic | spec dynamic | spec lean-c | spec lean/dynamic "
             "| spec/AR dynamic | spec/AR lean-c | rows differing |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for b in batches:
        ar_d, ar_l, sp_d, sp_l = ((b, f, m) for m in METHODS for f in FORWARDS)
        lines.append(f"| {b} | {cell(ar_d)} | {cell(ar_l)} | {ratio(ar_l, ar_d)} | {cell(sp_d)} | {cell(sp_l)} | "
                     f"{ratio(sp_l, sp_d)} | {ratio(sp_d, ar_d)} | {ratio(sp_l, ar_l)} | {differ[b]} of {2 * b * repeats} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
