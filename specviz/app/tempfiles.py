"""Files the app hands to visitors (exports, lab CSVs, trained drafts): each in a fresh folder under one root,
and every folder there older than ``MAX_AGE_S`` swept away whenever a new one is made; and a cap on a folder's
total size (``SPECVIZ_TEMP_MB`` each for that root and gradio's upload folder), oldest files removed first, so
a public server's disk does not fill (gradio's own copies are removed by ``gr.Blocks(delete_cache=...)``)."""
from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

ROOT = Path(tempfile.gettempdir()) / "specviz-files"
MAX_AGE_S = 3600.0
ENV, DEFAULT_MB = "SPECVIZ_TEMP_MB", 256


def max_bytes() -> int:
    """A temp folder's cap in bytes (SPECVIZ_TEMP_MB, default 256)."""
    try:
        return int(float(os.environ.get(ENV) or DEFAULT_MB) * 2**20)
    except ValueError:
        raise ValueError(f"{ENV} must be a number of megabytes, got {os.environ[ENV]!r}") from None


def fresh_folder(prefix: str, root: Path | None = None, max_age_s: float | None = None) -> Path:
    """A new empty folder for one download, after sweeping folders older than max_age_s from the root and
    capping the root's size."""
    root = root or ROOT
    root.mkdir(parents=True, exist_ok=True)
    sweep(root, MAX_AGE_S if max_age_s is None else max_age_s)
    cap_size(root, max_bytes())
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


def _files(root: Path):
    """(modification time, bytes, path) of every file under root (a file that goes meanwhile is left out)."""
    for folder, _, names in os.walk(root):
        for name in names:
            try:
                st = os.stat(os.path.join(folder, name))
            except OSError:
                continue
            yield st.st_mtime, st.st_size, os.path.join(folder, name)


def folder_bytes(root: Path) -> int:
    """The bytes of every file under root."""
    return sum(size for _, size, _ in _files(root))


def cap_size(root: Path, limit: int) -> int:
    """Delete the root's oldest files (by modification time) until the rest take at most ``limit`` bytes, and the
    folders they leave empty; returns how many files went."""
    files = list(_files(root))
    total, gone = sum(size for _, size, _ in files), 0
    for _, size, path in sorted(files):
        if total <= limit:
            break
        try:
            os.remove(path)
        except OSError:
            continue
        total, gone = total - size, gone + 1
        _drop_empty(Path(path).parent, Path(root))
    return gone


def _drop_empty(folder: Path, root: Path) -> None:
    while folder != root and root in folder.parents:
        try:
            folder.rmdir()
        except OSError:
            return
        folder = folder.parent


def discard(path) -> None:
    """Delete an upload once it has been read; only files in gradio's upload folder go (a gallery run or a
    test's file is never an upload), and a missing one is fine."""
    from gradio.utils import get_upload_folder

    if not path:
        return
    try:
        file = Path(path).resolve()
        if Path(get_upload_folder()).resolve() in file.parents:
            file.unlink()
    except OSError:
        pass
