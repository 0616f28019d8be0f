"""The speedup of every draft that fits Gemma-3 270M (docs/REAL_MODELS.md), side by side in one run: each draft's
speculative decoding interleaved with the target's autoregressive baseline, prompt by prompt and repeat by repeat
(the order rotated each turn), so that the host's noise falls on all alike. Greedy output is checked against the
baseline's on the same prompt and repeat.

    python scripts/measure/gemma_recipe.py --model /work/ext/gemma-plain --ngram /work/ext/ngram-gemma \
        --exit-layers 4 --cross lite --k 4 --max-new-tokens 64 --repeats 3 --prompts all --threads 2

Drafts: prompt lookup; an n-gram of Gemma's own greedy text (``scripts/train/fit_ngram.py --target``, the folder
given by --ngram); an early exit of the first --exit-layers layers with the full head and with a head pruned to the
tokens of a corpus (assets/corpus_sample.txt and docs/*.md, tokenized by Gemma), of Gemma's own greedy text (the
n-gram's unigrams) and EOS (``pruned_head.frequent_tokens``); a bundled draft with its own tokenizer
(``CrossDrafter``). Prints a header (date, host, load average, command), then one row per method: tokens/s over all
calls, its median [min-max] per call, the speedup (pooled tokens/s over the baseline's) and its median [min-max] over
the calls paired with the baseline's, acceptance, alpha, tau, c, v, Leviathan's prediction from them and the
acceptance that would break even at that c and v (``specviz.theory.expected_speedup``), and greedy equality n/n.
"""
from __future__ import annotations

import argparse
import sys
import time
from functools import partial
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from hostline import host_line, load_average  # noqa: E402
from timings import spread  # noqa: E402

from specviz import (  # noqa: E402
    CrossDrafter,
    DecodeConfig,
    NGramDrafter,
    NGramModel,
    PromptLookupDrafter,
    autoregressive_generate,
    load_model,
    speculative_generate,
    theory,
)
from specviz.drafts.early_exit import early_exit  # noqa: E402
from specviz.labs.bench import PROMPT_SETS, Tally  # noqa: E402
from specviz.runtime.pruned_head import frequent_tokens  # noqa: E402

BASELINE = "autoregressive"




def pruned_vocab(tok, vocab: int, size: int, table: NGramModel | None) -> torch.Tensor:
    """The ``size`` most frequent ids of the corpus sample, the docs and (where given) the n-gram's unigrams, and EOS."""
    texts = [(ROOT / "assets" / "corpus_sample.txt").read_text()] + [p.read_text() for p in (ROOT / "docs").glob("*.md")]
    corpus = [tok(t).input_ids for t in texts]
    if table is not None:  # every token Gemma wrote, as often as it wrote it
        corpus.append(table.keys[0].repeat_interleave(table.counts[0].long()))
    return frequent_tokens(corpus, size, vocab, always=[tok.eos_token_id])


def build_drafts(args, target, tok) -> dict:
    """{label: draft} for every draft asked for."""
    vocab = target.get_output_embeddings().weight.shape[0]
    table = NGramModel.load(args.ngram) if args.ngram else None
    drafts = {"prompt lookup": PromptLookupDrafter()}
    if table is not None:
        drafts["n-gram of its own text"] = NGramDrafter(table, name=args.ngram.name)
    for layers in args.exit_layers:
        drafts[f"early exit @{layers}, full head"] = early_exit(target, layers)
        if args.vocab:
            ids = pruned_vocab(tok, vocab, args.vocab, table)
            drafts[f"early exit @{layers}, head {ids.numel():,}"] = early_exit(target, layers, vocab=ids)
    for name in args.cross:
        model, draft_tok = load_model(name)
        drafts[f"{name}, own tokenizer"] = CrossDrafter(model, draft_tok, tok, name=name)
    return drafts


def run_all(target, drafts: dict, prompts: list, cfg: DecodeConfig, repeats: int) -> tuple[dict, list]:
    """Every method on every prompt, ``repeats`` times, interleaved; (tallies, per-call speedups per method)."""
    names = [BASELINE, *drafts]
    tallies, paired = {n: Tally() for n in names}, {n: [] for n in drafts}
    calls = {BASELINE: lambda ids: autoregressive_generate(target, ids, cfg)}
    calls.update({n: partial(speculative_generate, target, d, cfg=cfg) for n, d in drafts.items()})
    for ids in prompts[:1]:  # warm-up: first calls allocate
        for name in names:
            calls[name](ids)
    turn, start = 0, time.time()
    for r in range(repeats):
        for i, ids in enumerate(prompts):
            order = names[turn % len(names):] + names[:turn % len(names)]
            turn += 1
            traces = {name: calls[name](ids) for name in order}
            base = traces[BASELINE]
            for name in names:
                s = traces[name].summary()
                tallies[name].add(s.new_tokens, s.total_s, traces[name].counts())
                if name != BASELINE:
                    t = tallies[name]
                    t.compared += 1
                    t.differing += traces[name].new_tokens != base.new_tokens
                    paired[name].append(traces[name].summary().tokens_per_s / base.summary().tokens_per_s)
            print(f"# repeat {r + 1}/{repeats} prompt {i + 1}/{len(prompts)} done at {time.time() - start:.0f} s",
                  flush=True)
        if r + 1 < repeats:  # what a stopped run keeps
            print(f"# after {r + 1} of {repeats} repeats:\n{report(tallies, paired)}", flush=True)
    return tallies, paired


def break_even(k: float, c: float, v: float) -> float | None:
    """The alpha at which Leviathan's speedup is 1 for this k, c and v (None: none below 1 reaches it)."""
    if theory.expected_speedup(0.999, k, c, v) < 1:
        return None
    lo, hi = 0.0, 0.999
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if theory.expected_speedup(mid, k, c, v) < 1 else (lo, mid)
    return hi


def report(tallies: dict, paired: dict) -> str:
    base = tallies[BASELINE]
    lines = [f"{'method':<28}{'tok/s':>7}  {'per call: median [min-max]':<27}{'speedup':>8}  "
             f"{'paired: median [min-max]':<25}{'accept':>7}{'alpha':>7}{'tau':>6}{'c':>7}{'v':>6}"
             f"{'pred':>7}{'even at':>8}  greedy ==",
             f"{BASELINE:<28}{base.tokens_per_s:>7.2f}  {spread(base.per_call, '.2f'):<27}{1:>7.2f}x"]
    for name, t in tallies.items():
        if name == BASELINE:
            continue
        c, v, k = theory.cost_ratio(t.counts, base.counts), theory.verify_cost(t.counts, base.counts), \
            theory.mean_k(t.counts)
        predicted = theory.expected_speedup(min(t.counts.alpha, 1.0), k, c, v)
        even, same = break_even(k, c, v), t.compared - t.differing
        lines.append(f"{name:<28}{t.tokens_per_s:>7.2f}  {spread(t.per_call, '.2f'):<27}"
                     f"{t.tokens_per_s / base.tokens_per_s:>7.2f}x  {spread(paired[name], '.2f'):<25}"
                     f"{t.counts.acceptance_rate:>7.3f}{t.counts.alpha:>7.3f}{t.counts.tau:>6.2f}{c:>7.3f}{v:>6.2f}"
                     f"{predicted:>6.2f}x{(f'{even:.2f}' if even is not None else 'none'):>8}  {same}/{t.compared}")
    lines.append("tok/s: generated tokens over wall seconds of all calls (prefill included); speedup: over the "
                 f"{BASELINE} baseline's tok/s in this run; paired: per call, over the baseline's call on the same "
                 "prompt and repeat; c: draft time per drafted token over the baseline's one-token forward; v: verify "
                 "pass over it; pred: Leviathan's expected_speedup(alpha, k, c, v); even at: the alpha at which it is 1")
    return "\n".join(lines)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="gemma-3-270m", help="the target: a name, a folder or a GGUF")
    ap.add_argument("--ngram", type=Path, help="an n-gram folder fitted on the target's text (fit_ngram.py --target)")
    ap.add_argument("--exit-layers", type=int, nargs="*", default=[4])
    ap.add_argument("--vocab", type=int, default=32_768, help="the pruned exit head's size at most (0: none)")
    ap.add_argument("--cross", nargs="*", default=["lite"], help="bundled drafts with their own tokenizer")
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--prompts", choices=sorted(PROMPT_SETS), default="all", help="5 example, 5 held-out, or all 10")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(f"# host: {host_line()}")
    print(f"# command: python {' '.join([Path(sys.argv[0]).resolve().relative_to(ROOT).as_posix(), *sys.argv[1:]])}",
          flush=True)
    target, tok = load_model(args.model)
    drafts = build_drafts(args, target, tok)
    cfg = DecodeConfig(k=args.k, temperature=0, max_new_tokens=args.max_new_tokens)
    prompts = [tok(p, return_tensors="pt").input_ids for p in PROMPT_SETS[args.prompts]]
    print(f"target={args.model} k={args.k} temperature=0 max_new_tokens={args.max_new_tokens} repeats={args.repeats} "
          f"prompts={len(prompts)} threads={torch.get_num_threads()} drafts={list(drafts)}", flush=True)
    tallies, paired = run_all(target, drafts, prompts, cfg, args.repeats)
    print(f"# load average at the end: {load_average()}")
    print(report(tallies, paired))


if __name__ == "__main__":
    main()
