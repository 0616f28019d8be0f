"""What asking for the weights ahead (``stack.c``'s prefetch_ahead) does on Gemma-3 270M as shipped, specviz.slim on
the C stack: each setting of ``sv_set_prefetch`` (into L1) and ``sv_set_prefetch_l2`` (into L2 alone) side by side
in one run, interleaved.

    python scripts/measure/gemma_prefetch.py --feature-draft assets/models/gemma-3-270m-feature-draft
    python scripts/measure/gemma_prefetch.py --prefetch 12288 --prefetch-l2 0 49152 --rows 1 3 6 \
        --feature-draft assets/models/gemma-3-270m-feature-draft

Prints the host line and command, then (1) a verify pass of each row count after a 40-token context: median ms of the
pass, its head (final norm and LM head) and the rest (the layers), per prefetch setting; (2) decodes of --prompts
prompts of ordinary English, 64 new tokens, at each temperature: for each setting the autoregressive decode and, with
--feature-draft, the feature draft at --k and --min-q, back to back prompt by prompt in an order rotated each prompt;
tokens/s medians and the draft's speedup over the same setting's autoregressive call (median of per-prompt ratios).
"""
from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[1]), str(HERE)]

from gemma_args import gemma_parser, passes_and_decodes, shipped  # noqa: E402
from gemma_sides import report  # noqa: E402
from hostline import host_line, load_average  # noqa: E402


def main() -> None:
    ap = passes_and_decodes(gemma_parser(__doc__, feature_draft=False))
    ap.add_argument("--prefetch", type=int, nargs="+", default=[0, 12288], help="bytes ahead into L1; 0: off")
    ap.add_argument("--prefetch-l2", type=int, nargs="+", default=[0], help="bytes ahead into L2 alone; 0: off")
    args = ap.parse_args()
    args.gguf = shipped(args.gguf)
    from specviz import slim
    from specviz.runtime import gguf as loader
    from specviz.runtime.gemma_sequence import GemmaSequence

    print(f"# {host_line()}\n# python {' '.join(sys.argv)}", flush=True)
    tok = loader.tokenizer(args.gguf.parent, args.gguf.name)
    seq = GemmaSequence.from_gguf(args.gguf, threads=args.threads)
    default = seq.so.sv_set_prefetch(0), seq.so.sv_set_prefetch_l2(0)
    sides = {f"prefetch {b:>5} L2 {b2:>6}": (seq, lambda b=b, b2=b2: (seq.so.sv_set_prefetch(b),
                                                                      seq.so.sv_set_prefetch_l2(b2)))
             for b in args.prefetch for b2 in args.prefetch_l2}
    draft = slim.FeatureDraft(seq, args.feature_draft) if args.feature_draft else None
    try:
        report(sides, {name: draft for name in sides} if draft else {}, tok, args, 24)
    finally:
        seq.so.sv_set_prefetch(default[0]), seq.so.sv_set_prefetch_l2(default[1])
    print(f"# load average after: {load_average()}")


if __name__ == "__main__":
    main()
