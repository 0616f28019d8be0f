"""Benchmark: batched speculative vs batched autoregressive decoding, tokens/s against batch size.

    python -m specviz.labs.batch_bench [--batch-sizes 1 2 4 8] [--k 4] [--max-new-tokens 48] [--repeats 2]

Greedy, the same k for every batch size; prompts are specviz.EXAMPLE_PROMPTS cycled to fill a batch.
The two methods are interleaved (their order alternates each repeat and batch size) so that machine noise
hits both alike. Tokens/s = total generated tokens over total wall time, per method and batch size.
The draft is the bundled default draft LM (DEFAULT_MODEL_DRAFT) if it exists, else the first bundled draft LM, else a stand-in: a
perturbed copy of the target (--standin perturbed) or its first N layers (--standin layers:N).
"""
from __future__ import annotations

import argparse
import copy
import time
from collections.abc import Callable

import pandas as pd
import torch

from ..batch import autoregressive_generate_batch, speculative_generate_batch
from ..config import DecodeConfig
from ..models import DEFAULT_MODEL_DRAFT, list_drafters, list_models, load_model
from ..trace import Counts
from .bench import common_args, target_and_prompts

BATCH_COLUMNS = ["batch_size", "method", "tokens", "seconds", "tokens_per_s", "acceptance_rate"]


def pick_draft(target, standin: str = "perturbed"):
    """(draft model, description): a bundled draft LM if any, else a stand-in built from the target."""
    bundled = [m for m in list_drafters() if m in list_models()]
    if bundled:
        name = DEFAULT_MODEL_DRAFT if DEFAULT_MODEL_DRAFT in bundled else bundled[0]
        return load_model(name, device=str(target.device))[0], f"bundled {name!r}"
    draft = copy.deepcopy(target)
    if standin.startswith("layers:"):  # the target's first N layers, sharing its embeddings and head
        n = int(standin.split(":")[1])
        draft.model.layers = draft.model.layers[:n]
        draft.config.num_hidden_layers = n
        return draft.eval(), f"STAND-IN (no bundled draft LM): the target's first {n} layers"
    torch.manual_seed(1)
    with torch.no_grad():
        for w in draft.parameters():
            w.add_(0.05 * w.std() * torch.randn_like(w))
    return draft.eval(), "STAND-IN (no bundled draft LM): a perturbed copy of the target (0.05 std noise)"


def batch_of(prompts: list[torch.Tensor], size: int) -> list[torch.Tensor]:
    return [prompts[i % len(prompts)] for i in range(size)]


@torch.inference_mode()
def run_batch_bench(target, draft, prompts, cfg: DecodeConfig, sizes=(1, 2, 4, 8), repeats: int = 2,
                    check: Callable[[], None] | None = None) -> pd.DataFrame:
    """The batch frame: one row per (batch size, method) with total tokens, seconds and tokens/s. ``check()`` runs
    before every measurement (each warm-up and each timed batch, outside its timing): a caller's budget or its
    visitor's leaving stops the benchmark there by raising."""
    check = check or (lambda: None)
    fns = {"speculative": lambda ids: speculative_generate_batch(target, draft, ids, cfg),
           "autoregressive": lambda ids: autoregressive_generate_batch(target, ids, cfg)}
    for fn in fns.values():  # warm-up: first calls allocate
        check()
        fn(batch_of(prompts, 2))
    totals = {(size, name): [Counts(), 0.0] for size in sizes for name in fns}  # what the runs did, wall seconds
    for rep in range(repeats):
        for i, size in enumerate(sizes):
            names = list(fns) if (rep + i) % 2 == 0 else list(fns)[::-1]
            for name in names:
                check()
                t0 = time.perf_counter()
                traces = fns[name](batch_of(prompts, size))
                totals[size, name][1] += time.perf_counter() - t0
                totals[size, name][0] += sum(t.counts() for t in traces)
    rows = [[size, name, c.new_tokens, s, c.new_tokens / s if s else 0.0, c.acceptance_rate if c.drafted else float("nan")]
            for (size, name), (c, s) in totals.items()]
    return pd.DataFrame(rows, columns=BATCH_COLUMNS)


def report(frame: pd.DataFrame) -> str:
    wide = frame.pivot(index="batch_size", columns="method", values="tokens_per_s")
    accept = frame[frame.method == "speculative"].set_index("batch_size").acceptance_rate
    lines = [f"{'batch':>5}{'spec tok/s':>12}{'AR tok/s':>10}{'spec/AR':>9}{'accepted':>10}"]
    for size, row in wide.iterrows():
        lines.append(f"{size:>5}{row.speculative:>12.1f}{row.autoregressive:>10.1f}"
                     f"{row.speculative / row.autoregressive:>8.2f}x{accept[size]:>10.2f}")
    return "\n".join(lines)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    common_args(ap, max_new_tokens=48, repeats=2, threads=1)
    ap.add_argument("--standin", default="perturbed", help="draft if none is bundled: perturbed | layers:N")
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 2, 4, 8])
    args = ap.parse_args(argv)
    target, tok, prompts = target_and_prompts(args)
    draft, about = pick_draft(target, args.standin)
    cfg = DecodeConfig(k=args.k, temperature=0.0, max_new_tokens=args.max_new_tokens, record=False)
    print(f"target={args.target} draft: {about}\nk={args.k} greedy max_new_tokens={args.max_new_tokens} "
          f"repeats={args.repeats} threads={torch.get_num_threads()} device={args.device}")
    print(report(run_batch_bench(target, draft, prompts, cfg, tuple(args.batch_sizes), args.repeats)))


if __name__ == "__main__":
    main()
