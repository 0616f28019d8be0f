"""Prompt lookup's match (``PromptLookupDrafter``, and ``specviz.slim``'s decoder, which holds no torch): what followed
the latest earlier occurrence of the context's last n-gram."""
from __future__ import annotations

import numpy as np


def lookup_continuation(ids: list[int], k: int, max_ngram: int, min_ngram: int) -> list[int]:
    """Up to k tokens that followed the latest earlier occurrence of ids' last n-gram (n from max_ngram down)."""
    if k <= 0:
        return []
    t = np.asarray(ids, dtype=np.int64)
    for n in range(min(max_ngram, len(ids) - 1), min_ngram - 1, -1):
        windows = np.lib.stride_tricks.sliding_window_view(t[:-1], n)  # every n-gram that has a token after it
        hits = np.flatnonzero((windows == t[-n:]).all(axis=1))
        if len(hits):
            start = int(hits[-1]) + n
            return ids[start:start + k]
    return []
