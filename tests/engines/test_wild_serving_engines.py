"""Real SGLang output (fixtures/wild/) that the readers misread or refused: a /generate result printed by Python,
Decode batch lines of a 2026-03 build, of an adaptive fallback, of several data-parallel ranks and as bare fields,
send_one.py's output, a Markdown table of bench_serving results, an MT-bench summary. Each is read and compared with
the numbers its source printed, or refused naming what it lacks."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from specviz.engines import diagnose, read_engine_run, read_reported
from specviz.engines.pyrepr import as_json
from specviz.engines.run import rates

WILD = Path(__file__).parent / "fixtures" / "wild"
MANIFEST = {e["file"]: e for e in json.loads((WILD / "manifest.json").read_text())}


def figures(name: str) -> dict:
    return MANIFEST[name]["figures"]


def rate(run, name: str) -> float:
    return next(r.value for r in rates(run) if r.name == name)


def test_a_generate_result_printed_by_python_reads_as_its_meta_info():
    name = "sglang-generate-result-python-repr-1.txt"
    fig = figures(name)
    run = read_engine_run(WILD / name)
    assert run.source == "SGLang meta_info"
    assert (run.steps, run.accepted, run.drafted, run.emitted) == (
        fig["spec_verify_ct"], fig["spec_accept_token_num"], fig["spec_draft_token_num"], fig["completion_tokens"])
    assert run.k == 5  # spec_draft_token_num / spec_verify_ct = 20 / 4
    assert rate(run, "acceptance rate") == pytest.approx(fig["spec_accept_rate"])  # 9 / 20 = 0.45
    # the printed spec_accept_length 3.5 = completion_tokens / spec_verify_ct = 14 / 4: the prefill token included
    assert rate(run, "tokens per step") == pytest.approx(3.5) and "'spec_accept_length': 3.5," in (
        WILD / name).read_text()
    assert rate(run, "mean acceptance length") == pytest.approx(1 + 9 / 4)  # 3.25: the prefill token left out
    assert any("Python print" in note for note in run.notes)
    assert not {f.code for f in diagnose(run) if f.severity in ("warning", "problem")} & {"nothing_accepted"}


def test_python_reprs_are_read_as_literals_only():
    assert as_json("result {'meta_info': {'spec_verify_ct': 2, 'x': None, 'y': True}}") == (
        '{"meta_info": {"spec_verify_ct": 2, "x": null, "y": true}}', 0)
    cut = "result {'meta_info': {'spec_verify_ct': 2, 'text': 'abc"
    assert as_json(cut) is None
    assert as_json("result {'meta_info': {'spec_verify_ct': __import__('os').getcwd()}}") is None  # no call is run
    assert as_json("Decode batch. #running-req: 1") is None
    with pytest.raises(ValueError, match="no line of a known format"):
        read_engine_run(cut + "\n")


def test_a_2026_03_decode_line_prints_the_older_rate():
    name = "sglang-decode-batch-module-prefix-9.txt"
    run = read_reported(WILD / name)
    (line,) = run.series
    assert (line.mean_length, line.acceptance_rate) == (figures(name)["accept len"], figures(name)["accept rate"])
    assert line.load.running == 2 and line.load.tokens == 5046 and line.load.gen_tps == 242.08
    assert run.rate_meaning == "accept len / 4: not a fraction of drafts accepted"  # 2.64 / 4 = 0.66
    assert run.k is None  # (2.64 - 1) / 3 = 0.547 would print 0.55, so k is not read from the rate
    note = next(n for n in run.notes if "'accept rate' read" in n)
    assert "older builds" in note and "2026-03" in note and "2025 builds" not in note


def test_decode_lines_above_the_adaptive_threshold_print_one_token_a_step():
    name = "sglang-decode-batch-adaptive-fallback-10.txt"
    run = read_reported(WILD / name)
    assert [e.mean_length for e in run.series] == figures(name)["accept len"] == [1.0, 1.0]
    assert [e.load.running for e in run.series] == figures(name)["#running-req"]
    assert run.rate_meaning == "accept len / 9: not a fraction of drafts accepted"  # 1.00 / 9 = 0.111 -> 0.11
    with pytest.raises(ValueError) as refused:  # no counts; the refusal says what 1.00 a step can mean
        read_engine_run(WILD / name)
    assert "(all at 1.00: one token a verify step, so no draft token was accepted, or the server was not drafting" \
        in str(refused.value)


def test_decode_lines_of_several_dp_ranks_are_said_to_be_concurrent():
    name = "sglang-decode-batch-dp-ranks-11.txt"
    run = read_reported(WILD / name)
    assert [e.mean_length for e in run.series] == figures(name)["accept len"]
    assert [e.load.queued for e in run.series] == figures(name)["#queue-req"]
    assert run.rate_meaning is None
    assert any("4 data-parallel ranks (DP2, DP3, DP4, DP5)" in n and "concurrent" in n for n in run.notes)


def test_one_rank_is_not_said_to_be_several():
    run = read_reported(WILD / "sglang-decode-batch-accept-rate-1.txt")  # '[2025-10-22 10:27:56 TP0]': no DP tag
    assert not any("data-parallel" in n for n in run.notes)


def test_decode_fields_pasted_without_their_lines():
    name = "sglang-decode-fields-pasted-12.txt"
    with pytest.raises(ValueError, match="Decode batch' log lines' fields, pasted without the lines.*2.50 to 4.62"):
        read_engine_run(WILD / name)
    run = read_reported(WILD / name)
    assert [e.mean_length for e in run.series] == figures(name)["accept len"]
    assert [e.acceptance_rate for e in run.series] == figures(name)["accept rate"]
    # (2.73 - 1) / 4 = 0.4325, (2.50 - 1) / 4 = 0.375, (4.62 - 1) / 4 = 0.905: four drafts a step
    assert run.k == 4 and run.rate_meaning.startswith("accepted drafts / drafted tokens")
    assert all(e.load is None or e.load.running is None for e in run.series)
    assert any("without their 'Decode batch' line" in n for n in run.notes)


def test_send_one_output_is_refused_naming_it_and_kept_as_means():
    name = "sglang-send-one-acc-length-1.txt"
    with pytest.raises(ValueError, match="send_one.py output.*no counts"):
        read_engine_run(WILD / name)
    run = read_reported(WILD / name)
    assert [e.mean_length for e in run.series] == figures(name)["acc_length"]  # 1.00 baseline, 2.20 EAGLE-3
    assert [e.load.gen_tps for e in run.series] == figures(name)["speed"]


def test_a_markdown_table_of_bench_results_is_refused_naming_its_accept_length():
    name = "sglang-bench-serving-markdown-table-3.txt"
    for read in (read_engine_run, read_reported):
        with pytest.raises(ValueError, match="Markdown table of SGLang bench_serving results.*running mean"):
            read(WILD / name)


def test_mtbench_lines_without_cuda_graphs():
    name = "sglang-mtbench-acceptance-length-no-cuda-graph-2.txt"
    run = read_reported(WILD / name)
    assert [e.mean_length for e in run.series] == figures(name)["Acceptance length"]
    assert [e.load.gen_tps for e in run.series] == figures(name)["Throughput"]
    with pytest.raises(ValueError, match="no counts"):
        read_engine_run(WILD / name)
