"""The labs' default forms priced once in the background when the server starts (``SPECVIZ_WARM``, on unless "0"):
the default models load, and each lab's floor and pilot go into ``labs.pilot_cache``, so a visitor's first
estimate of a default form, and a refusal of it asked with more tokens, prompts or repeats, answer at once instead
of after a pilot (tens of seconds on a loaded machine). Its own thread runs at the lowest CPU priority (torch's
worker threads keep theirs), and a failure is logged, never raised: the labs then price their first request
themselves, as without it."""
from __future__ import annotations

import contextlib
import logging
import os
import threading

from . import sweep_tab, tree_tab
from .store import ModelStore

ENV = "SPECVIZ_WARM"
log = logging.getLogger(__name__)


def enabled() -> bool:
    return os.environ.get(ENV, "1").strip() != "0"


def warm(store: ModelStore) -> list[str]:
    """Prices every lab's default form; the labs that could not be priced, each with its reason."""
    failed = []
    for name, price in (("k sweep lab", sweep_tab.warm), ("tree lab", tree_tab.warm)):
        try:
            price(store)
        except Exception as e:  # noqa: BLE001 - a missing model or a failed pilot: that lab prices itself later
            log.warning("could not price the %s's default form ahead: %s", name, e)
            failed.append(f"{name}: {e}")
    return failed


def start(store: ModelStore) -> threading.Thread | None:
    """``warm`` on a daemon thread at a low priority, unless ``SPECVIZ_WARM=0``."""
    if not enabled():
        return None

    def run():
        with contextlib.suppress(AttributeError, OSError):  # this thread only (Linux)
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
        warm(store)

    thread = threading.Thread(target=run, name="specviz-warm", daemon=True)
    thread.start()
    return thread
