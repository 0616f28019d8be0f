"""Every use of gradio's private internals, in one place, checked when the app starts.

gradio publishes no hook for what the per-client limits need, so specviz reads and wraps five things it keeps to
itself: a Blocks' queue (``Blocks._queue``); the queue's ``push`` (to refuse an event before it joins); the events the
queue holds (waiting, per concurrency id, and running, in its active jobs); a queued event's fields (``request``,
``session_hash``, ``concurrency_id``, ``alive``); and the ``StateHolder`` (to forget a closed page's state). A sixth
is launch's ``_frontend``: off, launch skips its probe of the page it serves (one 3-second HEAD, which a busy host
missed, and launch then refused to start), and ``demo.launch`` waits for the page itself. They were
read from gradio ``PINNED`` (requirements.txt pins it); ``check`` verifies each against the installed gradio and
raises ``InternalsMoved`` naming the version and what moved, so that a gradio release that moves one cannot turn the
limits off in silence. No other module touches a private name of gradio's."""
from __future__ import annotations

import inspect
import logging
import threading
from types import SimpleNamespace

PINNED = "6.31.0"  # the gradio these internals were read from (requirements.txt pins the same)
log = logging.getLogger(__name__)


class InternalsMoved(RuntimeError):
    """The installed gradio no longer has an internal the per-client limits rely on."""


def _problems() -> list[str]:
    """What the installed gradio lacks of the internals used here (empty: all present)."""
    from gradio import blocks, queueing, state_holder

    problems = []
    push = getattr(queueing.Queue, "push", None)
    if push is None or list(inspect.signature(push).parameters)[:4] != ["self", "body", "request", "username"]:
        problems.append("Queue.push(body, request, username)")
    queue_init = inspect.getsource(queueing.Queue.__init__)
    for name in ("active_jobs", "event_queue_per_concurrency_id", "blocks", "max_size"):
        if f"self.{name}" not in queue_init:
            problems.append(f"Queue.{name}")
    if "self.queue" not in inspect.getsource(queueing.EventQueue.__init__):
        problems.append("EventQueue.queue")
    try:
        event = queueing.Event(None, SimpleNamespace(concurrency_id="c"), None, None)
        for name in ("alive", "request", "session_hash", "concurrency_id"):
            if not hasattr(event, name):
                problems.append(f"Event.{name}")
    except TypeError:
        problems.append("Event(session_hash, fn, request, username)")
    holder = state_holder.StateHolder()
    for name in ("session_data", "time_last_used", "lock"):
        if not hasattr(holder, name):
            problems.append(f"StateHolder.{name}")
    if "self._queue" not in inspect.getsource(blocks.Blocks.queue) or "self.fns" not in inspect.getsource(
            blocks.BlocksConfig.__init__):
        problems.append("Blocks._queue / BlocksConfig.fns")
    launch = blocks.Blocks.launch
    if "_frontend" not in inspect.signature(launch).parameters or "_frontend and not networking.url_ok" not in \
            inspect.getsource(launch):
        problems.append("Blocks.launch(_frontend=...) guarding its url_ok probe")
    return problems


_checked: list[bool] = []
_lock = threading.Lock()


def check() -> None:
    """Raise InternalsMoved if the installed gradio moved an internal used here; a version other than PINNED whose
    internals are all in place is logged and served. Checked once a process."""
    import gradio

    with _lock:
        if _checked:
            return
        problems = _problems()
        if problems:
            raise InternalsMoved(f"gradio {gradio.__version__} no longer has {', '.join(problems)}, which specviz's "
                                 f"per-client limits use (read from gradio {PINNED}): install gradio=={PINNED}")
        if gradio.__version__ != PINNED:
            log.warning("gradio %s is installed; specviz's use of its internals was read from %s (checked: present)",
                        gradio.__version__, PINNED)
        _checked.append(True)


def without_launch_probe() -> dict:
    """Blocks.launch's keyword that skips its probe of the served page (the caller waits for the page instead)."""
    return {"_frontend": False}


# -- the queue --------------------------------------------------------------------------------------------------
def queue_of(blocks):
    """A Blocks' queue (after ``Blocks.queue()``)."""
    return blocks._queue


def wrap_push(queue, make):
    """Replace the queue's push with ``make(push)``: an ``async (body, request, username)`` that may refuse an event
    by returning ``(False, message, "error")`` or pass it on to the ``push`` it was given."""
    queue.push = make(queue.push)


def unbounded(queue) -> None:
    """gradio's own queue size off (the per-client limits bound it instead)."""
    queue.max_size = None


def function_of(queue, body):
    """The BlockFunction an event's body calls (None: none named)."""
    return queue.blocks.fns.get(body.fn_index) if body.fn_index is not None else None


def state_holder_of(queue):
    """The StateHolder of the Blocks a queue serves (None before launch)."""
    return getattr(queue.blocks, "state_holder", None)


def events(queue):
    """(event, running) for every event the queue holds: waiting in its per-concurrency queues, then running."""
    for event_queue in list(queue.event_queue_per_concurrency_id.values()):
        for event in list(event_queue.queue):
            yield event, False
    for jobs in list(queue.active_jobs):
        for event in jobs or ():
            yield event, True


def running(queue):
    """The events the queue is running now."""
    return (event for event, is_running in events(queue) if is_running)


def event_request(event):
    """The starlette request an event came with."""
    return event.request


def event_session(event) -> str | None:
    return event.session_hash


def event_concurrency(event) -> str | None:
    return event.concurrency_id


def event_alive(event) -> bool:
    """Whether the page or client that sent the event is still connected."""
    return event.alive


# -- sessions' state ---------------------------------------------------------------------------------------------
def state_holder_of_request(request):
    """The StateHolder of the server a gr.Request reached (None outside a served app)."""
    app = getattr(getattr(request, "request", None), "app", None)
    return getattr(app, "state_holder", None)


def forget_session(holder, session_hash: str) -> None:
    """Drop a session's state (its gr.State values, the values its page last showed) from gradio's StateHolder."""
    with holder.lock:
        holder.session_data.pop(session_hash, None)
        holder.time_last_used.pop(session_hash, None)


def last_used(holder) -> dict:
    """{session hash: when its state was last used (a naive datetime)}, a copy."""
    with holder.lock:
        return dict(holder.time_last_used)
