"""The CPUs a forward without torch may use, and when to give one of them up: for the numpy sequences
(``llamacpp_seq.Sequence`` on llama.cpp's threads, ``gemma_sequence.GemmaSequence`` on the C stack's), whose threads
spin at barriers while one of them waits for a core that other work holds, so that a pass costs many times its
quiet cost. (The torch side chooses threads per call in ``threads.py``.)"""
from __future__ import annotations

import os
from collections import deque

WINDOW = 200  # passes a stall is remembered for


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity, where the system says), the default thread count."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


class StallWatch:
    """Passes timed by row count: ``stalled`` says yes once ``count`` of the last ``window`` passes took over
    ``factor`` times the fastest pass of their row count seen before them, and over ``floor`` seconds (calls of a
    fraction of a millisecond vary by more than the factor with the host's scheduling alone); the first of a row
    count has nothing to be compared with. Other work on a core stalls pass after pass; the window keeps a few
    hiccups hours apart (a page fault, the collector) from adding up to a verdict over a long-lived process."""

    def __init__(self, factor: float, count: int, floor: float = 0.0, window: int = WINDOW):
        self.factor, self.count, self.floor = factor, count, floor
        self.fastest: dict[int, float] = {}  # rows -> the fastest pass of that many rows seen
        self.recent: deque[bool] = deque(maxlen=max(window, count))  # stalled or not, the last passes
        self.stalls = 0  # stalls among them

    def stalled(self, rows: int, seconds: float) -> bool:
        best = self.fastest.get(rows)
        self.fastest[rows] = seconds if best is None else min(best, seconds)
        if len(self.recent) == self.recent.maxlen:
            self.stalls -= self.recent[0]  # the oldest leaves the window
        self.recent.append(best is not None and seconds > max(self.factor * best, self.floor))
        self.stalls += self.recent[-1]
        return self.stalls >= self.count
