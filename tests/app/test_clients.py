"""A queue no visitor can fill, and no job past its visitor's leaving: per-client limits on gradio's queue
(specviz/app/clients.py), one model job per client across every endpoint, and a disconnect that frees the slot
(specviz/app/sessions.py). The served tests speak gradio's queue over plain HTTP (tests/helpers/http.py)."""
import json
import time
from types import SimpleNamespace

import gradio as gr
import httpx
import pytest

from specviz.app import build_demo
from tests.helpers.app import count_checks, serve, steps_of, tiny_store
from tests.helpers.http import call, fn_index, join, session, stream, until, upload
from tests.helpers.traces import sample_trace

ATTACKER, VISITOR, OTHER = "203.0.113.66", "198.51.100.7", "198.51.100.8"
GENERATE = ["ROMEO:", "tiny-target", "tiny", 3, 0.8, 0, 1.0, 8, 0, 0.0, "chain", "auto"]  # /generate's 12 inputs


def generate_args(tokens: int, tree: str = "chain") -> list:
    return [*GENERATE[:7], tokens, 0, 0.0, tree, "auto"]


@pytest.fixture(scope="module")
def served():
    demo = build_demo(tiny_store())
    with serve(demo) as url:
        yield url, demo


@pytest.fixture(scope="module")
def long_served():
    """A served demo whose target's window takes 512 new tokens (long runs to leave)."""
    from tests.helpers.models import ui_models

    demo = build_demo(tiny_store(ui_models(window=1024)))
    with serve(demo) as url:
        yield url, demo


def test_one_client_is_one_visitor_however_many_sessions_it_opens():
    from specviz.app.identity import client_key
    from specviz.app.sessions import one_per_session

    def req(session_hash, peer, forwarded=None):
        headers = {"x-forwarded-for": forwarded} if forwarded else {}
        return SimpleNamespace(session_hash=session_hash, client=SimpleNamespace(host=peer), headers=headers)

    assert client_key(req("a", "10.0.0.2", "203.0.113.9")) == "203.0.113.9"  # behind one proxy (conftest: 1)
    assert client_key(req("a", "8.8.8.8", "6.6.6.6")) == "8.8.8.8"  # a public peer cannot claim another address
    assert client_key(req("a", "127.0.0.1"), "a") == "a"  # a local peer that forwards nothing: one visitor a session

    def slow(x):
        yield x
        yield x + 1

    gated = one_per_session(slow)
    first = gated(1, req("a", "10.0.0.2", ATTACKER))
    assert next(first) == 1
    with pytest.raises(gr.Error, match="one run at a time per visitor"):  # another tab (session) of the same client
        next(gated(5, req("b", "10.0.0.2", ATTACKER)))
    assert list(gated(5, req("c", "10.0.0.2", VISITOR))) == [5, 6]  # another client
    assert list(first) == [2]


@pytest.mark.slow
def test_forty_sessions_of_one_client_cannot_lock_out_another_visitor(served, tmp_path):
    url, demo = served
    gen = fn_index(demo, "generate")
    refused = []
    for _ in range(40):  # one client, 40 sessions, each queuing a model job
        r = join(url, gen, generate_args(64, "dynamic:16,6,4"), session(), ATTACKER)
        if r.status_code != 200:
            refused.append(r)
        from specviz.app.gradio_internals import events
        from specviz.app.identity import client_key
        held = [e for e, _ in events(demo._queue) if client_key(e.request) == ATTACKER]
        assert len(held) <= 2  # at any moment, at most two of its model jobs queued or running
    assert len(refused) >= 30 and all(r.status_code == 400 for r in refused)
    assert "at most 2 per visitor" in refused[0].json()["detail"]

    t0 = time.perf_counter()
    assert httpx.get(url, headers={"x-forwarded-for": VISITOR}, timeout=30).status_code == 200  # the page
    for index in [i for i, fn in demo.fns.items() if any(t[1] == "load" for t in fn.targets)]:  # its load events
        done = call(url, index, [c.value for c in demo.fns[index].inputs], VISITOR, timeout=60)
        assert done["success"], done
    path = tmp_path / "trace.json"
    path.write_text(sample_trace().to_json())
    served_path = upload(url, "trace.json", path.read_bytes(), VISITOR).json()[0]
    imported = call(url, fn_index(demo, "load"), [{"path": served_path, "orig_name": "trace.json",
                                                   "meta": {"_type": "gradio.FileData"}}], VISITOR, timeout=60)
    assert imported["success"], imported
    light_s = time.perf_counter() - t0
    done = call(url, gen, generate_args(4), VISITOR, timeout=120)
    assert done["success"], done
    trace = json.loads(done["output"]["data"][0])
    assert len([t for r in trace["rounds"] for t in r["emitted"]]) == 4
    print(f"\nanother visitor beside a 40-session client: page load + import in {light_s:.2f} s, "
          f"/generate in {time.perf_counter() - t0 - light_s:.2f} s")  # printed: the bound is the count held above


def _steps_around_leaving(url, demo, job: tuple, probe: tuple, checks: list) -> tuple[int, int]:
    """Start ``job`` (api name, data) as ATTACKER, leave once it has run a while, run VISITOR's ``probe`` (it shares
    the job's slot, so it starts once the job has stopped) and return the job's steps (``count_checks``) while its
    visitor stayed and after it left."""
    sh = session()
    assert join(url, fn_index(demo, job[0]), job[1], sh, ATTACKER).status_code == 200
    with stream(url, sh, ATTACKER) as messages:
        until(messages, "process_starts")
        started = len(checks)
        deadline = time.monotonic() + 120  # a wait, not a bound: a job that fails at once never checks a step
        while not any(e is not None for e in checks[started:]):
            assert time.monotonic() < deadline, f"{job[0]} ran no step (did it fail at once?)"
            time.sleep(0.01)
        time.sleep(1.0)  # well into the run
        left = len(checks)
    event = next(e for e in reversed(checks[:left]) if e is not None)
    sh2 = session()
    assert join(url, fn_index(demo, probe[0]), probe[1], sh2, VISITOR).status_code == 200
    with stream(url, sh2, VISITOR) as messages:
        assert until(messages, "process_completed")["success"]
    return steps_of(checks, event, started, left), steps_of(checks, event, left)


LONG_TREE = "dynamic:128,16,16"  # 512 tokens of it (the explorer takes 256): about 15 s of the tiny models' work
RUN = ["ROMEO:", "tiny-target", "tiny", 8, "fixed", 0.8, 0, 1.0, 256, 0, False, None, 0.0, LONG_TREE, "auto",
       "leviathan"]  # the explorer's Run: 16 inputs
SWEEP = ["tiny-target", ["tiny", "prompt-lookup"], "ROMEO:\n\nJULIET:\n\nTo be, or not to be", 1, 16, 0.8, 0, 1.0, 64, 0,
         False, 4, 0.4]
TREE_LAB = ["tiny-target", "tiny", "ROMEO:", "2", "", 0.0, 0, 1.0, 8, 1, 0]


@pytest.mark.slow
@pytest.mark.parametrize("job, probe", [
    (("generate", generate_args(512, LONG_TREE)), ("generate", generate_args(4))),
    (("run", RUN), ("generate", generate_args(4))),
    (("run_sweep", SWEEP), ("run_tree_lab", TREE_LAB)),
], ids=["generate", "explorer-run", "k-sweep"])
def test_leaving_mid_run_stops_the_job_within_its_next_steps_and_frees_the_slot(long_served, job, probe, monkeypatch):
    """A job whose visitor leaves stops at its next steps: after leaving it runs no more steps than it ran in the
    second before (counted, not timed), though it had many more to go; then the slot serves another visitor."""
    url, demo = long_served
    checks = count_checks(monkeypatch)
    stayed, after = _steps_around_leaving(url, demo, job, probe, checks)
    print(f"\n{job[0]}: {stayed} steps while its visitor stayed about a second, {after} after it left")
    assert stayed >= 1 and after <= stayed
    again = call(url, fn_index(demo, "generate"), generate_args(4), ATTACKER)  # and the visitor may run again
    assert again["success"], again


def _import_in(url, demo, sh: str, path) -> None:
    served_path = upload(url, "trace.json", path.read_bytes(), VISITOR).json()[0]
    data = [{"path": served_path, "orig_name": "trace.json", "meta": {"_type": "gradio.FileData"}}]
    assert join(url, fn_index(demo, "load"), data, sh, VISITOR).status_code == 200
    with stream(url, sh, VISITOR) as messages:
        assert until(messages, "process_completed")["success"]


@pytest.mark.slow
def test_a_closed_page_frees_its_state_at_once(served, tmp_path):
    url, demo = served
    path = tmp_path / "trace.json"
    path.write_text(sample_trace().to_json())
    sh = session()
    with httpx.Client(timeout=30) as client, client.stream("GET", f"{url}gradio_api/heartbeat/{sh}") as beat:
        lines = beat.iter_lines()  # kept: a dropped iterator closes the stream
        next(lines)  # the page is open
        _import_in(url, demo, sh, path)
        assert demo.state_holder.session_data[sh].state_data  # its trace, kept for its slider
    deadline = time.monotonic() + 120  # a wait, not a bound: unfreed, a page's state stays for its time to live
    while sh in demo.state_holder.session_data and time.monotonic() < deadline:
        time.sleep(0.1)
    assert sh not in demo.state_holder.session_data


def test_an_api_clients_idle_session_is_forgotten_after_its_time_to_live():
    import datetime

    from gradio.state_holder import StateHolder

    from specviz.app.session_state import forget_idle

    holder = StateHolder()
    holder.session_data.update(old=object(), new=object())
    holder.time_last_used.update(old=datetime.datetime.now() - datetime.timedelta(hours=1),
                                 new=datetime.datetime.now())
    assert forget_idle(holder, ttl_s=1800) == 1
    assert list(holder.session_data) == ["new"] and list(holder.time_last_used) == ["new"]


def test_a_client_cannot_forge_its_address_in_x_forwarded_for():
    from specviz.app.identity import client_key

    def req(peer, forwarded):
        return SimpleNamespace(client=SimpleNamespace(host=peer), headers={"x-forwarded-for": forwarded})

    forged = ", ".join(f"198.51.100.{i}" for i in range(33)) + ", " + ATTACKER  # the proxy appended ATTACKER
    assert client_key(req("10.0.0.2", forged), "s", proxies=1) == ATTACKER  # every forged hop ignored
    assert client_key(req("10.0.0.2", f"{VISITOR}, {ATTACKER}, 10.0.0.9"), "s", proxies=2) == ATTACKER
    assert client_key(req("10.0.0.2", forged), "s", proxies=0) == "s"  # the header is not read by default
    assert client_key(req("10.0.0.2", ATTACKER), "s", proxies=2) == "s"  # fewer hops than proxies: not an address to trust
    assert client_key(req("10.0.0.2", "not-an-address"), "s", proxies=1) == "s"
    assert client_key(req("8.8.8.8", ATTACKER), "s", proxies=1) == "8.8.8.8"  # a public peer is no proxy of ours


def test_trusted_proxies_setting_is_checked(monkeypatch):
    from specviz.app.identity import trusted_proxies

    for bad in ("-1", "two", "99"):
        monkeypatch.setenv("SPECVIZ_TRUSTED_PROXIES", bad)
        with pytest.raises(ValueError, match="SPECVIZ_TRUSTED_PROXIES must be a whole number"):
            trusted_proxies()
    monkeypatch.setenv("SPECVIZ_TRUSTED_PROXIES", "2")
    assert trusted_proxies() == 2


def test_gradios_internals_are_where_the_adapter_reads_them(monkeypatch):
    from gradio import queueing

    from specviz.app import gradio_internals

    assert gradio_internals._problems() == []
    monkeypatch.delattr(queueing.Queue, "push")  # a release that moved the queue's push
    with pytest.raises(gradio_internals.InternalsMoved, match=r"gradio [\d.]+\S* no longer has Queue.push"):
        gradio_internals._checked.clear()
        gradio_internals.check()
    gradio_internals._checked.clear()


def test_launch_waits_for_a_slow_first_answer_and_names_a_page_that_never_answers(monkeypatch):
    """gradio's own probe gave up after one 3-second HEAD (a busy host missed it and launch refused to start): the
    app's launch waits for the page, and refuses, naming it, only after its wait."""
    from specviz.app import demo

    answers = iter([httpx.ReadTimeout("busy"), httpx.ReadTimeout("busy"), SimpleNamespace(status_code=200)])

    def head(url, timeout):
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(httpx, "head", head)
    monkeypatch.setattr(time, "sleep", lambda s: None)
    demo.wait_serving("http://127.0.0.1:1/")  # two timeouts, then an answer
    assert next(answers, None) is None
    monkeypatch.setattr(httpx, "head", lambda url, timeout: SimpleNamespace(status_code=502))
    with pytest.raises(RuntimeError, match=r"does not answer at http://127.0.0.1:1/ after 0 s"):
        demo.wait_serving("http://127.0.0.1:1/", wait_s=0.0)


def test_no_module_but_the_adapter_touches_gradios_private_names():
    import pathlib
    import re

    private = re.compile(r"\._queue\b|active_jobs|event_queue_per_concurrency_id|session_data|time_last_used|"
                         r"\.state_holder\b|blocks\.fns\b")
    app = pathlib.Path(__file__).parents[2] / "specviz" / "app"
    users = sorted(p.name for p in app.glob("*.py") if private.search(p.read_text()))
    assert users == ["gradio_internals.py"]


@pytest.mark.slow
def test_the_run_route_cannot_skip_the_queue(served):
    url, demo = served
    r = httpx.post(f"{url}gradio_api/run/generate", json={"data": GENERATE}, timeout=60)
    assert r.status_code == 404 and "queue" in r.text
