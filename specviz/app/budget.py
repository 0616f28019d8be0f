"""One request's work budget (SPECVIZ_MAX_REQUEST_S, default 120 s: a free 2-vCPU Space stays responsive): a
request whose estimate is over it is refused at once, saying the estimate and what to reduce, and a running one
is stopped at its next check (between runs, or between a lab's batches) once its time is spent, or once the
visitor who asked for it has left (``sessions.check_left``).

An Estimate time that says a form fits is a promise its Run keeps (``promise`` and ``promised``): the gate prices
the form again at passes timed then, and where the machine has slowed since and that price is over the budget,
the run goes ahead as the estimate said, within PROMISE_S of it, saying both prices. An estimate that says it
would refuse withdraws the promise (``withdraw``), so the two never disagree: what the estimate admits the gate
admits."""
from __future__ import annotations

import os
import time
from collections import OrderedDict
from dataclasses import dataclass, replace

import torch

from ..decoder import autoregressive_generate
from ..labs import pilot_cache
from ..labs.estimate import seconds
from .sessions import check_left

ENV, DEFAULT_S = "SPECVIZ_MAX_REQUEST_S", 120.0
GRACE = 1.5  # a running request may overrun its estimate by this factor before it is stopped
PROMISE_S, MAX_PROMISES = 600.0, 256  # how long an estimate that fits binds its Run; forms remembered at most
_promises: OrderedDict = OrderedDict()  # form key -> (likely seconds, time.monotonic() when estimated)


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


@dataclass(frozen=True)
class Promise:
    """What Estimate time said of a form that fits: its likely seconds, and how long ago it said so."""
    likely_s: float
    age_s: float

    def words(self, now, budget: Budget) -> str:
        """Markdown: both prices, for a run that goes ahead as its estimate said although ``now`` is over."""
        return (f"\n\n*Estimate time said this fits ({seconds(self.likely_s)} s, {self.age_s:.0f} s ago); priced again "
                f"now it is {now}: the machine is busier than then. It runs as the estimate said, and stops if it "
                f"passes {seconds(budget.seconds * GRACE)} s.*")


def form_key(lab: str, *form) -> tuple:
    """A form's key: the lab and every value as the form sent it."""
    return (lab, *map(repr, form))


def promise(key: tuple, likely_s: float, budget_s: float) -> None:
    """Remembers an estimate of the form ``key``: a promise where it fits ``budget_s``, none where it does not (any
    earlier promise of the form withdrawn)."""
    withdraw(key)
    if likely_s <= budget_s:
        _promises[key] = (likely_s, time.monotonic())
        while len(_promises) > MAX_PROMISES:
            _promises.popitem(last=False)


def withdraw(key: tuple) -> None:
    """Forgets the promise of the form ``key``, where there is one: an estimate of it that says it would refuse
    binds its Run to nothing."""
    _promises.pop(key, None)


def promised(key: tuple, budget_s: float) -> Promise | None:
    """The promise an estimate of this very form made within PROMISE_S, at a price within ``budget_s`` (the
    budget as it is now), or None."""
    if key not in _promises:
        return None
    likely_s, when = _promises[key]
    if likely_s > budget_s:
        return None
    if (age := time.monotonic() - when) > PROMISE_S:
        del _promises[key]
        return None
    return Promise(likely_s=likely_s, age_s=age)


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
