#!/usr/bin/env python
"""Record the gallery: ready runs of the bundled family (each with its autoregressive baseline and every token's
text), shipped in assets/gallery/ so the explorer replays them instantly, with no model work (a class on one
Space is served from these). Rerun after the family changes; tests check that each file replays and that the
recipe below reproduces its tokens.

    python scripts/train/record_gallery.py [--threads 1]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from specviz.labs.gallery import FOLDER, GALLERY, record  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    FOLDER.mkdir(parents=True, exist_ok=True)
    for entry in GALLERY:
        trace, base = record(entry)
        path = FOLDER / f"{entry.name}.json"
        path.write_text(trace.to_json(baseline=base))
        s = trace.summary()
        print(f"{path.name}: {s.new_tokens} tokens, acceptance {s.acceptance_rate:.2f}, "
              f"{s.target_forwards_per_token:.2f} target passes per token, {path.stat().st_size / 1024:.0f} KiB")


if __name__ == "__main__":
    main()
