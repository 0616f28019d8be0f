#!/usr/bin/env python
"""Text the target writes itself: continuations of corpus prefixes, greedy and sampled.

    python scripts/train/generate_target_text.py --mode greedy --minutes 30 --out data/gen/greedy.pt
    python scripts/train/generate_target_text.py --mode sample --temperature 0.8 --minutes 30 --out data/gen/t08.pt

Drafts that learn from this text (an n-gram table of the target's own continuations, a neural draft
distilled on-policy) meet the contexts they will draft in. Each batch takes ``--batch`` prefixes of one
random length (4..48 tokens) from random places in the training split and continues them for
``--new-tokens`` tokens with transformers' ``generate``; rows are saved as they finish (the file is
rewritten after every batch, so a run that is stopped keeps what it made).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

ROOT = Path(__file__).resolve().parents[2]
from train_lm import encode_docs, load_texts


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", type=Path, default=ROOT / "assets/models/target")
    ap.add_argument("--mode", choices=("greedy", "sample"), default="greedy")
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--new-tokens", type=int, default=192)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--train", type=Path, default=ROOT / "data/corpus/train.jsonl")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    tok = AutoTokenizer.from_pretrained(args.target)
    model = AutoModelForCausalLM.from_pretrained(args.target, dtype=torch.float32).eval()
    corpus = encode_docs(tok, load_texts(args.train))
    rows, start, g = [], time.time(), torch.Generator().manual_seed(args.seed)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    while time.time() - start < args.minutes * 60:
        n = int(torch.randint(4, 49, (1,), generator=g))
        at = torch.randint(0, len(corpus) - n, (args.batch,), generator=g)
        prefix = torch.stack([corpus[i:i + n] for i in at.tolist()]).long()
        with torch.inference_mode():
            out = model.generate(prefix, attention_mask=torch.ones_like(prefix), max_new_tokens=args.new_tokens,
                                 min_new_tokens=args.new_tokens, do_sample=args.mode == "sample",
                                 temperature=args.temperature if args.mode == "sample" else None,
                                 top_k=0, top_p=1.0, pad_token_id=tok.pad_token_id)
        rows += [{"prefix": n, "ids": r.to(torch.int16)} for r in out]
        made = sum(len(r["ids"]) - r["prefix"] for r in rows)
        torch.save({"mode": args.mode, "temperature": args.temperature, "rows": rows, "command": " ".join(sys.argv)},
                   args.out)
        print(f"{time.time() - start:7.0f}s  {len(rows)} rows  {made:,} generated tokens", flush=True)


if __name__ == "__main__":
    main()
