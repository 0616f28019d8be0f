"""Bad input against the running app (gradio_client -> /generate): each gets a readable error, the
server keeps serving, and concurrent clients get exactly the traces they get alone."""
import json
from concurrent.futures import ThreadPoolExecutor

import gradio as gr
import pytest
from gradio_client import Client
from gradio_client.exceptions import AppError

from tests.helpers.app import SETTINGS, generate, handlers
from tests.helpers.models import last


@pytest.mark.parametrize("change, message", [
    (dict(prompt=""), "the prompt is empty"),
    (dict(prompt=None), "the prompt is empty"),
    (dict(prompt="word " * 700), r"prompt \(\d+ tokens\) \+ max_new_tokens \(12\) = \d+ exceeds the target's context"),
    (dict(prompt="x" * 5000), "the prompt is 5000 characters long; keep it under 4000"),
    (dict(k=0), r"k must lie in \[1, 16\]"),
    (dict(k="abc"), "k must be a whole number, got 'abc'"),
    (dict(k=None), "k must be a whole number, got None"),
    (dict(temperature="hot"), "temperature must be a number, got 'hot'"),
    (dict(top_p=5), r"top_p must lie in \[0.01, 1\]"),
    (dict(max_new_tokens=10**9), r"max_new_tokens must lie in \[1, 512\]"),
    (dict(max_new_tokens=300), "exceeds the target's context window of 128"),
    (dict(seed=-1), "seed must be >= 0"),
    (dict(seed=2**70), "seed must be < 2\\*\\*63"),
    (dict(draft_stop=1.0), r"draft_stop must lie in \[0, 0.99\]"),
    (dict(draft_stop="high"), "draft_stop must be a number, got 'high'"),
    (dict(target="gpt-5"), "unknown target 'gpt-5': choose one of tiny-target"),
    (dict(draft="../../etc/passwd"), "unknown draft '../../etc/passwd'"),
    (dict(target="/etc/passwd"), "unknown target '…/passwd'"),  # an absolute path in a message: its name only
])
@pytest.mark.slow
def test_bad_input_is_a_readable_error_and_the_server_keeps_serving(client, change, message):
    with pytest.raises(AppError, match=message):
        generate(client, **change)
    assert len(generate(client, max_new_tokens=3).new_tokens) == 3


@pytest.mark.slow
@pytest.mark.parametrize("prompt", ["<script>alert(1)</script>", '<img src=x onerror="alert(1)">'])
def test_markup_in_prompts_is_text(client, store, prompt):  # noqa: F811
    assert len(generate(client, prompt=prompt, max_new_tokens=4).new_tokens) == 4
    outs = last(handlers(store).run(prompt, "tiny-target", "tiny", *SETTINGS.values(), False))
    assert "<script" not in outs[2] and "<img" not in outs[2] and "&lt;" in outs[2]  # the timeline escapes it


@pytest.mark.parametrize("content, message", [
    (b"{not json", "malformed trace JSON: Expecting property name"),
    (b"\xff\xfe\x00garbage\x80", "could not read the uploaded file: 'utf-8' codec can't decode"),
    (b'{"schema": "specviz.trace/1", "prompt_ids": "\x01\x02\x1b[2J"}', "malformed trace JSON: Invalid control"),
    (b"[1, 2, 3]", "not a specviz trace"),
    (b"", "malformed trace JSON: Expecting value"),
])
def test_malformed_trace_uploads_are_readable_errors(store, tmp_path, content, message):  # noqa: F811
    path = tmp_path / "trace.json"
    path.write_bytes(content)
    with pytest.raises(gr.Error, match=message):
        handlers(store).load(str(path))


@pytest.mark.slow
def test_concurrent_clients_get_the_traces_they_get_alone(client):
    prompts = ["ROMEO:", "To be, or not to be", "JULIET:", "Now is the winter"]
    alone = {p: generate(client, prompt=p) for p in prompts}
    with ThreadPoolExecutor(8) as pool:  # a client each: separate sessions, one shared server and ModelStore
        together = list(pool.map(lambda p: (p, generate(Client(client.src, verbose=False), prompt=p)), prompts * 2))
    for p, trace in together:
        assert trace.new_tokens == alone[p].new_tokens
        assert [r.u for r in trace.rounds] == [r.u for r in alone[p].rounds]


@pytest.mark.slow
def test_oversized_traces_are_refused_before_they_are_built():
    from specviz import Trace
    from specviz.trace import MAX_TRACE_BYTES
    from specviz.trace_schema import MAX_ROUNDS
    from tests.helpers.traces import sample_trace

    data = json.loads(sample_trace().to_json())
    data["rounds"] = data["rounds"][:1] * (MAX_ROUNDS + 1)
    with pytest.raises(ValueError, match="at most 4096 rounds"):
        Trace.from_json(json.dumps(data))
    with pytest.raises(ValueError, match="at most 4 MiB is read"):
        Trace.from_json(" " * (MAX_TRACE_BYTES + 1))


def test_download_folders_are_swept_by_age(tmp_path):
    import os
    import time

    from specviz.app.tempfiles import fresh_folder

    old = fresh_folder("trace-", root=tmp_path)
    (old / "trace.json").write_text("{}")
    os.utime(old, (time.time() - 7200, time.time() - 7200))
    new = fresh_folder("trace-", root=tmp_path, max_age_s=3600)
    assert new.is_dir() and not old.exists() and list(tmp_path.iterdir()) == [new]


@pytest.mark.slow
@pytest.mark.parametrize("call, what", [
    (lambda h: last(h.run_sweep("tiny-target", ["tiny"], "ROMEO:\n\nTo be\n\nJULIET:", 1, 16, 0.0, 0, 1.0, 64, 0, True,
                                 4)), "this sweep"),  # work many times its first pilot's, so a loaded host cannot cross
    (lambda h: last(h.run_tree_lab("tiny-target", "tiny", "ROMEO:\n\nTo be", "2,4,6", "3,2,1", 0.0, 0, 1.0, 64, 3, 0)),
     r"this tree lab \(30 runs\)"),
    (lambda h: last(h.run_compare("tiny-target", ["tiny", "prompt-lookup"], "ROMEO:", 3, 0.0, 0, 1.0, 64, 0)),
     "this comparison"),
    (lambda h: last(h.run_lossless("tiny-target", "tiny", "ROMEO:", 0, 1.0, 0, 1.0, 0, 1_000_000, 100)),
     "1,000,000 draws per variant"),
    (lambda h: last(h.run_distill("tiny-target", "tiny", 30, True, 10, {})), "this training"),
])
def test_over_budget_requests_are_refused_at_once(store, monkeypatch, call, what):
    """With a small per-request budget every long action says its estimate and what to reduce, before doing the work:
    the refusal takes less time than the work it states, both measured here and now (a ratio in one run: a loaded
    host slows both)."""
    import re
    import time

    monkeypatch.setenv("SPECVIZ_MAX_REQUEST_S", "0.05")
    t0 = time.perf_counter()
    with pytest.raises(gr.Error, match=rf"{what} would take (about|at least) [\d.]+ s.*; this server runs at most "
                                       r"0.05 s per request \(SPECVIZ_MAX_REQUEST_S\): ") as refused:
        call(handlers(store))
    stated = float(re.search(r"would take (?:about|at least) ([\d.]+) s", str(refused.value)).group(1))
    assert time.perf_counter() - t0 < stated


def test_link_parameters_are_checked_like_the_form():
    from specviz.app import links

    values = dict(zip(links.FIELDS, links.parse(
        {"prompt": "x" * 5000, "target": "../etc", "draft": "tiny", "k": "1e9", "temperature": "0.5", "top_k": "nan",
         "seed": "-1", "k_policy": "<script>", "max_new_tokens": "64"}, ["tiny-target"], ["tiny"])))
    skipped = {name for name, v in values.items() if not isinstance(v, (str, int, float))}
    assert skipped == {"target", "k", "top_k", "seed", "k_policy", "top_p", "shape"}
    assert values["draft"] == "tiny" and values["temperature"] == 0.5 and values["max_new_tokens"] == 64
    assert len(values["prompt"]) == 4000


@pytest.mark.slow
def test_a_short_request_is_not_stuck_behind_another_sessions_long_lab_and_a_cancel_frees_the_slot(client,
                                                                                                    monkeypatch):
    """Session A starts a long k sweep; session B's short /generate is served meanwhile, before the sweep ends (the
    labs have a slot of their own); A cancels (its browser closed): the sweep runs no more steps than it ran before
    (counted, not timed) and session C's lab is served in its slot."""
    import time

    from gradio_client import Client

    from specviz import Trace
    from tests.helpers.app import count_checks, steps_of

    url = client.src
    checks = count_checks(monkeypatch)
    long_a, b, c = Client(url, verbose=False), Client(url, verbose=False), Client(url, verbose=False)
    prompts = "\n\n".join(["ROMEO:", "JULIET:", "To be, or not to be", "Friends, Romans"])
    job = long_a.submit("tiny-target", ["tiny", "prompt-lookup"], prompts, 1, 16, 0.8, 0, 1.0, 64, 0, False, 4, 0.4,
                        api_name="/run_sweep")
    deadline = time.monotonic() + 120  # a wait, not a bound
    while not any(e is not None for e in checks):
        assert time.monotonic() < deadline and not job.done(), "the sweep ran no step"
        time.sleep(0.01)
    sweep = next(e for e in checks if e is not None)
    time.sleep(1.0)
    out = b.predict("ROMEO:", "tiny-target", "tiny", 3, 0.8, 0, 1.0, 8, 0, api_name="/generate")
    assert len(Trace.from_json(out if isinstance(out, str) else json.dumps(out)).new_tokens) == 8
    assert not job.done()  # served while the long lab still ran
    job.cancel()
    cancelled = len(checks)
    c.predict("tiny-target", "tiny", "ROMEO:", "2", "", 0.0, 0, 1.0, 8, 1, 0, api_name="/run_tree_lab")
    before, after = steps_of(checks, sweep, 0, cancelled), steps_of(checks, sweep, cancelled)
    print(f"\nfairness: a short /generate was served while another session's sweep ran ({before} steps); after the "
          f"sweep's cancel it ran {after} more, and another lab was served")
    assert after <= before  # the lab slot freed within as many steps as the sweep had run


def test_one_run_at_a_time_per_visitor():
    """A second job from the same session is refused while the first runs; another session's is not."""
    from types import SimpleNamespace

    from specviz.app.sessions import BUSY, one_per_session

    def slow(x):
        yield x
        yield x + 1

    gated = one_per_session(slow)
    mine, theirs = SimpleNamespace(session_hash="a"), SimpleNamespace(session_hash="b")
    first = gated(1, mine)
    assert next(first) == 1  # running, holding session "a"
    with pytest.raises(gr.Error, match="one run at a time per visitor"):
        next(gated(5, mine))
    assert list(gated(5, theirs)) == [5, 6]
    assert list(first) == [2]  # the first finishes, releasing the session
    assert list(gated(7, mine)) == [7, 8] and list(gated(9)) == [9, 10]  # no request (tests, scripts): not gated
    assert BUSY


@pytest.mark.parametrize("name", ['<a href="https://x.test">win</a>', '<img src=x onerror=alert(1)>',
                                  '<form action=x><input type=password></form>', "&lt;b&gt;"])
def test_markup_from_a_link_never_reaches_a_toast(store, name):
    """?gallery=NAME quotes NAME in its refusal: the toast (which renders HTML) shows it as text."""
    import gradio as gr

    with pytest.raises(gr.Error) as caught:
        handlers(store).open_named(name)
    message = caught.value.message
    assert "no gallery run called" in message and "<a" not in message and "<img" not in message
    assert "<form" not in message and "<input" not in message and "&lt;b&gt;" not in message  # escaped once


@pytest.mark.slow
def test_a_run_too_dear_for_the_budget_stops_within_its_first_rounds(store, monkeypatch):
    """The explorer's Run and /generate pace every round against SPECVIZ_MAX_REQUEST_S: a run that would end past
    it stops early, its tokens kept and its stop reason "budget"; the baseline then matches its length."""
    import time

    from specviz.app import runs
    from specviz.config import DecodeConfig

    cfg = DecodeConfig(k=2, temperature=0, max_new_tokens=120)
    whole = runs.generate(store, "ROMEO:", "tiny-target", "tiny", cfg)
    assert whole.stop_reason == "length" and len(whole.new_tokens) == 120
    per_token = whole.total_s / 120
    monkeypatch.setenv("SPECVIZ_MAX_REQUEST_S", str(per_token * 20))  # about a sixth of the run fits
    t0 = time.perf_counter()
    cut = runs.generate(store, "ROMEO:", "tiny-target", "tiny", cfg)
    assert cut.stop_reason == "budget" and 0 < len(cut.new_tokens) < 120
    assert cut.new_tokens == whole.new_tokens[: len(cut.new_tokens)]  # what it made is the same run, cut short
    assert time.perf_counter() - t0 < whole.total_s  # stopped well before the whole run's time
    assert len(runs.baseline(store, cut).new_tokens) == len(cut.new_tokens)


# -- the rule lab's draws and Batch: validated, and Batch under the request's budget ------------------------------
@pytest.mark.parametrize("draws", [10**8, 0, -5, 2.5, True, "many"])
def test_the_rule_labs_draws_are_refused_before_any_model_work(draws):
    """10^8 draws once peaked at 6.6 GB over 204 s; draws <= 0 gave an internal error."""
    from specviz.labs.rules import rules_lab

    with pytest.raises(ValueError, match=r"draws \(accept steps of the fixed-context check\) must be a whole number "
                                         r"from 100 to 100,000"):
        rules_lab(None, None, [None], draws=draws)  # no model is touched before the check


def test_the_rule_tab_says_what_is_wrong_with_its_draws(store):
    from specviz.app import rules_tab

    with pytest.raises(gr.Error, match="from 100 to 100,000, got 100000000"):
        last(rules_tab.handlers(store).run_rules_lab("tiny-target", "tiny", "ROMEO:", "0.7", ["leviathan"], 2, 4, 0,
                                                     0.09, 0.3, 0.5, 10**8))


@pytest.mark.parametrize("call, what", [
    (lambda h: last(h.run_batch("tiny-target", "tiny", "ROMEO:\n\nJULIET:", 2, 0.0, 0, 1.0, 64, 0)),
     r"this batch \(2 rows of 64 tokens\)"),
    (lambda h: h.run_bench("tiny-target", "tiny", "ROMEO:", 2), "this benchmark"),
])
def test_batch_requests_over_the_budget_are_refused_at_once(store, monkeypatch, call, what):
    monkeypatch.setenv("SPECVIZ_MAX_REQUEST_S", "0.001")
    with pytest.raises(gr.Error, match=rf"{what} would take about [\d.]+ s; this server runs at most"):
        call(handlers(store))


def test_a_batch_run_is_checked_between_rounds(store, monkeypatch):
    from specviz.app import batch_tab
    from specviz.app.budget import Budget

    checks = []

    class Stopping(Budget):
        def check(self):
            checks.append(self.elapsed)
            if len(checks) == 3:
                raise ValueError("stopped at the third round")

    monkeypatch.setattr(batch_tab, "Budget", Stopping)
    with pytest.raises(gr.Error, match="stopped at the third round"):
        last(handlers(store).run_batch("tiny-target", "tiny", "ROMEO:\n\nJULIET:", 2, 0.0, 0, 1.0, 48, 0))
    assert len(checks) == 3


@pytest.mark.slow
def test_the_batch_benchmark_is_checked_between_measurements(store, monkeypatch):
    """Batch's benchmark once ran 244 s while another visitor's lab waited 234 s: now each measurement starts with
    the request budget's check, which also stops it once its visitor has left."""
    from specviz.app import batch_tab
    from specviz.app.budget import Budget

    checks = []

    class Stopping(Budget):
        def check(self):
            checks.append(self.elapsed)
            if len(checks) == 3:
                raise ValueError("stopped at the third measurement")

    monkeypatch.setattr(batch_tab, "Budget", Stopping)
    with pytest.raises(gr.Error, match="stopped at the third measurement"):
        handlers(store).run_bench("tiny-target", "tiny", "ROMEO:", 2)
    assert len(checks) == 3


@pytest.mark.parametrize("call, message", [
    (lambda h: h.run_bench("tiny-target", "tiny", "ROMEO:", 100), r"k must lie in \[1, 16\]"),
    (lambda h: h.run_bench("tiny-target", "tiny", "ROMEO:", "abc"), "k must be a whole number, got 'abc'"),
    (lambda h: last(h.run_batch("tiny-target", "tiny", "\n\n".join(["ROMEO:"] * 9), 2, 0.0, 0, 1.0, 8, 0)),
     "9 prompts: a batch here holds at most 8"),
    (lambda h: last(h.run_batch("tiny-target", "tiny", "ROMEO:", 2, 0.0, 0, 1.0, 10**9, 0)),
     r"max_new_tokens must lie in \[1, 512\]"),
])
def test_batch_fields_out_of_range_are_readable_errors(store, call, message):
    with pytest.raises(gr.Error, match=message):
        call(handlers(store))


def test_batch_prompts_outside_the_vocabulary_are_refused_by_the_library(pair):
    import torch

    from specviz import DecodeConfig
    from specviz.batch import speculative_generate_batch

    target, draft, _ = pair
    vocab = target.get_input_embeddings().weight.shape[0]
    with pytest.raises(ValueError, match=f"prompt 1 holds token id {vocab}, outside the target's embedding table"):
        speculative_generate_batch(target, draft, [torch.tensor([[1, 2]]), torch.tensor([[3, vocab]])],
                                   DecodeConfig(k=2, max_new_tokens=4))
