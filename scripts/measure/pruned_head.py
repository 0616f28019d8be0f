"""What a pruned head saves an early exit: the exit's draft step (one token through its first L layers, its head and
q) with the target's full head against heads over the V' most frequent tokens, measured side by side in one run
(interleaved), beside the target's own one-row pass; then greedy decoding with each, checked against the target's
own greedy text, with its acceptance.

    python scripts/measure/pruned_head.py --model /work/ext/gemma-plain --layers 4 9 --sizes 16384 32768 \
        --exit-paths lean dynamic

The support is the ids of a tokenized corpus (assets/corpus_sample.txt and docs/*.md) ranked by frequency
(``pruned_head.frequent_tokens``) and the target's EOS ids; where the corpus has fewer distinct ids than a size asks,
the rest are the lowest ids not seen (a head's cost depends on its size only). Prints one line per (layers, forward
path, head): median ms of the forward and of the whole step (forward + q + argmax), min-max, the ratio to the same
exit with the full head, and c (step over the target's one-row pass). The decoding runs on the default path.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from specviz import DecodeConfig, autoregressive_generate, load_model, speculative_generate  # noqa: E402
from specviz.config import EXAMPLE_PROMPTS, HELDOUT_PROMPTS  # noqa: E402
from specviz.drafts.drafter import draft_step  # noqa: E402
from specviz.drafts.early_exit import early_exit  # noqa: E402
from specviz.runtime.lm import CachedLM  # noqa: E402
from specviz.runtime.pruned_head import frequent_tokens  # noqa: E402


def supports(tok, vocab: int, sizes: list[int], eos: list[int]) -> dict[str, torch.Tensor]:
    """{label: ids}: the corpus's distinct ids, then each size (filled up with the lowest unseen ids)."""
    texts = [(ROOT / "assets" / "corpus_sample.txt").read_text()] + [p.read_text() for p in (ROOT / "docs").glob("*.md")]
    corpus = [tok(t).input_ids for t in texts]
    seen = frequent_tokens(corpus, vocab, vocab, always=eos)
    out = {f"corpus ({seen.numel()})": seen}
    for size in sizes:
        ranked = frequent_tokens(corpus, size, vocab, always=eos)
        missing = size - ranked.numel()
        if missing > 0:
            unseen = torch.ones(vocab, dtype=torch.bool)
            unseen[ranked] = False
            ranked = torch.cat([ranked, unseen.nonzero()[:missing, 0]]).unique()
        out[f"top {size}"] = ranked
    return out


def step_seconds(lm: CachedLM, context: list[int], cfg: DecodeConfig, vocab: int) -> tuple[float, float]:
    """One draft step after context: (forward seconds, forward + q + argmax seconds); rolled back after."""
    lm.cache.crop(len(context))
    start = time.perf_counter()
    logits = lm.cache.forward(torch.tensor([7]))
    forward = time.perf_counter() - start
    draft_step(logits[-1], cfg, vocab, None)
    return forward, time.perf_counter() - start


def time_steps(target, exits: dict, paths: list[str], repeats: int, vocab: int) -> dict:
    """{label: [(forward, step) ...]} for every exit on every path and the target's one-row pass ("target"),
    interleaved."""
    context = [(i * 37) % 900 + 5 for i in range(64)]
    cfg = DecodeConfig(temperature=0)
    lms = {"target": CachedLM(target)}
    for label, model in exits.items():
        at, head = label.split(" ", 1)
        lms.update({f"{at} {path} {head}": CachedLM(model, path=path) for path in paths})
    for label, lm in lms.items():
        print(f"{label}: runs {lm.path}")
    for lm in lms.values():
        lm.feed(context)
        step_seconds(lm, context, cfg, vocab)  # warm
    times = {label: [] for label in lms}
    for _ in range(repeats):
        for label, lm in lms.items():
            times[label].append(step_seconds(lm, context, cfg, vocab))
    return times


def exit_and_path(label: str) -> str:
    return " ".join(label.split()[:2])  # "@4 lean"


def report(times: dict) -> None:
    target = statistics.median(s for _, s in times["target"])
    full = {exit_and_path(label): statistics.median(s for _, s in v) for label, v in times.items() if "full" in label}
    for label, v in times.items():
        fwd, step = [statistics.median(x) for x in zip(*v)]
        lo, hi = min(s for _, s in v), max(s for _, s in v)
        base = full.get(exit_and_path(label), step)
        print(f"{label:34s} forward {fwd * 1e3:7.1f} ms  step {step * 1e3:7.1f} ms [{lo * 1e3:.1f}-{hi * 1e3:.1f}]  "
              f"{step / base:5.2f}x full head  c = {step / target:.3f}")


def decode(target, tok, exits: dict, tokens: int, prompts: int) -> None:
    """Greedy speculative decoding with each exit: equal to the target's own greedy text?  acceptance."""
    cfg = DecodeConfig(k=4, temperature=0, max_new_tokens=tokens)
    chosen = (EXAMPLE_PROMPTS + HELDOUT_PROMPTS)[:prompts]
    own = {p: autoregressive_generate(target, tok(p, return_tensors="pt").input_ids, cfg).new_tokens for p in chosen}
    for label, model in exits.items():
        same, accepted, drafted = 0, 0, 0
        for p in chosen:
            trace = speculative_generate(target, model, tok(p, return_tensors="pt").input_ids, cfg)
            same += trace.new_tokens == own[p]
            c = trace.counts()
            accepted, drafted = accepted + c.accepted, drafted + c.drafted
        print(f"{label:28s} greedy equal to the target's own: {same}/{len(chosen)}  acceptance "
              f"{accepted / max(drafted, 1):.3f} ({accepted}/{drafted})")
    inside = {label: sum(t in set(m.get_output_embeddings().ids.tolist()) for t in sum(own.values(), []))
              for label, m in exits.items() if "full" not in label}
    total = sum(len(t) for t in own.values())
    print("the target's greedy tokens inside each support: " + ", ".join(f"{k} {v}/{total}" for k, v in inside.items()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="/work/ext/gemma-plain")
    ap.add_argument("--layers", type=int, nargs="+", default=[4])
    ap.add_argument("--sizes", type=int, nargs="+", default=[16384, 32768])
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--exit-paths", nargs="+", default=["lean", "dynamic"])
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"model={args.model} layers={args.layers} sizes={args.sizes} exit paths={args.exit_paths} "
          f"repeats={args.repeats} threads={args.threads}")
    target, tok = load_model(args.model)
    vocab = target.get_output_embeddings().weight.shape[0]
    eos = target.generation_config.eos_token_id
    heads = supports(tok, vocab, args.sizes, [eos] if isinstance(eos, int) else list(eos or []))
    exits = {}
    for layers in args.layers:
        exits[f"@{layers} full ({vocab})"] = early_exit(target, layers)
        for label, ids in heads.items():
            exits[f"@{layers} {label}"] = early_exit(target, layers, vocab=ids)
    report(time_steps(target, exits, args.exit_paths, args.repeats, vocab))
    decode(target, tok, exits, args.tokens, args.prompts)


if __name__ == "__main__":
    main()
