"""Freed C-heap memory handed back to the system (glibc's malloc_trim).

glibc keeps what a program frees for its next allocations, and after a large block is freed it raises its own
thresholds so that later large blocks (a prefill's logits, a KV cache) come from the heap instead of their own
mappings: once freed they stay resident. After a decode of Gemma-3 270M that was about 29 MB of freed heap
(2026-12-04, docs/benchmarks/2026-12-04-gemma-memory.log); after a 262,144-token tokenizer.json's parse, about
200 MB. ``give_back_freed_memory`` returns the free pages; it is called where such a burst ends (a tokenizer parsed,
a lean forward's cache collected).
"""
from __future__ import annotations

import ctypes
import ctypes.util
from functools import cache


@cache
def _trim():
    """glibc's malloc_trim, or None where the C library has none (musl, macOS)."""
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):
        return None


def give_back_freed_memory() -> bool:
    """Return the C heap's free pages to the system; False where the C library cannot (no malloc_trim)."""
    trim = _trim()
    if trim is None:
        return False
    trim(0)
    return True
