"""What a sibling beside a sampled chain would add on Gemma-3 270M with its feature draft, read from the run's own p
and q before anyone builds it: each round of a chain at T = 0.8 is decoded as usual (specviz.slim on the C stack), and
at every position the walk reaches, the chance that a sibling drawn from q without the chain's token (recursive
rejection sampling, exact) would be accepted where the chain's token is rejected, sum min(r, q'), r the residual
norm(max(p - q, 0)) and q' = q without x renormalised. A sibling accepted there adds one token to its round (the
sibling and the bonus from its row, instead of the residual's one token); what it costs is one more verify row
(``verify_rows.py`` measures a row's price on this host).

    python scripts/measure/gemma_sibling_value.py --feature-draft assets/models/gemma-3-270m-feature-draft --k 2

Prints the host line, then: rounds, tau, mean beta at each chain position, the sibling's mean acceptance where the
chain's token is rejected, and the tokens a round a sibling would add at every position and at the first alone.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[1]), str(HERE)]

from gemma_args import gemma_parser, shipped  # noqa: E402
from gemma_round_costs import accept_step  # noqa: E402
from gemma_vs_llamacpp import PROMPTS  # noqa: E402
from hostline import host_line  # noqa: E402


def sibling_acceptance(p: np.ndarray, q: np.ndarray, x: int) -> float:
    """sum min(r, q') for r = norm(max(p - q, 0)) and q' = q without x, renormalised (0 where q' has no mass)."""
    from specviz.slim import sampling as S

    r = S.residual(p, q)
    rest = q.copy()
    rest[x] = 0.0
    total = float(rest.sum())
    return float(np.minimum(r, rest / total).sum()) if total > 0 else 0.0


def main(argv=None) -> None:
    ap = gemma_parser(__doc__)
    ap.add_argument("--k", type=int, default=2)
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    args = ap.parse_args(argv)
    from specviz import slim
    from specviz.config import DecodeConfig
    from specviz.runtime import gguf as loader
    from specviz.runtime.gemma_sequence import GemmaSequence
    from specviz.slim import sampling as S

    args.gguf = shipped(args.gguf)
    print(f"# {host_line()}\n# python {' '.join(sys.argv)}", flush=True)
    tok = loader.tokenizer(args.gguf.parent, args.gguf.name)
    seq = GemmaSequence.from_gguf(args.gguf)
    draft = slim.FeatureDraft(seq, args.feature_draft)
    rounds = []  # (n_accepted, m, [(beta, sibling acceptance) at each position reached])
    walk = S.walk

    def watched(p_row, q, drafted, rng, accept_prob):
        verdict = walk(p_row, q, drafted, rng, accept_prob)
        reached, q = range(min(verdict.n_accepted + 1, len(drafted))), q.dense() if isinstance(q, S.DraftQ) else q
        rounds.append((verdict.n_accepted, len(drafted),
                       [(float(np.minimum(p_row(i), q[i]).sum()), sibling_acceptance(p_row(i), q[i], int(drafted[i])))
                        for i in reached]))
        return verdict

    S.walk = watched
    try:
        with accept_step("written"):  # the accept step that walks each reached row's p written whole
            for i, text in enumerate(PROMPTS[: args.prompts]):
                cfg = DecodeConfig(temperature=args.temperature, max_new_tokens=args.max_new_tokens, seed=i, k=args.k,
                                   record=False)
                slim.speculative(seq, draft, list(tok(text).input_ids), cfg)
    finally:
        S.walk = walk
    drafted = [r for r in rounds if r[1] > 0]
    tau = np.mean([n + 1 for n, _, _ in drafted])
    betas = [np.mean([info[j][0] for _, _, info in drafted if len(info) > j]) for j in range(args.k)]
    rejected = [info[n][1] for n, m, info in drafted if n < m]
    every = np.mean([info[n][1] if n < m else 0.0 for n, m, info in drafted])
    first = np.mean([info[0][1] if n == 0 else 0.0 for n, _, info in drafted])
    print(f"rounds {len(drafted)}, tau {tau:.3f}, mean beta by position " + " ".join(f"{b:.3f}" for b in betas))
    print(f"a sibling's acceptance where the chain's token is rejected: {np.mean(rejected):.3f} (mean over "
          f"{len(rejected)} rejections)")
    print(f"tokens a round a sibling would add: +{every:.3f} at every position (+{every / tau:.1%}), "
          f"+{first:.3f} at the first alone (+{first / tau:.1%})")


if __name__ == "__main__":
    main()
