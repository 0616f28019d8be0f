#!/usr/bin/env python
"""Train the byte-level BPE tokenizer (vocab 4096) on the training split.

Special tokens: ``<|bos|>`` = 0, ``<|eos|>`` = 1, ``<|pad|>`` = 2. A
TemplateProcessing post-processor prepends ``<|bos|>`` to every encoded text
(``tok("ROMEO:")`` starts with BOS); ``add_special_tokens=False`` turns it off.
Byte-level pre-tokenizer + decoder, so ``decode(encode(x)) == x`` for any text.
Saved with ``PreTrainedTokenizerFast.save_pretrained`` to ``assets/models/tokenizer``.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

ROOT = Path(__file__).resolve().parents[2]
SPECIALS = ["<|bos|>", "<|eos|>", "<|pad|>"]
ROUND_TRIP = [
    "ROMEO:\nBut, soft! what light through yonder window breaks?\n",
    "  Of Mans First Disobedience, and the Fruit\n\n\tOf that Forbidden Tree",
    "Ünïcödé — “quotes” 漢字 emoji 🎭 and trailing spaces   \n\n",
]


def read_texts(path: Path) -> list[str]:
    with path.open(encoding="utf-8") as f:
        return [json.loads(line)["text"] for line in f]


def train(texts: list[str], vocab_size: int) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=SPECIALS, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), min_frequency=2)
    tok.train_from_iterator(texts, trainer=trainer)
    bos = tok.token_to_id("<|bos|>")
    tok.post_processor = processors.TemplateProcessing(
        single="<|bos|> $A", pair="<|bos|> $A <|bos|> $B", special_tokens=[("<|bos|>", bos)])
    return tok


def wrap(tok: Tokenizer) -> PreTrainedTokenizerFast:
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<|bos|>", eos_token="<|eos|>", pad_token="<|pad|>",
        model_max_length=1024, clean_up_tokenization_spaces=False)


def check(out: Path, texts: list[str]) -> None:
    from transformers import AutoTokenizer
    hf = AutoTokenizer.from_pretrained(out)
    ids = hf("ROMEO:")["input_ids"]
    assert ids[0] == hf.bos_token_id == 0, ids
    assert (hf.eos_token_id, hf.pad_token_id) == (1, 2)
    for text in ROUND_TRIP + [texts[0][:5000]]:
        enc = hf(text, add_special_tokens=False)["input_ids"]
        assert hf.decode(enc) == text, repr(text[:80])
        assert hf.decode(hf(text)["input_ids"], skip_special_tokens=True) == text
    sample = "".join(texts[:3])
    n = len(hf(sample, add_special_tokens=False)["input_ids"])
    print(f"round trip OK; {len(sample) / n:.2f} chars/token on the first 3 documents; "
          f"tokens of 'ROMEO:' = {hf.convert_ids_to_tokens(ids)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--train", type=Path, default=ROOT / "data/corpus/train.jsonl")
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--out", type=Path, default=ROOT / "assets/models/tokenizer")
    args = ap.parse_args()
    texts = read_texts(args.train)
    tok = train(texts, args.vocab)
    wrap(tok).save_pretrained(args.out)
    print(f"saved tokenizer (vocab {tok.get_vocab_size()}) to {args.out}")
    check(args.out, texts)


if __name__ == "__main__":
    main()
