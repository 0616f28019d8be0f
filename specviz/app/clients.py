"""A queue no visitor can fill: limits per client (its address, so every session hash it opens counts together)
on gradio's queue, checked as each event joins it, and on the bytes a client uploads per minute.

A client is the first hop of ``X-Forwarded-For`` where the direct peer is a proxy on a loopback or private
address (a Space's front end is one), else the peer's address (a private peer that forwards no address is one
visitor per session). Model jobs (``widgets.MODEL_QUEUE`` and
``LAB_QUEUE``) are counted apart from light events (page loads, sliders, imports): a client may have at most
``SPECVIZ_CLIENT_JOBS`` model jobs queued or running and ``SPECVIZ_CLIENT_EVENTS`` events waiting, and light
events are never turned away because model jobs fill the queue."""
from __future__ import annotations

import functools
import ipaddress
import os
import time
import weakref
from dataclasses import dataclass

from . import values

HEAVY = ("model", "lab")  # the concurrency ids of model jobs (widgets.MODEL_QUEUE, LAB_QUEUE)
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


def _private(host: str) -> bool:
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host in ("localhost", "testclient")
    return address.is_loopback or address.is_private


def client_key(request, session_hash: str | None = None) -> str | None:
    """The client behind a request (a fastapi.Request, a gr.Request or a starlette Request): the first hop of
    X-Forwarded-For where the peer is a proxy on a private address, else a public peer's address; a private peer
    that forwards nothing (a local run, a proxy that does not say) is one visitor per ``session_hash``."""
    client = getattr(request, "client", None)
    host = getattr(client, "host", None) if client is not None else None
    headers = getattr(request, "headers", None) or {}
    forwarded = headers.get("x-forwarded-for", "") if hasattr(headers, "get") else ""
    if host is not None and not _private(host):
        return host
    return forwarded.split(",")[0].strip() or session_hash


def _events(queue):
    """(event, running) for every event the queue holds."""
    for event_queue in queue.event_queue_per_concurrency_id.values():
        for event in event_queue.queue:
            yield event, False
    for jobs in queue.active_jobs:
        for event in jobs or ():
            yield event, True


def refusal(queue, fn, key: str | None, limits: Limits) -> str | None:
    """Why an event of ``fn`` from client ``key`` may not join the queue now (None: it may)."""
    heavy = getattr(fn, "concurrency_id", None) in HEAVY
    mine_jobs = mine_waiting = all_waiting = 0
    for event, running in _events(queue):
        is_heavy = event.concurrency_id in HEAVY
        all_waiting += not running and is_heavy == heavy
        if key is None or client_key(event.request, event.session_hash) != key:
            continue
        mine_jobs += is_heavy and event.alive
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
    push, queue.max_size, queue._specviz_limits = queue.push, None, limits
    QUEUES.add(queue)
    swept = [time.monotonic()]

    @functools.wraps(push)
    async def guarded(body, request, username):
        if time.monotonic() - swept[0] > 60:  # idle sessions' state goes, checked at most once a minute
            swept[0] = time.monotonic()
            forget_idle(getattr(queue.blocks, "state_holder", None))
        fn = queue.blocks.fns.get(body.fn_index) if body.fn_index is not None else None
        why = values.refusal(fn, body.data) or refusal(queue, fn, client_key(request, body.session_hash), limits)
        if why is not None:
            return False, why, "error"  # HTTP 400 whose detail the page shows as the error
        return await push(body=body, request=request, username=username)

    queue.push = guarded



# -- sessions' state: freed when a page closes (demo.py's unload), and after SESSION_TTL_S for API clients ---------
SESSION_TTL_ENV, SESSION_TTL_S = "SPECVIZ_SESSION_TTL_S", 1800.0


def forget(holder, session_hash: str | None) -> None:
    """Drop a session's state (its traces, the values its page last showed) from gradio's StateHolder."""
    if holder is None or session_hash is None:
        return
    with holder.lock:
        holder.session_data.pop(session_hash, None)
        holder.time_last_used.pop(session_hash, None)


def forget_idle(holder, ttl_s: float | None = None) -> int:
    """Drop the state of every session unused for ``ttl_s`` seconds (an API client's session never closes);
    returns how many went."""
    import datetime

    if holder is None:
        return 0
    ttl_s = float(os.environ.get(SESSION_TTL_ENV) or SESSION_TTL_S) if ttl_s is None else ttl_s
    cutoff = datetime.datetime.now() - datetime.timedelta(seconds=ttl_s)
    idle = [s for s, used in list(holder.time_last_used.items()) if used < cutoff]
    for session_hash in idle:
        forget(holder, session_hash)
    return len(idle)
