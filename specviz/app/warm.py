"""The labs' default forms priced once in the background when the server starts (``SPECVIZ_WARM``, on unless "0"):
the default models load, and each lab's pilot goes into ``labs.pilot_cache`` beside a target pass timed with it, so
a visitor's first estimate of a default form, and a refusal of it asked with more tokens, prompts or repeats, answer
after a few passes instead of after a pilot (tens of seconds on a loaded machine). The models load and the C layers
compile at the server's priority (a visitor's first request waits on both); the pricing then runs at the lowest.

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

from ..config import EXAMPLE_PROMPTS, DecodeConfig
from ..labs.sweep import warm_up
from . import sweep_tab, tree_tab
from .forms import encode
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
    """The labs' default models into the store (the target, the default draft, the default draft model), and a few
    untimed tokens through each pair: the C layers compile and the weights lay out here. A visitor's first request
    waits on both; at the pricing's priority a compiler (it inherits the thread's) sat 5 minutes on a busy machine
    while the request waited on it (measured, 2 cores, load 10-11)."""
    target = store.default_target()
    for draft in {store.default_draft(), store.default_draft(model=True)}:
        model, tok, drafter = store.pair(target, draft)
        warm_up(model, {draft: drafter}, encode(tok, EXAMPLE_PROMPTS[0]), DecodeConfig(temperature=0.0, max_new_tokens=4))


def start(store: ModelStore) -> threading.Thread | None:
    """``warm`` on a daemon thread, unless ``SPECVIZ_WARM=0``: the models load and the C layers compile at the
    server's priority (``load``: a visitor's request would wait on both), the pricing runs at the lowest."""
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
