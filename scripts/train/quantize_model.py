#!/usr/bin/env python
"""Store a checkpoint in 8 bits (specviz.runtime.int8: int8 rows, a float16 scale per row) with its tokenizer, and
print the validation perplexity before and after, so the model card can say what the storage cost.

    python scripts/train/quantize_model.py --src data/train/target24 --out assets/models/target
"""
from __future__ import annotations

import argparse
import math
import shutil
import sys
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from train_lm import encode_docs, evaluate, load_texts  # noqa: E402

from specviz.runtime import int8  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--src", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--valid", type=Path, default=ROOT / "data/corpus/valid.jsonl")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model = AutoModelForCausalLM.from_pretrained(args.src, dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(args.src)
    valid = encode_docs(tok, load_texts(args.valid)) if args.valid.is_file() else None
    tmp = args.out.with_name(args.out.name + ".int8tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    int8.save(model, tmp)
    tok.save_pretrained(tmp)
    for extra in ("train_log.json", "train_log_stage1.json"):
        if (args.src / extra).is_file():
            shutil.copy(args.src / extra, tmp / extra)
    if valid is not None:
        before = math.exp(evaluate(model, valid, 256, 10**9))
        after = math.exp(evaluate(int8.load(tmp), valid, 256, 10**9))
        print(f"validation perplexity: {before:.2f} as trained (float16 checkpoint), {after:.2f} stored in 8 bits")
    shutil.rmtree(args.out, ignore_errors=True)
    tmp.rename(args.out)
    size = sum(f.stat().st_size for f in args.out.iterdir()) / 2**20
    print(f"{args.out}: {size:.1f} MiB")


if __name__ == "__main__":
    main()
