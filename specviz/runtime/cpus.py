"""The CPUs a forward without torch may use, and when to give one of them up: for the numpy sequences
(``llamacpp_seq.Sequence`` on llama.cpp's threads, ``gemma_sequence.GemmaSequence`` on the C stack's), whose threads
spin at barriers while one of them waits for a core that other work holds, so that a pass costs many times its
quiet cost. (The torch side chooses threads per call in ``threads.py``.)"""
from __future__ import annotations

import os
from collections import deque

WINDOW = 200  # passes a stall is remembered for
RETRY = 200  # passes on one thread before the threads asked for are tried again


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity, where the system says), the default thread count."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


class StallWatch:
    """Passes timed by row count: ``stalled`` says yes once ``count`` of the last ``window`` passes took over
    ``factor`` times the fastest pass of their row count seen before them, and over ``floor`` seconds (calls of a
    fraction of a millisecond vary by more than the factor with the host's scheduling alone); the first of a row
    count has nothing to be compared with. Other work on a core stalls pass after pass; the window keeps a few
    hiccups hours apart (a page fault, the collector) from adding up to a verdict over a long-lived process."""

    def __init__(self, factor: float, count: int, floor: float = 0.0, window: int = WINDOW, retry: int = RETRY):
        self.factor, self.count, self.floor, self.retry = factor, count, floor, retry
        self.fastest: dict[int, float] = {}  # rows -> the fastest pass of that many rows seen
        self.recent: deque[bool] = deque(maxlen=max(window, count))  # stalled or not, the last passes
        self.stalls = 0  # stalls among them
        self.on_one = 0  # passes on one thread since the last verdict

    def threads(self, rows: int, seconds: float, threads: int, asked: int) -> int:
        """The threads for the next pass after one of ``rows`` rows took ``seconds`` on ``threads``: the same while
        passes run, one once they stall (``stalled``), and after ``retry`` passes on one thread ``asked`` again,
        the stall count cleared: the other work may have ended (where it has not, the next stalls send the pass
        back to one thread). Passes on one thread are not compared (they are slower without stalling)."""
        if threads > 1:
            if self.stalled(rows, seconds):
                self.on_one = 0
                return 1
            return threads
        self.on_one += 1
        if asked > 1 and self.on_one >= self.retry:
            self.recent.clear()
            self.stalls = self.on_one = 0
            return asked
        return 1

    def stalled(self, rows: int, seconds: float) -> bool:
        best = self.fastest.get(rows)
        self.fastest[rows] = seconds if best is None else min(best, seconds)
        if len(self.recent) == self.recent.maxlen:
            self.stalls -= self.recent[0]  # the oldest leaves the window
        self.recent.append(best is not None and seconds > max(self.factor * best, self.floor))
        self.stalls += self.recent[-1]
        return self.stalls >= self.count
