"""A folder zipped in memory, as a user zips a recording to upload it."""
from __future__ import annotations

import io
import zipfile
from pathlib import Path


def zip_folder(folder: Path, prefix: str = "", extra: dict[str, bytes] | None = None) -> bytes:
    """The zip's bytes: every file under ``folder`` as ``prefix`` + its path relative to the folder (with entries
    for the folders, as zip tools write them), then ``extra`` {entry name: bytes} as given."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(folder.rglob("*")):
            name = prefix + path.relative_to(folder).as_posix()
            if path.is_dir():
                archive.writestr(name + "/", b"")
            else:
                archive.writestr(name, path.read_bytes())
        for name, data in (extra or {}).items():
            archive.writestr(name, data)
    return buffer.getvalue()
