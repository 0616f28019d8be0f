"""Measure every bundled draft against the bundled target with the decoder; print the model card's tables.

    python scripts/measure/measure_family.py [--max-new-tokens 64] [--ks 1-8] [--repeats 2] [--threads 2]

Writes assets/models/family_eval.json. On the 5 example and 5 held-out prompts, greedy and at the explorer's
temperature (0.8): a k sweep of every bundled draft with the autoregressive baseline interleaved; acceptance,
alpha and tau at k = 4, and per draft the best measured k with its speedup beside Leviathan's prediction from the
same runs' alpha, c and v.
"""
import argparse
import json
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
import specviz
from specviz.models import ASSETS, model_card

TEMPERATURES = (0.0, specviz.config.DEFAULTS.temperature)


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
    texts = specviz.EXAMPLE_PROMPTS + specviz.config.HELDOUT_PROMPTS
    prompts = [tok(p, return_tensors="pt").input_ids for p in texts]
    start, sweeps, best = time.time(), [], []
    for temperature in TEMPERATURES:
        cfg = specviz.DecodeConfig(temperature=temperature, max_new_tokens=args.max_new_tokens)
        summary = specviz.summarize(specviz.sweep(target, drafts, prompts, ks=sorted({*range(lo, hi + 1), 4}),
                                                  cfg=cfg, repeats=args.repeats)).assign(temperature=temperature)
        sweeps += summary.to_dict("records")
        best += specviz.best_k(summary).to_dict("records")
    result = dict(command=" ".join(sys.argv), threads=args.threads, seconds=round(time.time() - start, 1),
                  max_new_tokens=args.max_new_tokens, prompts=texts, sweep=sweeps, best=best,
                  models={m: {k: model_card(m).get(k) for k in ("parameters", "valid_ppl", "wall_minutes", "steps")}
                          for m in specviz.list_models()})
    (ASSETS / "family_eval.json").write_text(json.dumps(result, indent=1))
    print(f"measured in {result['seconds']:.0f} s; python scripts/train/model_card.py prints the tables")


if __name__ == "__main__":
    main()
