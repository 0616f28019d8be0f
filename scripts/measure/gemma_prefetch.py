"""What asking for the weights ahead (``stack.c``'s prefetch_ahead) does on Gemma-3 270M as shipped, specviz.slim on
the C stack: each setting of ``sv_set_prefetch`` side by side in one run, interleaved.

    python scripts/measure/gemma_prefetch.py --feature-draft assets/models/gemma-3-270m-feature-draft

Prints the host line and command, then (1) a verify pass of each row count after a 40-token context: median ms of the
pass, its head (final norm and LM head) and the rest (the layers), per prefetch setting; (2) decodes of --prompts
prompts of ordinary English, 64 new tokens, at each temperature: for each setting the autoregressive decode and, with
--feature-draft, the feature draft at --k and --min-q, back to back prompt by prompt in an order rotated each prompt;
tokens/s medians and the draft's speedup over the same setting's autoregressive call (median of per-prompt ratios).
"""
from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[1]), str(HERE)]

from gemma_args import gemma_parser, passes_and_decodes, shipped  # noqa: E402
from gemma_drafts_vs_llamacpp import specviz_call  # noqa: E402
from gemma_vs_llamacpp import PROMPTS  # noqa: E402
from hostline import host_line, load_average  # noqa: E402


def passes(seq, rows, settings, repeats):
    """{(setting, n): [(pass s, head s)]}, every setting and row count once per repeat."""
    ids = np.arange(1000, 1040 + max(rows), dtype=np.int32)
    seq.crop(0)
    seq.decode(ids[:40])
    out = {(s, n): [] for s in settings for n in rows}
    for rep in range(repeats):
        order = [(s, n) for s in settings for n in rows]
        for s, n in order if rep % 2 else order[::-1]:
            seq.so.sv_set_prefetch(s)
            seq.crop(40)
            t = time.perf_counter()
            seq.decode(ids[40: 40 + n])
            out[(s, n)].append((time.perf_counter() - t, seq.head_seconds))
    return out


def decodes(seq, tok, draft, args):
    """{(T, name): [(tokens/s, tau, ratio to the same setting's autoregressive call)]}, each call the benchmark's own
    (``gemma_drafts_vs_llamacpp.specviz_call`` on slim-c)."""
    out = {}
    for temp in args.temperatures:
        for i, text in enumerate(PROMPTS[: args.prompts]):
            calls = [(s, d) for s in args.prefetch for d in ((None, draft) if draft else (None,))]
            turn = i % len(calls)
            got = {}
            for s, d in calls[turn:] + calls[:turn]:
                seq.so.sv_set_prefetch(s)
                _, tps, tau = specviz_call(seq, tok, d, text, temp, 64, i, args.k, "slim-c", args.min_q if d else 0.0)
                got[(s, d is None)] = (tps, tau)
            for (s, ar), (tps, tau) in got.items():
                name = f"prefetch {s:>5} " + ("autoregressive" if ar else f"feature draft k={args.k} min q={args.min_q}")
                out.setdefault((temp, name), []).append((tps, tau, tps / got[(s, True)][0]))
    return out


def main() -> None:
    ap = passes_and_decodes(gemma_parser(__doc__, feature_draft=False))
    ap.add_argument("--prefetch", type=int, nargs="+", default=[0, 12288], help="bytes ahead; 0: off")
    args = ap.parse_args()
    args.gguf = shipped(args.gguf)
    from specviz import slim
    from specviz.runtime import gguf as loader
    from specviz.runtime.gemma_sequence import GemmaSequence

    print(f"# {host_line()}\n# python {' '.join(sys.argv)}", flush=True)
    tok = loader.tokenizer(args.gguf.parent, args.gguf.name)
    seq = GemmaSequence.from_gguf(args.gguf, threads=args.threads)
    default = seq.so.sv_set_prefetch(0)
    try:
        for (s, n), v in passes(seq, args.rows, args.prefetch, args.repeats).items():
            w, h = statistics.median(x[0] for x in v), statistics.median(x[1] for x in v)
            print(f"prefetch {s:>5} rows {n}: pass {1e3 * w:6.2f} ms  head {1e3 * h:6.2f}  layers {1e3 * (w - h):6.2f}")
        draft = slim.FeatureDraft(seq, args.feature_draft) if args.feature_draft else None
        for (temp, name), v in decodes(seq, tok, draft, args).items():
            print(f"T={temp:g} {name:<50} {statistics.median(x[0] for x in v):6.1f} tok/s  tau "
                  f"{statistics.mean(x[1] for x in v):.2f}  {statistics.median(x[2] for x in v):.2f}x its autoregressive")
    finally:
        seq.so.sv_set_prefetch(default)
    print(f"# load average after: {load_average()}")


if __name__ == "__main__":
    main()
