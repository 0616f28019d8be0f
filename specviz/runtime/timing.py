"""A run's own timing: wall time that waits for queued GPU work, on the CPU threads ``threads.policy`` gives it."""
from __future__ import annotations

import time
from contextlib import contextmanager, nullcontext

import torch

from .threads import policy


class Stopwatch:
    """Wall-clock timing that waits for queued GPU work, so CUDA timings are honest. The timed work (a decoding run's
    prefill and rounds, the speculative run's and the baseline's alike) runs on a CPU with torch's own team sized by
    ``threads.policy`` for the cores free at the start of the block."""

    def __init__(self, device: torch.device):
        self.sync = {"cuda": torch.cuda.synchronize, "mps": torch.mps.synchronize}.get(device.type, _no_sync)
        self.team = policy.team if device.type == "cpu" else nullcontext
        self.seconds = 0.0

    @contextmanager
    def running(self):
        """Adds the wall time of the with-block to ``seconds``."""
        self.sync()
        t0 = time.perf_counter()
        try:
            with self.team():
                yield self
        finally:
            self.sync()
            self.seconds += time.perf_counter() - t0

    def take(self) -> float:
        """Returns the accumulated seconds and starts again from zero."""
        seconds, self.seconds = self.seconds, 0.0
        return seconds


def _no_sync() -> None:
    pass
