"""Write the target's own generated text (``generate_target_text.py`` files) as JSON lines of text, for training a
draft with ANOTHER tokenizer on what the target writes (distillation through text: the draft never sees the
target's token ids, only its strings).

    python scripts/train/target_text_jsonl.py --generated data/gen24/greedy.pt data/gen24/t08.pt \
        --corpus data/corpus/train.jsonl --out data/xtok/train.jsonl

Each generated row (its corpus prefix and the target's continuation) becomes one document; ``--corpus`` appends the
corpus documents too, so the draft also reads the prompts' kind of text.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
from transformers import AutoTokenizer

ROOT = Path(__file__).resolve().parents[2]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--generated", nargs="+", type=Path, required=True)
    ap.add_argument("--tokenizer", type=Path, default=ROOT / "assets/models/tokenizer", help="the target's")
    ap.add_argument("--corpus", type=Path, default=None)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    tok = AutoTokenizer.from_pretrained(args.tokenizer)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    docs = chars = 0
    with args.out.open("w") as f:
        for path in args.generated:
            for i, row in enumerate(torch.load(path)["rows"]):
                text = tok.decode(row["ids"].long().tolist(), skip_special_tokens=True)
                f.write(json.dumps({"title": f"{path.stem}-{i}", "text": text}) + "\n")
                docs, chars = docs + 1, chars + len(text)
        if args.corpus is not None:
            for line in args.corpus.open():
                f.write(line if line.endswith("\n") else line + "\n")
                docs, chars = docs + 1, chars + len(json.loads(line)["text"])
    print(f"{docs} documents, {chars:,} characters -> {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
