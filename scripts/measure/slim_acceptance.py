"""Is specviz.slim's accept step exact on a real pair? Its realised acceptance at every verified position against
the mean of what the rule's law says it should be there (beta = sum min(p, q), recorded each round), over many
seeded sampled runs of the bundled target and ``lite`` as f32 GGUFs on llama.cpp's forward.

    LLAMA_CPP_LIB_PATH=<llama.cpp build/bin> python scripts/measure/slim_acceptance.py --gguf /work/ext/gguf --seeds 20

An exact rule accepts a draft x ~ q with probability sum min(p, q): the two means agree within the sampling error
printed beside them (the standard error of a mean of 0/1 outcomes, positions taken as independent).
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[1]), str(HERE)]

from hostline import host_line, load_average  # noqa: E402


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gguf", type=Path, default=Path("/work/ext/gguf"), help="target-f32.gguf and lite-f32.gguf")
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--k", type=int, default=6)
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    from specviz import slim
    from specviz.config import EXAMPLE_PROMPTS, HELDOUT_PROMPTS, DecodeConfig
    from specviz.runtime.llamacpp_seq import Sequence, Vocab

    print(f"# {host_line()}")
    print(f"# python {' '.join(sys.argv)}")
    target = Sequence(str(args.gguf / "target-f32.gguf"), threads=args.threads)
    draft = slim.ModelDraft(Sequence(str(args.gguf / "lite-f32.gguf"), threads=args.threads))
    vocab = Vocab(str(args.gguf / "target-f32.gguf"))
    accepted, betas = [], []
    for text in EXAMPLE_PROMPTS + HELDOUT_PROMPTS:
        for seed in range(args.seeds):
            cfg = DecodeConfig(k=args.k, temperature=args.temperature, max_new_tokens=args.max_new_tokens, seed=seed)
            for r in slim.speculative(target, draft, vocab.encode(text), cfg, eos=vocab.eog).rounds:
                verified = min(r.n_accepted + 1, len(r.drafted))
                accepted += [i < r.n_accepted for i in range(verified)]
                betas += list(r.beta[:verified])
    n = len(accepted)
    rate, law = sum(accepted) / n, sum(betas) / n
    print(f"{len(EXAMPLE_PROMPTS + HELDOUT_PROMPTS)} prompts x {args.seeds} seeds, k = {args.k}, T = "
          f"{args.temperature:g}, {args.max_new_tokens} new tokens: {n} verified positions")
    print(f"realised acceptance {rate:.4f}; mean beta (the law's) {law:.4f}; difference {rate - law:+.4f}, "
          f"standard error {math.sqrt(rate * (1 - rate) / n):.4f}")
    print(f"# load average after: {load_average()}")


if __name__ == "__main__":
    main()
