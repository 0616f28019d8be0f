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

import sys
from contextlib import contextmanager
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[1]), str(HERE)]

from gemma_args import gemma_parser, passes_and_decodes, shipped  # noqa: E402
from gemma_sides import report  # noqa: E402
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
    drafts = {name: slim.FeatureDraft(seq, args.feature_draft) for name, seq in seqs.items()} \
        if args.feature_draft else {}
    report({name: (seq, lambda: None) for name, seq in seqs.items()}, drafts, tok, args, 18)
    print(f"# load average after: {load_average()}")


if __name__ == "__main__":
    main()
