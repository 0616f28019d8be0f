"""A GGUF's header read directly, without torch (GGUF v2/v3: metadata, then tensor infos, then aligned data): the
``gguf`` package's reader builds a numpy view per metadata item, and a 262,144-token vocabulary made it take 30-90 s;
skipping the vocabulary's strings takes well under a second."""
from __future__ import annotations

import mmap
import os
import struct
from pathlib import Path

import numpy as np

# GGML type name -> (id, weights per block, bytes per block), as ggml-common.h lays the blocks out: those read here
BLOCKS = {"F32": (0, 1, 4), "F16": (1, 1, 2), "Q4_0": (2, 32, 18), "Q5_0": (6, 32, 22), "Q8_0": (8, 32, 34),
          "Q4_K": (12, 256, 144), "Q6_K": (14, 256, 210)}
GGUF_TYPES = {ggml_id: name for name, (ggml_id, _, _) in BLOCKS.items()}  # the same, by GGML id
_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}


class Header:
    """A GGUF's metadata (scalars and short arrays; the vocabulary's long arrays are skipped: ``skipped`` names
    them) and its tensors' (type id, shape (ne0, ne1, ...), absolute byte offset)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        with open(self.path, "rb") as f:
            if os.fstat(f.fileno()).st_size < 24:
                raise ValueError(f"{self.path.name} is not a GGUF file (shorter than a GGUF header)")
            self.buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        try:
            self._read()
        except (struct.error, ValueError, UnicodeDecodeError, OverflowError) as e:
            raise ValueError(f"{self.path.name} is not a readable GGUF file ({e})") from e
        finally:
            self.buf.close()

    def _read(self) -> None:
        if self.buf[:4] != b"GGUF":
            raise ValueError("no GGUF magic")
        version, n_tensors, n_kv = struct.unpack_from("<IQQ", self.buf, 4)
        if version not in (2, 3):
            raise ValueError(f"GGUF version {version}; versions 2 and 3 are read")
        self.at, self.fields, self.skipped, self.tensors = 24, {}, [], {}
        for _ in range(n_kv):
            key = self._string()
            kind = self._u32()
            value = self._value(kind, key)
            if value is not None:
                self.fields[key] = value
        infos = []
        for _ in range(n_tensors):
            name, dims = self._string(), self._u32()
            shape = struct.unpack_from(f"<{dims}Q", self.buf, self.at)
            self.at += 8 * dims
            ggml_type, offset = struct.unpack_from("<IQ", self.buf, self.at)
            self.at += 12
            infos.append((name, ggml_type, tuple(int(s) for s in shape), offset))
        align = int(self.fields.get("general.alignment", 32))
        start = (self.at + align - 1) // align * align
        self.tensors = {name: (t, shape, start + offset) for name, t, shape, offset in infos}

    def _u32(self) -> int:
        (v,) = struct.unpack_from("<I", self.buf, self.at)
        self.at += 4
        return v

    def _string(self) -> str:
        (n,) = struct.unpack_from("<Q", self.buf, self.at)
        s = self.buf[self.at + 8: self.at + 8 + n]
        self.at += 8 + n
        return s.decode("utf-8", "replace")

    def _value(self, kind: int, key: str):
        if kind == 8:
            return self._string()
        if kind in _SCALARS:
            fmt = "<" + _SCALARS[kind]
            (v,) = struct.unpack_from(fmt, self.buf, self.at)
            self.at += struct.calcsize(fmt)
            return v
        if kind != 9:
            raise ValueError(f"metadata {key!r} has an unknown type {kind}")
        item, n = struct.unpack_from("<IQ", self.buf, self.at)
        self.at += 12
        if item in _SCALARS and item != 7:
            size = struct.calcsize("<" + _SCALARS[item])
            values = np.frombuffer(self.buf, dtype="<" + _SCALARS[item], count=n, offset=self.at)
            self.at += size * n
            if n <= 4096:
                return values.tolist()
        else:
            for _ in range(n):
                self._value(item, key)
            if n <= 4096:
                return None  # short arrays of strings are not needed here
        self.skipped.append(key)
        return None
