"""Gemma-3 270M as shipped on specviz.slim's C stack with some GGML types read as the file lays them out instead of
regrouped by 16 rows (``build.REGROUPED``), side by side in one run, interleaved: what a regrouped layout buys.

    python scripts/measure/gemma_layouts.py --row-major Q6_K --feature-draft assets/models/gemma-3-270m-feature-draft

Prints the host line and command, then (1) a verify pass of each row count after a 40-token context: median ms of the
pass and of its head, per layout; (2) decodes of --prompts prompts of ordinary English, 64 new tokens, at each
temperature: per layout the autoregressive decode and, with --feature-draft, the feature draft at --k and --min-q,
back to back prompt by prompt in an order rotated each prompt; tokens/s medians, and the draft's speedup over the same
layout's autoregressive call (median of per-prompt ratios); per layout, whether the draft's greedy text is its
autoregressive text (across layouts the float order differs, so a near tie may fall either way).
"""
from __future__ import annotations

import statistics
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[1]), str(HERE)]

from gemma_args import gemma_parser, passes_and_decodes, shipped  # noqa: E402
from gemma_drafts_vs_llamacpp import specviz_call  # noqa: E402
from gemma_vs_llamacpp import PROMPTS  # noqa: E402
from hostline import host_line, load_average  # noqa: E402


@contextmanager
def read_row_major(kinds):
    """build.REGROUPED without ``kinds`` while a sequence loads: their matrices stay as the file lays them out."""
    from specviz.runtime.native import build

    held = {k: build.REGROUPED.pop(k) for k in kinds}
    try:
        yield
    finally:
        build.REGROUPED.update(held)


def passes(seqs, rows, repeats):
    """{(layout, n): [(pass s, head s)]}, every layout and row count once per repeat, the order reversed each one."""
    ids = np.arange(1000, 1040 + max(rows), dtype=np.int32)
    for seq in seqs.values():
        seq.crop(0)
        seq.decode(ids[:40])
    order = [(name, n) for name in seqs for n in rows]
    out = {key: [] for key in order}
    for rep in range(repeats):
        for name, n in order if rep % 2 else order[::-1]:
            seqs[name].crop(40)
            t = time.perf_counter()
            seqs[name].decode(ids[40: 40 + n])
            out[(name, n)].append((time.perf_counter() - t, seqs[name].head_seconds))
    return out


def decodes(seqs, drafts, tok, args):
    """{(T, side): [(tokens/s, tau, ratio to the same layout's autoregressive call)]} and the greedy outputs."""
    out, greedy = {}, {}
    for temp in args.temperatures:
        for i, text in enumerate(PROMPTS[: args.prompts]):
            calls = [(name, d) for name in seqs for d in ((None, drafts[name]) if drafts else (None,))]
            turn, got = i % len(calls), {}
            for name, d in calls[turn:] + calls[:turn]:
                new, tps, tau = specviz_call(seqs[name], tok, d, text, temp, 64, i, args.k, "slim-c",
                                             args.min_q if d else 0.0)
                got[(name, d is None)] = (tps, tau)
                if temp == 0:
                    greedy.setdefault((i, name), set()).add(tuple(new))
            for (name, ar), (tps, tau) in got.items():
                side = f"{name} " + ("autoregressive" if ar else f"feature draft k={args.k} min q={args.min_q}")
                out.setdefault((temp, side), []).append((tps, tau, tps / got[(name, True)][0]))
    return out, greedy


def main() -> None:
    ap = passes_and_decodes(gemma_parser(__doc__, feature_draft=False))
    ap.add_argument("--row-major", nargs="+", default=["Q6_K"], help="GGML types read as the file lays them out")
    args = ap.parse_args()
    args.gguf = shipped(args.gguf)
    from specviz import slim
    from specviz.runtime import gguf as loader
    from specviz.runtime.gemma_sequence import GemmaSequence
    from specviz.runtime.native import build

    unknown = set(args.row_major) - set(build.REGROUPED)
    if unknown:
        ap.error(f"--row-major takes types with a regrouped layout ({', '.join(build.REGROUPED)}), not {unknown}")
    print(f"# {host_line()}\n# python {' '.join(sys.argv)}", flush=True)
    tok = loader.tokenizer(args.gguf.parent, args.gguf.name)
    seqs = {"regrouped": GemmaSequence.from_gguf(args.gguf, threads=args.threads)}
    with read_row_major(args.row_major):
        seqs[f"{'+'.join(args.row_major)} row-major"] = GemmaSequence.from_gguf(args.gguf, threads=args.threads)
    for (name, n), v in passes(seqs, args.rows, args.repeats).items():
        w, h = statistics.median(x[0] for x in v), statistics.median(x[1] for x in v)
        print(f"{name:<18} rows {n}: pass {1e3 * w:6.2f} ms  head {1e3 * h:6.2f}  layers {1e3 * (w - h):6.2f}")
    drafts = {name: slim.FeatureDraft(seq, args.feature_draft) for name, seq in seqs.items()} \
        if args.feature_draft else {}
    results, greedy = decodes(seqs, drafts, tok, args)
    for (temp, side), v in results.items():
        print(f"T={temp:g} {side:<52} {statistics.median(x[0] for x in v):6.1f} tok/s  tau "
              f"{statistics.mean(x[1] for x in v):.2f}  {statistics.median(x[2] for x in v):.2f}x its autoregressive")
    for name in seqs if greedy and drafts else ():  # the draft's greedy text its own layout's autoregressive text
        same = [len(outs) == 1 for (_, n), outs in greedy.items() if n == name]
        print(f"{name}: greedy draft == autoregressive on {sum(same)}/{len(same)} prompts")
    print(f"# load average after: {load_average()}")


if __name__ == "__main__":
    main()
