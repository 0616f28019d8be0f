"""How many threads each call of the C layers runs on: chosen per call from the call's measured costs and the cores
free at that moment, for a speculative run's passes and the autoregressive baseline's alike.

Why: the C layers' threads meet at a barrier several times a layer. Where other work holds a core, a thread of a
two-thread pass waits at each barrier until the scheduler runs its partner again, and a small call (a draft's step,
a short verify) costs many times its own work: with one of two cores taken, the bundled target and its default draft
at k = 6 ran 1.07x over the baseline on two threads against 2.16x on one. So each call (its shape: a layer stack's
depth and rows, a matmul's size) goes on

    the fastest of the thread counts the free cores allow: c threads where ``free`` >= c - SLACK (one always),
    a larger count only where its fastest timing saves at least GAIN of the smaller's (a call that cannot fill two
    cores stays on one), and a count not yet timed PROBES times for this shape timed first (the larger first);
    every RETRY-th call of a shape on the allowed count tried least, timed again.

``choose`` is that rule, a pure function. The costs are each shape's fastest timing on each count (other work only
adds time, so the fastest is the call's own cost); the free cores (``Cores``) are the host's idle core-seconds over
the last interval (/proc/stat, the cores this process may run on) plus this process's own CPU seconds (what it ran
it could run again), per wall second, sampled at most every INTERVAL seconds (a read of /proc/stat costs about
30 us; a draft's step about 300). Without /proc/stat: the cores less the 1-minute load average, plus this process's own.

``SPECVIZ_THREADS``: unset or "auto", as above; a number n: every call on min(n, torch.get_num_threads()) threads.
torch's thread count (``torch.set_num_threads``, a benchmark's --threads) stays the ceiling.
"""
from __future__ import annotations

import os
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

ENV = "SPECVIZ_THREADS"
SLACK = 0.25   # c threads need c - SLACK cores free: a core busy a quarter of the time still serves
GAIN = 0.10    # a larger count must save this share of the smaller's time (it risks waiting on a busy core)
PROBES = 3     # timings of each allowed count before the fastest is trusted (the first one warms the team)
RETRY = 200    # every RETRY-th call of a shape goes on the count tried least (a probe that other work slowed is redone)
INTERVAL = 0.2  # seconds between two readings of the free cores


@dataclass
class Timings:
    """One call shape's timings: the fastest seconds and the number of calls on each thread count."""

    fastest: dict[int, float] = field(default_factory=dict)
    calls: dict[int, int] = field(default_factory=dict)

    def add(self, threads: int, seconds: float) -> None:
        self.calls[threads] = self.calls.get(threads, 0) + 1
        self.fastest[threads] = min(seconds, self.fastest.get(threads, seconds))


def choose(timings: Timings, free: float, most: int) -> int:
    """The thread count for one call of a shape timed as ``timings``, with ``free`` cores free for this process and at
    most ``most`` threads (the module's docstring has the rule)."""
    allowed = list(range(1, allowed_most(free, most) + 1))
    untimed = [c for c in allowed if timings.calls.get(c, 0) < PROBES]
    if untimed:
        return max(untimed)
    if sum(timings.calls.values()) % RETRY == RETRY - 1:  # now and then the count tried least, timed again
        return min(allowed, key=lambda c: (timings.calls[c], -c))
    best = 1
    for c in allowed[1:]:
        if timings.fastest[c] <= (1 - GAIN) * timings.fastest[best]:
            best = c
    return best


def allowed_most(free: float, most: int) -> int:
    """The most threads ``free`` cores allow (c where free >= c - SLACK; one always), at most ``most``."""
    return max(1, min(most, int(free + SLACK)))


def free_cores(idle: float, own: float, wall: float, cores: int) -> float:
    """Cores free for this process over an interval of ``wall`` seconds: the host's ``idle`` core-seconds plus the
    process's ``own`` CPU seconds, per second, at most ``cores``."""
    return min(float(cores), (idle + own) / wall) if wall > 0 else float(cores)


def _idle_seconds(cpus: set[int]) -> float | None:
    """Idle core-seconds since boot of these CPUs (idle + iowait in /proc/stat), or None where it cannot be read."""
    try:
        with open("/proc/stat") as f:
            lines = [line.split() for line in f if line.startswith("cpu") and not line.startswith("cpu ")]
    except OSError:
        return None
    ticks = sum(int(v[4]) + int(v[5]) for v in lines if int(v[0][3:]) in cpus)
    return ticks / os.sysconf("SC_CLK_TCK")


def _cpus() -> set[int]:
    return set(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else set(range(os.cpu_count() or 1))


class Cores:
    """The cores free for this process, read at most every INTERVAL seconds (``free_cores`` over the last interval).
    ``clock``, ``cpu`` and ``idle`` can be replaced (a test's virtual ones)."""

    def __init__(self, clock=time.perf_counter, cpu=time.process_time, idle=None):
        self.cpus = _cpus()
        self.count = len(self.cpus)
        self.clock, self.cpu = clock, cpu
        self.idle = idle or (lambda: _idle_seconds(self.cpus))
        self.at = self.last = None  # when, and (idle, own) then
        self.value = self._from_load(0.0)

    def free(self) -> float:
        now = self.clock()
        if self.at is not None and now - self.at < INTERVAL:
            return self.value
        idle, own = self.idle(), self.cpu()
        if self.at is not None:
            wall, own_rate = now - self.at, (own - self.last[1]) / max(now - self.at, 1e-9)
            self.value = self._from_load(own_rate) if idle is None or self.last[0] is None else \
                free_cores(idle - self.last[0], own - self.last[1], wall, self.count)
        self.at, self.last = now, (idle, own)
        return self.value

    def _from_load(self, own_rate: float) -> float:
        """Where /proc/stat cannot be read (and before a first interval): the cores less the 1-minute load average,
        plus the cores this process itself kept busy."""
        try:
            load = os.getloadavg()[0]
        except OSError:
            return float(self.count)
        return min(float(self.count), max(0.0, self.count - load) + own_rate)


class Policy:
    """Each call shape's timings and the free cores: ``threads(shape)`` before a call, ``took`` after it (or both
    with ``timed``); ``team()`` around a run's work sizes torch's own team the same way."""

    def __init__(self, cores: Cores | None = None):
        self.cores = cores or Cores()
        self.timings: dict[tuple, Timings] = {}
        self._local = threading.local()  # .ceiling: torch's thread count where a team() block began

    def ceiling(self) -> int:
        """The most threads a call may take: torch's thread count (as it was where a ``team()`` block began)."""
        return getattr(self._local, "ceiling", None) or torch.get_num_threads()

    @contextmanager
    def team(self):
        """Within it, torch's own operators (a verify's softmax, a draft's sampling) run on the threads the free cores
        allow (one where other work holds a core: a small operator's parallel region waits on a descheduled thread
        as a pass's barrier does); torch's count is put back after. Nested blocks keep the outer one's setting."""
        if getattr(self._local, "ceiling", None) is not None:
            yield
            return
        ceiling = self._local.ceiling = torch.get_num_threads()
        forced = fixed()
        count = min(forced, ceiling) if forced is not None else allowed_most(self.cores.free(), ceiling)
        if count != ceiling:
            torch.set_num_threads(count)
        try:
            yield
        finally:
            self._local.ceiling = None
            if torch.get_num_threads() != ceiling:
                torch.set_num_threads(ceiling)

    def threads(self, shape: tuple) -> int:
        most = self.ceiling()
        forced = fixed()
        if forced is not None:
            return min(forced, most)
        if most == 1:
            return 1
        return choose(self.timings.setdefault(shape, Timings()), self.cores.free(), most)

    def took(self, shape: tuple, threads: int, seconds: float) -> None:
        self.timings.setdefault(shape, Timings()).add(threads, seconds)

    @contextmanager
    def timed(self, shape: tuple):
        """The thread count for one call of ``shape`` (yielded), and the call's time recorded."""
        count, t0 = self.threads(shape), time.perf_counter()
        yield count
        self.took(shape, count, time.perf_counter() - t0)


def fixed() -> int | None:
    """SPECVIZ_THREADS as a number of threads, or None for "auto" (a ValueError that says what to write else)."""
    value = os.environ.get(ENV, "").strip().lower()
    if value in ("", "auto"):
        return None
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"{ENV} must be 'auto' or a number of threads >= 1, got {os.environ[ENV]!r}")
    return int(value)


policy = Policy()
