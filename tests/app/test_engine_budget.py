"""The "Your engine" tab on a public server: one request's work under the budget (checked between inputs, log
lines, scrapes and runs), the answer bounded whatever the paste (series pooled, with a note), every text box
size-checked, and numbers no engine prints refused before anything is sized by them."""
import tracemalloc
from pathlib import Path

import gradio as gr
import pandas as pd
import pytest

from specviz.app import engine_inputs as ei
from specviz.app import engine_tab
from specviz.app.budget import Budget
from specviz.trace import MAX_TRACE_BYTES
from tests.helpers.app import tiny_store

FIXTURES = Path(__file__).resolve().parents[1] / "engines" / "fixtures"
FORM = dict(grouping=ei.ONE_RUN, temperatures="", cost_source=ei.TYPED, c=0.1, v="1", bench_text="", bench_file=None,
            target="tiny-target", draft="tiny", beside=engine_tab.NOTHING, trace_file=None, k=2, temperature=0,
            max_new=6)
LOG = (FIXTURES / "vllm_healthy.log").read_text()
REQUEST = ('{"id":"r%d","metrics":{"speculative_decoding":{"num_spec_steps":1,"num_accepted_draft_tokens":1,'
           '"num_spec_tokens":1,"acceptance_histogram":[0,1]}}}')


def analyse(text="", files=None, **change):
    """The tab's handler as the library sees it (no store: typed costs, nothing beside)."""
    return engine_tab.analyse(None, text, files, **{**FORM, **change})


@pytest.fixture(scope="module")
def h(pair):
    return engine_tab.handlers(tiny_store(pair))


def answer_bytes(out) -> int:
    """What the answer sends: its texts, tables and figures as JSON."""
    return sum(len(v) if isinstance(v, str) else len(v.to_json()) for v in out
               if isinstance(v, (str, pd.DataFrame)) or hasattr(v, "to_json"))


class Counting(Budget):
    """A budget that counts its checks and stops the request at the ``stop_at``-th."""
    calls, stop_at = 0, None

    def check(self):
        Counting.calls += 1
        if Counting.stop_at is not None and Counting.calls >= Counting.stop_at:
            raise ValueError(f"stopped at check {Counting.calls}")


@pytest.fixture
def counting(monkeypatch):
    monkeypatch.setattr(engine_tab, "Budget", Counting)
    Counting.calls, Counting.stop_at = 0, None
    return Counting


@pytest.mark.slow
def test_the_read_is_checked_line_by_line_and_stops_where_the_budget_says(counting):
    lines = sum("SpecDecoding metrics" in line for line in LOG.splitlines())
    analyse(LOG)
    assert counting.calls >= lines + 2  # every marked line, then the doctor and the advice for the run
    counting.calls, counting.stop_at = 0, 5
    with pytest.raises(ValueError, match="stopped at check 5"):
        analyse(LOG)
    assert counting.calls == 5 < lines  # stopped inside the read


@pytest.mark.slow
def test_several_runs_are_checked_run_by_run(counting):
    files = [str(FIXTURES / f) for f in ("vllm_greedy.jsonl", "vllm_sampled.jsonl", "sglang_healthy.jsonl")]
    analyse(files=files, grouping=ei.PER_FILE)
    assert counting.calls >= 3 * 3  # each input read, diagnosed and advised


def test_a_spent_budget_is_a_readable_error(h, monkeypatch):
    monkeypatch.setenv("SPECVIZ_MAX_REQUEST_S", "0")
    with pytest.raises(gr.Error, match=r"stopped after 0 s: over this server's 0 s per request \(SPECVIZ_MAX_REQUEST_S\)"):
        h.read_engine(LOG, None, **FORM)


@pytest.mark.slow
def test_a_paste_at_the_limit_gets_a_bounded_answer_with_its_series_pooled():
    """4 MiB of tiny responses (27,850 requests) once answered 636 KB; each a point of the series chart."""
    parts, size = [], 0
    while size < MAX_TRACE_BYTES - 200:
        parts.append(REQUEST % len(parts))
        size += len(parts[-1]) + 1
    out = analyse("\n".join(parts))
    assert answer_bytes(out) < 256 * 2**10
    assert f"draws {len(parts):,} intervals of vLLM per-request metrics as " in out[0] and "counts summed" in out[0]
    series = out[9]
    assert sum(len(trace.x) for trace in series.data) <= 2 * engine_tab.MAX_SERIES_POINTS  # two panels


def test_a_long_series_is_pooled_into_groups_whose_rates_are_pooled():
    from specviz.engines import read_engine_run
    from specviz.engines.run import coarsened

    run = read_engine_run((FIXTURES / "vllm_greedy.jsonl").read_text())
    pooled, size = coarsened(run, 3)
    assert size == -(-len(run.series) // 3) and len(pooled.series) <= 3
    first = run.series[:size]
    assert pooled.series[0].accepted == sum(r.accepted for r in first)  # counts summed, not rates averaged
    assert pooled.series[0].steps == sum(r.steps for r in first)
    assert (pooled.accepted, pooled.steps) == (run.accepted, run.steps)  # the run itself as it was


@pytest.mark.parametrize("change, words", [
    (dict(v=",".join(f"{n}:{1 + n / 1e6}" for n in range(1, 20_000))), ["v is 287,", "characters long; at most 2,000"]),
    (dict(v=",".join(f"{n}:1.0{n}" for n in range(1, 130))), ["129 verify-cost points: at most 128"]),
    (dict(temperatures="0," * 5000), ["the temperatures box is 10,000 characters long"]),
    (dict(cost_source=ei.BENCH, bench_text="| model | size | test | t/s |\n| --- | --- | --- | --- |\n"),
     ["holds no llama-bench result rows"]),
    (dict(text="SpecDecoding metrics: Mean acceptance length: 1.00, Accepted: 1 tokens, Drafted: 2 tokens, "
               "Per-position acceptance rate: " + ", ".join(["0.001"] * 600)), ["4,319 characters long"]),
])
def test_text_boxes_and_counts_past_their_bounds_are_readable_errors(h, change, words):
    change = {"text": LOG, **change}
    text = change.pop("text")
    with pytest.raises(gr.Error) as info:
        h.read_engine(text, None, **{**FORM, **change})
    assert all(word in str(info.value) for word in words), str(info.value)
    assert "internal error" not in str(info.value)


@pytest.mark.parametrize("text", [
    ("INFO metrics.py:467] Speculative metrics: Draft acceptance rate: 0.500, System efficiency: 0.500, Number of "
     "speculative tokens: 1000000, Number of accepted tokens: 1000000, Number of draft tokens: 2000000, Number of "
     "emitted tokens: 3000000."),
    ('{"metrics": {"speculative_decoding": {"num_spec_steps": 1, "num_accepted_draft_tokens": 0, '
     '"acceptance_histogram": {"0": 1, "4999": 0}}}}'),
])
def test_a_huge_k_or_histogram_key_is_refused_before_the_analysis_allocates_for_it(h, text):
    """A V0 line's k sized the moment fit's distribution (10^8: 5.7 GB); a sparse histogram key its dense list."""
    tracemalloc.start()
    try:
        with pytest.raises(gr.Error, match="no engine drafts more than 64|draft counts from 0 to 64"):
            h.read_engine(text, None, **FORM)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2**20
