"""At most one running model job per visitor, and none past its visitor's leaving.

A visitor is a client (``identity.client_key``: every tab and session hash from one address together; the session
hash where no address is known): the labs and the explorer have slots of their own (``widgets.LAB_QUEUE``,
``MODEL_QUEUE``), so without this one visitor could hold both at once; a second job from the same visitor is
refused with a readable message while the first runs.

A job whose visitor left (gradio marks its event dead when the page or the API client disconnects) stops at its
next check: ``check_left`` (which ``Budget.check`` calls between a run's rounds and a lab's steps) raises, and a
streaming job is closed between the values it yields, so its slot frees within about a step."""
from __future__ import annotations

import inspect
import threading
from collections.abc import Callable
from contextlib import contextmanager

import gradio as gr

from . import clients
from . import gradio_internals as internals
from .identity import client_key

BUSY = "you already have a run going (one run at a time per visitor, from all your tabs): wait for it to finish"
LEFT = "stopped: the visitor who asked for this run has left"
_running: set[str] = set()
_lock = threading.Lock()
_job = threading.local()  # the event of the job this thread is running a step of (None outside a job)


def one_per_session(fn: Callable) -> Callable:
    """fn with a trailing ``request: gr.Request`` parameter (gradio fills it) that claims the visitor for the call
    and stops it once the visitor leaves; calls without a request (tests, scripts) are not gated."""
    sig = inspect.signature(fn)
    n = len(sig.parameters)

    def split(args, kwargs):
        request = kwargs.pop("request", None)
        return (args[:n], args[n]) if len(args) > n else (args, request)

    if inspect.isgeneratorfunction(fn):
        def gated(*args, **kwargs):
            args, request = split(args, kwargs)
            with _claim(request) as event:
                inner = fn(*args, **kwargs)
                try:
                    while True:
                        with _running_step(event):
                            value = next(inner, StopIteration)
                        if value is StopIteration or not _alive(event):
                            return
                        yield value
                finally:
                    inner.close()
    else:
        def gated(*args, **kwargs):
            args, request = split(args, kwargs)
            with _claim(request) as event, _running_step(event):
                return fn(*args, **kwargs)
    request = inspect.Parameter("request", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None,
                                annotation=gr.Request)
    gated.__signature__ = sig.replace(parameters=[*sig.parameters.values(), request])
    gated.__annotations__ = {**getattr(fn, "__annotations__", {}), "request": gr.Request}
    gated.__name__ = getattr(fn, "__name__", "gated")
    return gated


def visitor(request) -> str | None:
    """Who a request is from: its client's address, else its session hash (None: not gated)."""
    if request is None:
        return None
    return client_key(request, getattr(request, "session_hash", None))


def event_of(request):
    """The queue's event that carries this request (None outside a served queue)."""
    raw = getattr(request, "request", None)
    if raw is None:
        return None
    for queue in list(clients.QUEUES):
        for event in internals.running(queue):
            if internals.event_request(event) is raw:
                return event
    return None


def _alive(event) -> bool:
    return event is None or internals.event_alive(event)


def check_left() -> None:
    """ValueError when the visitor of the job this thread runs has left: the work stops here."""
    if not _alive(getattr(_job, "event", None)):
        raise ValueError(LEFT)


@contextmanager
def _running_step(event):
    before, _job.event = getattr(_job, "event", None), event
    try:
        yield
    finally:
        _job.event = before


@contextmanager
def _claim(request):
    key = visitor(request)
    if key is None:
        yield None
        return
    with _lock:
        if key in _running:
            raise gr.Error(BUSY)
        _running.add(key)
    try:
        yield event_of(request)
    finally:
        with _lock:
            _running.discard(key)
