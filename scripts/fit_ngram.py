"""Fit the bundled n-gram draft on the training corpus: python scripts/fit_ngram.py [--order 3 --min-count 2]"""
import argparse
import sys
import time
from pathlib import Path

from transformers import AutoTokenizer

ROOT = Path(__file__).resolve().parent.parent
from train_lm import encode_docs, load_texts

from specviz.ngram import NGramModel


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--order", type=int, default=3)
    ap.add_argument("--min-count", type=int, default=2, help="prune top-order n-grams seen fewer times")
    ap.add_argument("--discount", type=float, default=0.75)
    ap.add_argument("--train", type=Path, default=ROOT / "data/corpus/train.jsonl")
    ap.add_argument("--out", type=Path, default=ROOT / "assets/models/ngram")
    args = ap.parse_args()
    start = time.time()
    tok = AutoTokenizer.from_pretrained(ROOT / "assets/models/tokenizer")
    tokens = encode_docs(tok, load_texts(args.train))
    model = NGramModel.fit(tokens, len(tok), args.order, args.min_count, args.discount)
    model.save(args.out, command=" ".join(sys.argv), train_tokens=len(tokens), seconds=round(time.time() - start, 1),
               ngrams=[len(k) for k in model.keys])
    tok.save_pretrained(args.out)
    print(f"{len(tokens):,} tokens; n-grams per order {[len(k) for k in model.keys]}; saved to {args.out}")


if __name__ == "__main__":
    main()
