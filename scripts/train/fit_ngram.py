"""Fit an n-gram draft: on the training corpus (the bundled `ngram`), or on text the target generated itself
(`scripts/train/generate_target_text.py`), which drafts for this target far better.

    python scripts/train/fit_ngram.py [--order 3 --min-count 2]
    python scripts/train/fit_ngram.py --generated data/gen/greedy.pt --order 5 --min-count 2 --out assets/models/ngram-target
"""
import argparse
import sys
import time
from pathlib import Path

import torch
from train_lm import encode_docs, load_texts
from transformers import AutoTokenizer

from specviz.drafts.ngram import NGramModel

ROOT = Path(__file__).resolve().parents[2]


def generated_tokens(files: list[Path], eos: int) -> torch.Tensor:
    """Every generated row (prefix and continuation), rows separated by EOS: one 1-D LongTensor."""
    rows = [r["ids"].long() for f in files for r in torch.load(f)["rows"]]
    sep = torch.tensor([eos])
    return torch.cat([t for r in rows for t in (r, sep)])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--order", type=int, default=3)
    ap.add_argument("--min-count", type=int, default=2, help="prune n-grams (n >= 2) seen fewer times")
    ap.add_argument("--discount", type=float, default=0.75)
    ap.add_argument("--train", type=Path, default=ROOT / "data/corpus/train.jsonl")
    ap.add_argument("--generated", type=Path, nargs="*", help="fit on these generate_target_text.py files instead")
    ap.add_argument("--out", type=Path, default=ROOT / "assets/models/ngram")
    args = ap.parse_args()
    start = time.time()
    tok = AutoTokenizer.from_pretrained(ROOT / "assets/models/tokenizer")
    if args.generated:
        tokens, source = generated_tokens(args.generated, tok.eos_token_id), [str(f) for f in args.generated]
    else:
        tokens, source = encode_docs(tok, load_texts(args.train)), str(args.train)
    model = NGramModel.fit(tokens, len(tok), args.order, args.min_count, args.discount)
    model.save(args.out, command=" ".join(sys.argv), train_tokens=len(tokens), seconds=round(time.time() - start, 1),
               ngrams=[len(k) for k in model.keys], source=source)
    tok.save_pretrained(args.out)
    print(f"{len(tokens):,} tokens; n-grams per order {[len(k) for k in model.keys]}; saved to {args.out}")


if __name__ == "__main__":
    main()
