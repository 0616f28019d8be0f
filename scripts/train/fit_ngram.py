"""Fit an n-gram draft: on the training corpus (the bundled `ngram`), on text the target generated itself
(`scripts/train/generate_target_text.py`), which drafts for this target far better, or on any model's own greedy
text generated here (`--target`: a bundled name, a folder or a GGUF; its tokenizer and vocabulary, of any size).

    python scripts/train/fit_ngram.py [--order 3 --min-count 2]
    python scripts/train/fit_ngram.py --generated data/gen/greedy.pt --order 5 --min-count 2 --out assets/models/ngram-target
    python scripts/train/fit_ngram.py --target gemma-3-270m/ --prompts prompts.txt --minutes 10 --order 5 --out ngram-gemma
"""
import argparse
import sys
import time
from pathlib import Path

import torch
from train_lm import encode_docs, load_texts
from transformers import AutoTokenizer

from specviz import DecodeConfig, autoregressive_generate, load_model
from specviz.drafts.ngram import NGramModel
from specviz.drafts.pairing import vocab_fingerprint

ROOT = Path(__file__).resolve().parents[2]


def generated_tokens(files: list[Path], eos: int) -> torch.Tensor:
    """Every generated row (prefix and continuation), rows separated by EOS: one 1-D LongTensor."""
    rows = [r["ids"].long() for f in files for r in torch.load(f)["rows"]]
    sep = torch.tensor([eos])
    return torch.cat([t for r in rows for t in (r, sep)])


def greedy_text(target: str, prompts: list[str], minutes: float, new_tokens: int):
    """(tokens, tokenizer, vocabulary size): the target's own greedy continuations of the prompts, in turn, until
    ``minutes`` are spent (at least one each), rows separated by its EOS where it has one."""
    model, tok = load_model(target)
    cfg, rows, start = DecodeConfig(temperature=0, max_new_tokens=new_tokens, record=False), [], time.time()
    while len(rows) < len(prompts) or time.time() - start < 60 * minutes:
        ids = tok(prompts[len(rows) % len(prompts)], return_tensors="pt").input_ids
        trace = autoregressive_generate(model, ids, cfg)
        rows.append(torch.tensor(trace.prompt_ids + trace.new_tokens + ([tok.eos_token_id] if tok.eos_token_id
                                                                        is not None else [])))
    return torch.cat(rows), tok, model.get_output_embeddings().weight.shape[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--order", type=int, default=3)
    ap.add_argument("--min-count", type=int, default=2, help="prune n-grams (n >= 2) seen fewer times")
    ap.add_argument("--discount", type=float, default=0.75)
    ap.add_argument("--train", type=Path, default=ROOT / "data/corpus/train.jsonl")
    ap.add_argument("--generated", type=Path, nargs="*", help="fit on these generate_target_text.py files instead")
    ap.add_argument("--target", help="fit on this model's own greedy text, generated here (name, folder or GGUF)")
    ap.add_argument("--prompts", type=Path, help="with --target: prompts, one per paragraph (default: corpus lines)")
    ap.add_argument("--minutes", type=float, default=5.0, help="with --target: how long to generate")
    ap.add_argument("--new-tokens", type=int, default=128, help="with --target: tokens per continuation")
    ap.add_argument("--out", type=Path, default=ROOT / "assets/models/ngram")
    args = ap.parse_args()
    start = time.time()
    if args.target:
        prompts = ([p.strip() for p in args.prompts.read_text().split("\n\n") if p.strip()] if args.prompts
                   else [line[:200] for line in load_texts(args.train)[:256]])
        tokens, tok, vocab = greedy_text(args.target, prompts, args.minutes, args.new_tokens)
        source = f"{args.target}'s greedy text"
    else:
        tok = AutoTokenizer.from_pretrained(ROOT / "assets/models/tokenizer")
        vocab = len(tok)
        if args.generated:
            tokens, source = generated_tokens(args.generated, tok.eos_token_id), [str(f) for f in args.generated]
        else:
            tokens, source = encode_docs(tok, load_texts(args.train)), str(args.train)
    model = NGramModel.fit(tokens, vocab, args.order, args.min_count, args.discount)
    model.tokenizer = vocab_fingerprint(tok)  # drafts are checked against their target's (drafts.pairing)
    model.save(args.out, command=" ".join(sys.argv), train_tokens=len(tokens), seconds=round(time.time() - start, 1),
               ngrams=[len(k) for k in model.keys], source=source)
    tok.save_pretrained(args.out)
    print(f"{len(tokens):,} tokens; n-grams per order {[len(k) for k in model.keys]}; saved to {args.out}")


if __name__ == "__main__":
    main()
