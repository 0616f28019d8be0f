"""A queue no visitor can fill: limits per client (``identity.client_key``: its address, so every session hash it
opens counts together) on gradio's queue, checked as each event joins it, and on the bytes a client uploads per
minute. Model jobs (``widgets.MODEL_QUEUE``, ``LAB_QUEUE`` and
``ENGINE_QUEUE``) are counted apart from light events (page loads, sliders, imports): a client may have at most
``SPECVIZ_CLIENT_JOBS`` model jobs queued or running and ``SPECVIZ_CLIENT_EVENTS`` events waiting, and light
events are never turned away because model jobs fill the queue."""
from __future__ import annotations

import functools
import os
import time
import weakref
from dataclasses import dataclass

from . import gradio_internals as internals
from . import session_state, values
from .identity import client_key

HEAVY = ("model", "lab", "engine")  # model jobs' concurrency ids (widgets.*_QUEUE)
QUEUES: weakref.WeakSet = weakref.WeakSet()  # every guarded queue: sessions.py finds a job's event in them


def _env_int(name: str, default: int) -> int:
    try:
        return int(os.environ.get(name) or default)
    except ValueError:
        raise ValueError(f"{name} must be a whole number, got {os.environ[name]!r}") from None


@dataclass(frozen=True)
class Limits:
    jobs: int = 2  # model jobs one client may have queued or running (SPECVIZ_CLIENT_JOBS)
    events: int = 8  # events of any kind one client may have waiting (SPECVIZ_CLIENT_EVENTS)
    model_queue: int = 32  # model jobs waiting from all clients together
    light_queue: int = 256  # light events waiting from all clients together
    upload_mb_per_min: float = 40.0  # bytes one client may upload per minute (SPECVIZ_CLIENT_UPLOAD_MB)

    @classmethod
    def from_env(cls, model_queue: int = 32) -> Limits:
        try:
            upload = float(os.environ.get("SPECVIZ_CLIENT_UPLOAD_MB") or cls.upload_mb_per_min)
        except ValueError:
            raise ValueError("SPECVIZ_CLIENT_UPLOAD_MB must be a number of megabytes per minute") from None
        return cls(jobs=_env_int("SPECVIZ_CLIENT_JOBS", cls.jobs), events=_env_int("SPECVIZ_CLIENT_EVENTS", cls.events),
                   model_queue=model_queue, upload_mb_per_min=upload)


def refusal(queue, fn, key: str | None, limits: Limits) -> str | None:
    """Why an event of ``fn`` from client ``key`` may not join the queue now (None: it may)."""
    heavy = getattr(fn, "concurrency_id", None) in HEAVY
    mine_jobs = mine_waiting = all_waiting = 0
    for event, running in internals.events(queue):
        is_heavy = internals.event_concurrency(event) in HEAVY
        all_waiting += not running and is_heavy == heavy
        if key is None or client_key(internals.event_request(event), internals.event_session(event)) != key:
            continue
        mine_jobs += is_heavy and internals.event_alive(event)
        mine_waiting += not running
    if heavy and mine_jobs >= limits.jobs:
        return (f"you already have {mine_jobs} model jobs queued or running (at most {limits.jobs} per visitor, "
                "from all your tabs together): wait for one to finish")
    if mine_waiting >= limits.events:
        return f"you already have {mine_waiting} requests waiting (at most {limits.events} per visitor): wait a moment"
    if all_waiting >= (limits.model_queue if heavy else limits.light_queue):
        return "the server's queue for model jobs is full: try again in a minute"
    return None


def guard(queue, limits: Limits) -> None:
    """Check every event against ``limits`` as it joins ``queue`` (gradio's own max_size then stays unset: light
    events are bounded per client, model jobs by ``limits.model_queue``)."""
    if getattr(queue, "_specviz_limits", None) is not None:
        return
    internals.check()
    internals.unbounded(queue)
    queue._specviz_limits = limits
    QUEUES.add(queue)
    internals.wrap_push(queue, functools.partial(_guarded, queue, limits, [time.monotonic()]))


def _guarded(queue, limits: Limits, swept: list, push):
    """The queue's push behind the limits: an event refused here never joins (HTTP 400, its reason on the page)."""
    @functools.wraps(push)
    async def guarded(body, request, username):
        if time.monotonic() - swept[0] > 60:  # idle sessions' state goes, checked at most once a minute
            swept[0] = time.monotonic()
            session_state.forget_idle(internals.state_holder_of(queue))
        fn = internals.function_of(queue, body)
        why = values.refusal(fn, body.data) or refusal(queue, fn, client_key(request, body.session_hash), limits)
        if why is not None:
            return False, why, "error"
        return await push(body=body, request=request, username=username)

    return guarded
