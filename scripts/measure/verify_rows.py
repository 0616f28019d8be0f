"""What a verify pass of n rows costs over a one-row pass, per forward path, measured side by side in one run
(the paths interleaved, medians and ranges), with the greedy text of each path checked against the model's own.

    python scripts/measure/verify_rows.py --model target [--rows 1 2 5 9] [--paths lean dynamic] [--repeats 7]
    python scripts/measure/verify_rows.py --model gemma-3-270m/ --rows 1 5 --dtypes float32 bfloat16
    python scripts/measure/verify_rows.py --model gemma-3-270m-q4_k_m.gguf --paths llamacpp lean gemma-c

``gemma-c``: a Gemma-3 GGUF on specviz.slim's C stack (``runtime.gemma_sequence``), --model the file.

Each measurement: the cache holds a 64-token context, then one pass appends n rows and is rolled back (what a verify
pass does). Prints one line per (path, dtype, n): median ms, min-max, and the ratio to that path's one-row pass.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path[:0] = [str(Path(__file__).resolve().parents[2]), str(Path(__file__).resolve().parent)]

from hostline import host_line, load_average  # noqa: E402

from specviz import DecodeConfig, autoregressive_generate, load_model  # noqa: E402
from specviz.runtime import lm as lm_module  # noqa: E402


def pass_seconds(cached, context: list[int], rows: int) -> float:
    cached.cache.crop(len(context))
    start = time.perf_counter()
    cached.cache.forward(torch.tensor([7] * rows))
    return time.perf_counter() - start


class SeqRows:
    """A numpy sequence (``runtime.gemma_sequence.GemmaSequence``: specviz.slim's C stack, no torch in its passes)
    measured as a CachedLM is: ``cache.crop``, ``cache.forward``, ``feed``."""

    path = "gemma-c"

    def __init__(self, seq):
        self.seq, self.cache = seq, self

    def crop(self, keep: int) -> None:
        self.seq.crop(keep)

    def forward(self, ids):
        return self.seq.decode(np.asarray(ids))

    def feed(self, ids):
        return self.seq.decode(np.asarray(ids))


def measure(model, paths, rows, repeats, context_len=64, gguf=None):
    context = [(i * 37) % 90 + 5 for i in range(context_len)]
    caches = {}
    for path in paths:
        if path == "gemma-c":
            from specviz.runtime.gemma_sequence import GemmaSequence

            cached = SeqRows(GemmaSequence.from_gguf(gguf, threads=torch.get_num_threads()))
        else:
            cached = lm_module.CachedLM(model, path=path)
        cached.feed(context)
        caches[path] = cached
        for n in rows:
            pass_seconds(cached, context, n)  # warm: layouts, packing
    times = {(p, n): [] for p in paths for n in rows}
    for _ in range(repeats):  # interleaved: every path and row count once per repeat
        for path in paths:
            for n in rows:
                times[(path, n)].append(pass_seconds(caches[path], context, n))
    return {key: (statistics.median(v), min(v), max(v)) for key, v in times.items()}, caches


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="target")
    ap.add_argument("--rows", type=int, nargs="+", default=[1, 2, 5, 9])
    ap.add_argument("--paths", nargs="+", default=["lean", "dynamic"])
    ap.add_argument("--dtypes", nargs="+", default=["float32"])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--check-tokens", type=int, default=32)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"# {host_line()}")
    print(f"# python {' '.join(sys.argv)}")
    print(f"model={args.model} rows={args.rows} paths={args.paths} dtypes={args.dtypes} repeats={args.repeats} "
          f"threads={args.threads}")
    for dtype in args.dtypes:
        model, tok = load_model(args.model, dtype=getattr(torch, dtype))
        stats, caches = measure(model, args.paths, args.rows, args.repeats, gguf=args.model)
        for path in args.paths:
            chosen = caches[path].path
            one = stats[(path, args.rows[0])][0]
            for n in args.rows:
                med, lo, hi = stats[(path, n)]
                print(f"{dtype:9s} {path:8s} (runs {chosen:7s}) rows {n:3d}: {med * 1e3:8.1f} ms "
                      f"[{lo * 1e3:.1f}-{hi * 1e3:.1f}]  {med / one:5.2f}x one row")
        ids = tok("The capital of France is", return_tensors="pt").input_ids
        texts = {}
        for path in args.paths:
            cfg = DecodeConfig(temperature=0, max_new_tokens=args.check_tokens)
            if path == "gemma-c":
                from specviz import slim

                texts[path] = slim.autoregressive(caches[path].seq, ids[0].tolist(), cfg).new_tokens
                continue
            before, lm_module.DEFAULT_PATH = lm_module.DEFAULT_PATH, path
            try:
                texts[path] = autoregressive_generate(model, ids, cfg).new_tokens
            finally:
                lm_module.DEFAULT_PATH = before
        same = all(t == texts[args.paths[0]] for t in texts.values())
        print(f"{dtype}: greedy text of every path the same: {same}")
    print(f"# load average after: {load_average()}")


if __name__ == "__main__":
    main()
