"""Caches of files this process builds and later loads (the C layers' library, a model's GGUF), trusted only as far as
they can be: the folder must be this user's own and writable by no one else (checked, and made so where it is new),
and a cached file is loaded only if its content hash is the one recorded when it was written: in this process, or
in the digest file written beside it in that same private folder. A file planted under a predictable name, or
changed after it was written, is not loaded: the caller builds it again."""
from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

_written: dict[Path, str] = {}  # path -> the sha256 this process recorded when it wrote it

GGUF_CACHE_ENV = "SPECVIZ_GGUF_CACHE"


def cache_folder() -> Path:
    """Where GGUFs written from a model's weights, and each GGUF's config and tokenizer, are cached."""
    return Path(os.environ.get(GGUF_CACHE_ENV) or Path.home() / ".cache" / "specviz" / "gguf")


def private_folder(folder: Path) -> Path:
    """``folder``, created with mode 0700 where missing; ValueError where it is not a folder this user owns and only
    this user can write (a cache in a folder others can write would load what they put there)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    st = os.lstat(folder)
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise ValueError(f"the cache folder {folder} is not a plain folder (a link?): point the cache elsewhere")
    if st.st_uid != os.getuid():
        raise ValueError(f"the cache folder {folder} belongs to another user: point the cache to a folder of yours")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise ValueError(f"the cache folder {folder} can be written by other users (mode {stat.S_IMODE(st.st_mode):o}):"
                         f" chmod 700 it or point the cache to a private folder")
    return folder


def digest(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _sidecar(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def record(path: Path) -> Path:
    """Note the hash of a file this process has just written (and write it beside the file); returns the path."""
    path = Path(path)
    _written[path] = digest(path)
    tmp = _sidecar(path).with_suffix(".part")
    tmp.write_text(_written[path])
    os.replace(tmp, _sidecar(path))
    return path


def trusted(path: Path) -> bool:
    """Whether a cached file may be loaded: it exists and its content hash is the one recorded when it was written
    (by this process, or in its digest file). A file that fails is removed, so the caller writes it again."""
    path = Path(path)
    if not path.is_file() or path.is_symlink():
        return False
    want = _written.get(path)
    if want is None:
        try:
            want = _sidecar(path).read_text().strip()
        except OSError:
            want = None
    ok = want is not None and digest(path) == want
    if not ok:
        path.unlink(missing_ok=True)
        _sidecar(path).unlink(missing_ok=True)
    return ok
