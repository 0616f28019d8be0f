"""The labs' default forms priced once in the background when the server starts (``SPECVIZ_WARM``, on unless "0"):
the default models load, and each lab's pilot goes into ``labs.pilot_cache`` beside a target pass timed with it, so
a visitor's first estimate of a default form, and a refusal of it asked with more tokens, prompts or repeats, answer
after a few passes instead of after a pilot (tens of seconds on a loaded machine). The models load at the server's
priority (a visitor may wait on the store's lock meanwhile); the pricing then runs at the lowest CPU priority.

At that priority a busy machine gives the thread a sliver of a core: on 2 cores beside two busy loops a pass timed
there took 3.4-4.1 s against 0.09-0.10 s on a normal thread (measured, the load average the same for both). So no
price from here is ever used as measured: a request times its own passes now and scales the pilot by them over the
pass timed beside it (``pilot_cache.get``). A failure is logged, never raised: the labs then price their first
request themselves, as without it."""
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


def load(store: ModelStore) -> None:
    """The labs' default models into the store: the target, the default draft and the default draft model."""
    target = store.default_target()
    for draft in {store.default_draft(), store.default_draft(model=True)}:
        store.pair(target, draft)


def start(store: ModelStore) -> threading.Thread | None:
    """``warm`` on a daemon thread, unless ``SPECVIZ_WARM=0``: the models load at the server's priority (a loading
    thread holds the store's lock, which a visitor's request may wait on), the pricing at the lowest."""
    if not enabled():
        return None

    def run():
        try:
            load(store)
        except Exception as e:  # noqa: BLE001 - each lab says what is missing below
            log.warning("could not load the labs' default models ahead: %s", e)
        with contextlib.suppress(AttributeError, OSError):  # this thread only (Linux)
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
        warm(store)

    thread = threading.Thread(target=run, name="specviz-warm", daemon=True)
    thread.start()
    return thread
