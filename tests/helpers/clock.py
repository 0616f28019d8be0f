"""A virtual clock for tests of timing logic: wall-clock sleeps oversleep on a loaded host, a virtual second never."""
import time


class VirtualClock:
    """``time.perf_counter`` plus the seconds ``spend`` has added: monotonic, and a spend costs exactly what it says.
    Install it with ``monkeypatch.setattr(time, "perf_counter", clock)``."""

    def __init__(self):
        self.real, self.spent = time.perf_counter, 0.0

    def __call__(self) -> float:
        return self.real() + self.spent

    def spend(self, seconds: float) -> None:
        self.spent += seconds
