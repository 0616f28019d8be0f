"""A run's own timing: wall time that waits for queued GPU work, on the CPU threads ``threads.policy`` gives it; and
the share of it the LM head took, where a forward can tell (``head_clock``)."""
from __future__ import annotations

import threading
import time
from contextlib import contextmanager, nullcontext

import torch

from .threads import policy


class HeadClock(threading.local):
    """The LM head's wall seconds, added by each forward that can time its head apart from its layers (the lean
    forwards, in C or torch, and transformers' through a hook on the output embeddings), per thread: a Stopwatch
    reads what its block added. llama.cpp computes its head inside one decode call and adds nothing."""

    seconds = 0.0
    passes = 0

    def add(self, seconds: float) -> None:
        self.seconds += seconds
        self.passes += 1

    @contextmanager
    def timing(self):
        """Adds the with-block's wall time as one head pass."""
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.add(time.perf_counter() - t0)


head_clock = HeadClock()


class Stopwatch:
    """Wall-clock timing that waits for queued GPU work, so CUDA timings are honest. The timed work (a decoding run's
    prefill and rounds, the speculative run's and the baseline's alike) runs on a CPU with torch's own team sized by
    ``threads.policy`` for the cores free at the start of the block."""

    def __init__(self, device: torch.device):
        self.sync = {"cuda": torch.cuda.synchronize, "mps": torch.mps.synchronize}.get(device.type, _no_sync)
        self.team = policy.team if device.type == "cpu" else nullcontext
        self.seconds = 0.0
        # the LM head's share of ``seconds``; None where no forward timed one, and on a GPU (the head's kernels run
        # asynchronously, after the timer around their launch has stopped)
        self.head_seconds: float | None = None

    @contextmanager
    def running(self):
        """Adds the wall time of the with-block to ``seconds``, and what its forwards' heads took to
        ``head_seconds``."""
        self.sync()
        t0, head0, passes0 = time.perf_counter(), head_clock.seconds, head_clock.passes
        try:
            with self.team():
                yield self
        finally:
            self.sync()
            self.seconds += time.perf_counter() - t0
            if head_clock.passes > passes0 and self.sync is _no_sync:  # on a GPU the head's kernels run after
                self.head_seconds = (self.head_seconds or 0.0) + head_clock.seconds - head0

    def take(self) -> float:
        """Returns the accumulated seconds and starts again from zero (the head's too: ``take_head`` first)."""
        seconds, self.seconds, self.head_seconds = self.seconds, 0.0, None
        return seconds

    def take_head(self) -> float | None:
        """The head's share of the accumulated seconds (None where no forward timed its head); ``take`` resets it."""
        return self.head_seconds


def _no_sync() -> None:
    pass
