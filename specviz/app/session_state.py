"""Sessions' state freed: at once when a page closes (demo.py's unload), and after ``SPECVIZ_SESSION_TTL_S`` of
disuse for an API client, whose session never closes."""
from __future__ import annotations

import datetime
import os

from . import gradio_internals as internals

SESSION_TTL_ENV, SESSION_TTL_S = "SPECVIZ_SESSION_TTL_S", 1800.0


def forget(holder, session_hash: str | None) -> None:
    """Drop a session's state (its traces, the values its page last showed) from gradio's StateHolder."""
    if holder is None or session_hash is None:
        return
    internals.forget_session(holder, session_hash)


def forget_idle(holder, ttl_s: float | None = None) -> int:
    """Drop the state of every session unused for ``ttl_s`` seconds; returns how many went."""
    if holder is None:
        return 0
    ttl_s = float(os.environ.get(SESSION_TTL_ENV) or SESSION_TTL_S) if ttl_s is None else ttl_s
    cutoff = datetime.datetime.now() - datetime.timedelta(seconds=ttl_s)
    idle = [s for s, used in internals.last_used(holder).items() if used < cutoff]
    for session_hash in idle:
        forget(holder, session_hash)
    return len(idle)
