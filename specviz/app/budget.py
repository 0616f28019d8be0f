"""One request's work budget (SPECVIZ_MAX_REQUEST_S, default 120 s: a free 2-vCPU Space stays responsive): a
request whose estimate is over it is refused at once, saying the estimate and what to reduce, and a running one
is stopped at its next check (between runs, or between a lab's batches) once its time is spent, or once the
visitor who asked for it has left (``sessions.check_left``)."""
from __future__ import annotations

import os
import time
from dataclasses import replace

import torch

from ..decoder import autoregressive_generate
from ..labs import pilot_cache
from ..labs.estimate import seconds
from .sessions import check_left

ENV, DEFAULT_S = "SPECVIZ_MAX_REQUEST_S", 120.0
GRACE = 1.5  # a running request may overrun its estimate by this factor before it is stopped


def max_request_s() -> float:
    try:
        return float(os.environ.get(ENV) or DEFAULT_S)
    except ValueError:
        raise ValueError(f"{ENV} must be a number of seconds, got {os.environ[ENV]!r}") from None


class Budget:
    """Started when a request starts: ``refuse_over`` before the work, ``check`` while it runs."""

    def __init__(self, seconds: float | None = None):
        self.seconds = max_request_s() if seconds is None else seconds
        self.start = time.perf_counter()

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def refuse_over(self, estimate_s: float, what: str, reduce: str) -> None:
        """ValueError when ``what`` would take longer than the budget."""
        if estimate_s > self.seconds:
            raise ValueError(f"{what} would take about {seconds(estimate_s)} s; this server runs at most "
                             f"{seconds(self.seconds)} s per request ({ENV}): {reduce}")

    def check(self) -> None:
        """ValueError once the request has run past its budget (with some grace), or its visitor has left: the
        work stops here. A check also lets another thread run: a job in pure Python (an engine paste's reading,
        checked every line) otherwise holds the interpreter while another visitor's run, back from each of its
        short torch calls, waits up to the switch interval for it, each call."""
        check_left()
        time.sleep(0)  # the interpreter offered to a waiting thread now, not after its 5 ms switch interval (below)
        if self.elapsed > self.seconds * GRACE:
            raise ValueError(f"stopped after {self.elapsed:.0f} s: over this server's {self.seconds:.0f} s per "
                             f"request ({ENV}); ask for less")


def token_seconds(model, ids, cfg, tokens: int = 8) -> float:
    """Seconds per generated token of a short autoregressive pilot of ``model`` on ``ids`` with cfg's settings,
    after two untimed tokens (a model's first calls lay out and pack its weights: timed, they priced a
    comparison of the bundled family at several times its real length). Measured once per model, prompt and
    sampling settings, then scaled by a target pass timed now over the one timed beside it (``labs.pilot_cache``):
    a later gate answers after a few passes."""
    key = ("token", pilot_cache.identity(model), pilot_cache.prompt_key(ids), cfg.temperature, cfg.top_k, cfg.top_p,
           tokens, torch.get_num_threads())
    now_s = pilot_cache.pass_now(model, ids, cfg)
    if (hit := pilot_cache.get(key, (model,), now_s)) is not None:
        return hit[0] * hit[1]
    autoregressive_generate(model, ids, replace(cfg, max_new_tokens=2, tree=None, record=False))
    t0 = time.perf_counter()
    trace = autoregressive_generate(model, ids, replace(cfg, max_new_tokens=tokens, tree=None))
    seconds = (time.perf_counter() - t0) / max(1, len(trace.new_tokens))
    pilot_cache.put(key, seconds, (model,), now_s)
    return seconds
