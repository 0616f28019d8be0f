"""Measure every bundled draft against the bundled target with the decoder; print the model card's tables.

    python scripts/measure_family.py [--max-new-tokens 64] [--ks 1-8] [--repeats 2] [--threads 2]

Writes assets/models/family_eval.json. Acceptance and tau at k = 4 (greedy and temperature 1), then a
greedy k sweep with the autoregressive baseline interleaved: best measured k and its speedup.
"""
import argparse
import json
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
import specviz
from specviz.models import ASSETS, model_card


def acceptance_table(target, drafts, prompts, max_new):
    rows = []
    for temperature in (0.0, 1.0):
        cfg = specviz.DecodeConfig(k=4, temperature=temperature, max_new_tokens=max_new)
        s = specviz.summarize(specviz.sweep(target, drafts, prompts, ks=[4], cfg=cfg, progress=False))
        for r in s.itertuples():
            rows.append(dict(draft=r.draft, temperature=temperature, acceptance_rate=r.acceptance_rate, tau=r.tau,
                             alpha=r.alpha))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--ks", default="1-8")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    lo, hi = map(int, args.ks.split("-"))
    target, tok = specviz.load_model(specviz.DEFAULT_TARGET)
    drafts = {name: specviz.load_drafter(name) for name in specviz.list_drafters()}
    prompts = [tok(p, return_tensors="pt").input_ids for p in specviz.EXAMPLE_PROMPTS]
    start = time.time()
    table = acceptance_table(target, drafts, prompts, args.max_new_tokens)
    cfg = specviz.DecodeConfig(temperature=0.0, max_new_tokens=args.max_new_tokens)
    runs = specviz.sweep(target, drafts, prompts, ks=range(lo, hi + 1), cfg=cfg, repeats=args.repeats)
    summary = specviz.summarize(runs)
    best = specviz.best_k(summary)
    result = dict(command=" ".join(sys.argv), threads=args.threads, seconds=round(time.time() - start, 1),
                  max_new_tokens=args.max_new_tokens, prompts=specviz.EXAMPLE_PROMPTS, acceptance=table,
                  sweep=summary.to_dict("records"), best=best.to_dict("records"),
                  models={m: {k: model_card(m).get(k) for k in ("parameters", "valid_ppl", "wall_minutes", "steps")}
                          for m in specviz.list_models()})
    (ASSETS / "family_eval.json").write_text(json.dumps(result, indent=1))
    print(pd_markdown(table, best))


def pd_markdown(table, best):
    import pandas as pd
    acc = pd.DataFrame(table).pivot(index="draft", columns="temperature", values=["acceptance_rate", "tau"])
    return "## k = 4\n" + acc.round(3).to_string() + "\n\n## greedy, best k\n" + best[
        ["draft", "k", "acceptance_rate", "tau", "speedup", "speedup_theory", "c"]].round(3).to_string(index=False)


if __name__ == "__main__":
    main()
