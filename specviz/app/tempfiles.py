"""Files the app hands to visitors (exports, lab CSVs, trained drafts): each in a fresh folder under one root,
and every folder there older than ``MAX_AGE_S`` swept away whenever a new one is made, so a public server's
disk does not fill (gradio's own copies are removed by ``gr.Blocks(delete_cache=...)``)."""
from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

ROOT = Path(tempfile.gettempdir()) / "specviz-files"
MAX_AGE_S = 3600.0


def fresh_folder(prefix: str, root: Path | None = None, max_age_s: float | None = None) -> Path:
    """A new empty folder for one download, after sweeping folders older than max_age_s from the root."""
    root = root or ROOT
    root.mkdir(parents=True, exist_ok=True)
    sweep(root, MAX_AGE_S if max_age_s is None else max_age_s)
    return Path(tempfile.mkdtemp(prefix=prefix, dir=root))


def sweep(root: Path, max_age_s: float) -> int:
    """Delete the root's folders last modified more than max_age_s ago; returns how many went."""
    cutoff, gone = time.time() - max_age_s, 0
    for folder in root.iterdir():
        try:
            if folder.is_dir() and folder.stat().st_mtime < cutoff:
                shutil.rmtree(folder, ignore_errors=True)
                gone += 1
        except OSError:
            continue
    return gone
