"""At most one running model job per visitor (gradio session): the labs and the explorer have slots of their own
(``widgets.LAB_QUEUE``, ``MODEL_QUEUE``), so without this one visitor could hold both at once; a second job from
the same browser tab is refused with a readable message while the first runs (a button's own repeat clicks are
already ignored by gradio while its event is pending)."""
from __future__ import annotations

import inspect
import threading
from collections.abc import Callable
from contextlib import contextmanager

import gradio as gr

BUSY = "you already have a run going in this browser tab: wait for it to finish (one run at a time per visitor)"
_running: set[str] = set()
_lock = threading.Lock()


def one_per_session(fn: Callable) -> Callable:
    """fn with a trailing ``request: gr.Request`` parameter (gradio fills it) that claims the visitor's session
    for the call; calls without a request (tests, scripts) are not gated."""
    sig = inspect.signature(fn)
    n = len(sig.parameters)

    def split(args, kwargs):
        request = kwargs.pop("request", None)
        return (args[:n], args[n]) if len(args) > n else (args, request)

    if inspect.isgeneratorfunction(fn):
        def gated(*args, **kwargs):
            args, request = split(args, kwargs)
            with _claim(request):
                yield from fn(*args, **kwargs)
    else:
        def gated(*args, **kwargs):
            args, request = split(args, kwargs)
            with _claim(request):
                return fn(*args, **kwargs)
    request = inspect.Parameter("request", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None,
                                annotation=gr.Request)
    gated.__signature__ = sig.replace(parameters=[*sig.parameters.values(), request])
    gated.__annotations__ = {**getattr(fn, "__annotations__", {}), "request": gr.Request}
    gated.__name__ = getattr(fn, "__name__", "gated")
    return gated


@contextmanager
def _claim(request):
    key = getattr(request, "session_hash", None)
    if key is None:
        yield
        return
    with _lock:
        if key in _running:
            raise gr.Error(BUSY)
        _running.add(key)
    try:
        yield
    finally:
        with _lock:
            _running.discard(key)
