"""The load doctor on llama-server recorded under load (fixtures/llamacpp_load: -np 1, 2, 4, 8 slots with as many
clients, speculation on and off): the spans are read as hand-computed on a built recording, the steps each response
implies add up to the steps /metrics counted, and on the recording the doctor finds where speculation stops paying
and advises per range in llama-server's own flags."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from specviz.engines import prometheus
from specviz.engines.llamacpp_load import _requests, read_llamacpp_load, spans
from specviz.engines.load_doctor import diagnose_load, load_frame, speedups

RECORDED = Path(__file__).parent / "fixtures" / "llamacpp_load"


def write_config(folder: Path, name: str, requests: list[dict]) -> None:
    (folder / name).mkdir(parents=True)
    (folder / name / "completions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in requests))


def request(start, end, tokens, prompt_ms=0.0, accepted=None) -> dict:
    timings = {"predicted_n": tokens, "prompt_ms": prompt_ms}
    if accepted is not None:
        timings |= {"draft_n": 4 * (tokens - accepted - 1), "draft_n_accepted": accepted}
    return {"client": 0, "index": 0, "start": start, "end": end, "timings": timings}


def test_spans_by_hand():
    """Two requests over 0-4 s, cut in two spans of 2 s. A: 0-4 s, 1 s of prompt, 30 tokens (10 a second from 1 s
    to 4 s), 19 accepted in 10 steps; B: 0-2 s, no prompt, 20 tokens, 9 accepted in 10 steps.
    Span 0-2 s: in flight (2 + 2) / 2 = 2; tokens 10 + 20 = 30 -> 15/s; accepted 19/3 + 9, steps 10/3 + 10 ->
    mean length 1 + (46/3) / (40/3) = 2.15. Span 2-4 s: in flight 1; tokens 20 -> 10/s; 1 + (38/3) / (20/3) = 2.9."""
    rows = [dict(start=0.0, end=4.0, decode=1.0, tokens=30, accepted=19, steps=10),
            dict(start=0.0, end=2.0, decode=0.0, tokens=20, accepted=9, steps=10)]
    (first, length_0), (second, length_1) = spans(rows, 2)
    assert (first.running, second.running) == (2, 1)
    assert (first.gen_tps, second.gen_tps) == pytest.approx((15.0, 10.0))
    assert (length_0, length_1) == pytest.approx((1 + 46 / 40, 1 + 38 / 20))


def test_a_built_recording_reads_as_two_runs_with_loads(tmp_path):
    write_config(tmp_path, "np1-on", [request(0.0, 1.0, 11, accepted=5)])
    write_config(tmp_path, "np1-off", [request(0.0, 2.0, 11)])
    runs = read_llamacpp_load(tmp_path, windows=1)
    assert set(runs) == {"on", "off"}
    frame = load_frame(runs)
    assert list(frame.engine) == ["llama.cpp", "llama.cpp"] and list(frame.load) == [1, 1]
    assert list(frame.tokens_per_s) == pytest.approx([11.0, 5.5])
    assert frame.mean_length.iloc[0] == pytest.approx(1 + 5 / 5)  # 11 tokens - 5 accepted - 1 = 5 steps


@pytest.mark.parametrize("folder", ["np1-on", "np2-on", "np4-on", "np8-on"])
def test_each_responses_steps_add_up_to_the_steps_metrics_counted(folder):
    """predicted_n - draft_n_accepted - 1 per response (the first token from the prompt's pass, each verify step
    its accepted drafts + 1), summed: llamacpp:spec_decode_num_drafts between the scrapes."""
    path = RECORDED / folder
    scraped = prometheus.parse([(path / f"metrics-{when}.txt").read_text() for when in ("before", "after")])
    requests = _requests(path / "completions.jsonl", speculating=True)
    assert sum(r["steps"] for r in requests) == scraped.steps
    assert sum(r["accepted"] for r in requests) == scraped.accepted


def test_the_doctor_finds_where_speculation_stops_paying_on_the_recording():
    """Per load bin, mean tokens/s on over off as the files give them: 1.72 at 1 running request, 1.04 at 2, 1.24
    at 4-7, 0.90 at 8; the ranges at 4-7 (1.06-1.48) and at 8 (0.82-0.96) keep clear of 1, so the change is
    decided: speculation paid at up to 7 requests in flight and not at 8."""
    runs = read_llamacpp_load(RECORDED)
    s = speedups(load_frame(runs))
    assert list(s["bin"]) == [1, 2, 4, 8]
    assert list(s["speedup"].round(2)) == [1.72, 1.04, 1.24, 0.90]
    assert s.low.iloc[2] > 1 > s.high.iloc[3]
    findings = {f.code: f for f in diagnose_load(runs, k=4)}
    cross = findings["load_crossover"]
    assert cross.numbers["decided"] and cross.severity == "warning"
    assert (cross.numbers["last_paying_load"], cross.numbers["first_losing_load"]) == (7, 8)
    assert "stops paying between 4-7 and 8 running requests" in cross.text
    advice = findings["load_advice"]
    assert advice.numbers == {"off_above": 7, "engine": "llama.cpp"}
    assert "up to 7 concurrent requests, serve with -md <draft> --spec-draft-n-max 4" in advice.text
    assert "above 7, a server without -md" in advice.text
    assert findings["load_drift"].numbers["direction"] == "stayed"


@pytest.mark.parametrize("lines, message", [
    (['{"start": 0, "end": 1}'], "line 1: not a recorded request"),
    (['{"start": 2, "end": 1, "timings": {"predicted_n": 3, "prompt_ms": 0, "draft_n_accepted": 0}}'],
     "not a request's span"),
    (['{"start": 0, "end": 1, "timings": {"predicted_n": 3, "prompt_ms": 0, "draft_n_accepted": 5}}'],
     "5 drafts accepted in 3 tokens"),
    ([], "no requests"),
])
def test_a_malformed_recording_says_what_is_wrong(tmp_path, lines, message):
    (tmp_path / "np1-on").mkdir()
    (tmp_path / "np1-on" / "completions.jsonl").write_text("\n".join(lines))
    with pytest.raises(ValueError, match=message):
        read_llamacpp_load(tmp_path)


def test_a_folder_without_configurations_is_refused(tmp_path):
    with pytest.raises(ValueError, match="no np<N>-on / np<N>-off folders"):
        read_llamacpp_load(tmp_path)
