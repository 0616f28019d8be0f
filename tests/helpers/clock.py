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


class VirtualMachine:
    """A pure virtual clock (no real time leaks in) with models whose every forward costs ``slow`` x its base seconds
    on it: ``slow`` is how loaded the machine is, or how starved the thread that runs them. Installs itself."""

    def __init__(self, monkeypatch):
        self.clock, self.slow = VirtualClock(), 1.0
        self.clock.real = lambda: 0.0
        monkeypatch.setattr(time, "perf_counter", self.clock)

    def costing(self, model, base_s: float):
        model.register_forward_pre_hook(lambda module, args: self.clock.spend(base_s * self.slow))
        return model
