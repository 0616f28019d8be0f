"""Shared by the app tests: a ModelStore of tiny random models, a free port, serving a demo, the settings and
the /generate call the API tests use, and for the browser tests where chromium is, how to launch it, and
whether a missing browser skips (locally) or fails (SPECVIZ_REQUIRE_BROWSER=1, CI). Import from here."""
import atexit
import json
import os
import socket
from contextlib import contextmanager
from types import SimpleNamespace

import pytest

from specviz import Trace
from specviz.app import (
    batch_tab,
    compare_tab,
    distill_tab,
    explorer,
    launch,
    learn_tab,
    lossless_tab,
    sweep_tab,
    temperature_tab,
    tree_tab,
)
from specviz.app.store import ModelStore

SETTINGS = dict(k=3, k_policy="fixed", temperature=0.8, top_k=0, top_p=0.95, max_new_tokens=12, seed=7)
VALID = dict(prompt="ROMEO:", target="tiny-target", draft="tiny", k=3, seed=7, max_new_tokens=12)  # /generate's
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update"]
if os.environ.get("SPECVIZ_REQUIRE_BROWSER") == "1":  # CI: a missing browser is a failure, not a skip
    import playwright.sync_api as sync_api

    assert os.path.exists(CHROMIUM), f"{CHROMIUM} is missing (apt-get install -y chromium)"
else:
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install playwright)")
needs_chromium = pytest.mark.skipif(not os.path.exists(CHROMIUM),
                                    reason=f"{CHROMIUM} is missing (apt-get install -y chromium)")


def tiny_store(pair=None, drafts=None, targets=("tiny-target",), **options):
    """A ModelStore over tiny random models: ``pair`` (target, draft, tokenizer; default ``ui_models()``) behind
    every name in ``targets``, the draft as "tiny" plus any extra ``drafts`` ({name: model}), prompt lookup and
    the bundled registry's drafters by name. ``options`` go to ModelStore (default_draft="prompt-lookup", say)."""
    from specviz.models import load_drafter
    from tests.helpers.models import ui_models

    target, draft, tok = pair or ui_models(window=256)
    named = {"tiny": draft, **(drafts or {})}
    return ModelStore(load_model=lambda name: (target, tok),
                      load_drafter=lambda name: named[name] if name in named else load_drafter(name),
                      list_targets=lambda: list(targets), list_drafters=lambda: [*named, "prompt-lookup"],
                      default_target=targets[0], **options)


def handlers(store: ModelStore) -> SimpleNamespace:
    """Every tab's handlers bound to ``store``, in one namespace (their names are unique across tabs), called
    as the app calls them (ValueErrors become gr.Error)."""
    bound = {}
    for tab in (explorer, sweep_tab, tree_tab, temperature_tab, lossless_tab, distill_tab, compare_tab, batch_tab,
                learn_tab):
        bound |= vars(tab.handlers(store))
    return SimpleNamespace(**bound)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def generate(client, **change) -> Trace:
    """/generate through gradio_client with VALID's arguments, some changed; the trace it returned."""
    out = client.predict(api_name="/generate", **{**VALID, **change})
    return Trace.from_json(out if isinstance(out, str) else json.dumps(out))


def wait_idle(demo, timeout: float = 120.0) -> None:
    """Wait until the demo's queue runs no job: a run a test no longer watches (a baseline, the spread's pairs)
    must finish before the server closes, or the process may abort at exit mid-computation."""
    import time

    queue, deadline = getattr(demo, "_queue", None), time.time() + timeout
    while queue is not None and any(queue.active_jobs) and time.time() < deadline:
        time.sleep(0.2)
    if (warming := getattr(demo, "warming", None)) is not None:  # the labs' defaults priced at start
        warming.join(max(0.0, deadline - time.time()))


@contextmanager
def serve(demo):
    """The demo served (ui.launch: theme and CSS) on a free local port; yields its URL."""
    port = free_port()
    launch(demo, prevent_thread_lock=True, server_name="127.0.0.1", server_port=port, quiet=True)
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        wait_idle(demo)
        demo.close()


_BROWSER: dict = {}  # this test process's one chromium (launched at its first page, closed at exit)


def _browser():
    if "browser" not in _BROWSER or not _BROWSER["browser"].is_connected():
        playwright = _BROWSER.get("playwright") or sync_api.sync_playwright().start()
        _BROWSER.update(playwright=playwright,
                        browser=playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS))
        if "closer" not in _BROWSER:
            _BROWSER["closer"] = atexit.register(_close_browser)
    return _BROWSER["browser"]


def _close_browser() -> None:
    browser, playwright = _BROWSER.pop("browser", None), _BROWSER.pop("playwright", None)
    if browser is not None and browser.is_connected():
        browser.close()
    if playwright is not None:
        playwright.stop()


@contextmanager
def chromium_page(**page_options):
    """A page in a context of its own (no cookies, storage or cache shared with another test's), in the process's
    one chromium: a launch costs about a second a test, a context a few milliseconds."""
    context = _browser().new_context(**page_options)
    try:
        yield context.new_page()
    finally:
        context.close()


def forbid_model_work(monkeypatch) -> None:
    """Every pilot, sweep and tree lab fails the test if it runs: a refusal must come before any of them."""
    import pytest

    from specviz.app import sweep_tab, tree_tab
    from specviz.labs import estimate

    def fail(*a, **k):
        pytest.fail("model work on the refusal path")

    for name in ("speculative_generate", "autoregressive_generate"):
        monkeypatch.setattr(estimate, name, fail)
    monkeypatch.setattr(tree_tab, "tree_lab", fail)
    monkeypatch.setattr(sweep_tab, "iter_sweep", fail)


def count_pass_timings(monkeypatch, pass_s: float | None = None) -> list:
    """Every ``pilot_cache.pass_now`` call from here on, appended to the list returned: a refusal "at once" makes
    exactly one (counted, not timed: a loaded host cannot move a count). With ``pass_s`` each call answers that
    pass time instead of timing one (a virtual clock: what a refusal suggests then cannot move with the load)."""
    from specviz.labs import pilot_cache

    calls, timed = [], pilot_cache.pass_now
    answer = timed if pass_s is None else (lambda *a, **k: pass_s)
    monkeypatch.setattr(pilot_cache, "pass_now", lambda *a, **k: calls.append(1) or answer(*a, **k))
    return calls


def count_checks(monkeypatch) -> list:
    """Every ``Budget.check`` from here on, in any thread, appended to the list returned as the queue event of the
    job it checked (None outside a served job): the steps of each run and lab, counted (a loaded host slows each
    step, and cannot move how many ran)."""
    from specviz.app import budget, sessions

    calls, check = [], budget.Budget.check

    def counted(self):
        calls.append(getattr(sessions._job, "event", None))  # list.append is atomic: threads may check at once
        return check(self)

    monkeypatch.setattr(budget.Budget, "check", counted)
    return calls


def steps_of(calls: list, event, start: int = 0, end: int | None = None) -> int:
    """How many of ``calls[start:end]`` (``count_checks``) were steps of ``event``."""
    return sum(e is event for e in calls[start:end])
