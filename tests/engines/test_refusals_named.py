"""Outputs that carry no counts are refused naming what they are: vLLM 'SpecDecoding metrics' lines pasted without
their 'Accepted' and 'Drafted' fields (any build's field order, wrapped or not), SGLang's benchmark scripts' summary
(Latency, Output throughput, Accept length), and trtllm-bench --report_json's "decoding_stats" (percentiles only,
tensorrt_llm/bench/dataclasses/reporting.py). Each refusal names the format, the line that shows it, and what to
paste instead; the figures it quotes are the ones the source printed."""
from __future__ import annotations

import json

import pytest

from specviz.engines.read import read_engine_run
from tests.helpers.wild import WILD


def refusal(source) -> str:
    with pytest.raises(ValueError) as refused:
        read_engine_run(source)
    message = str(refused.value).splitlines()[0]
    assert "(line " in message and "Paste instead: " in message, message
    return message


def test_a_vllm_line_without_its_counts_is_refused_with_its_printed_mean():
    message = refusal(WILD / "vllm-v1-specdecoding-wrapped-no-counts-13.txt")  # the source printed 1.31
    assert "closest to vLLM 'SpecDecoding metrics' lines without their counts" in message
    assert "here 1 line with Mean acceptance length 1.31 (line 1: 'SpecDecoding metrics: Mean" in message


def test_lines_without_counts_in_another_order_are_refused_with_their_spread():
    lines = ["(APIServer pid=1) INFO 05-01 14:24:50 [metrics.py:101] SpecDecoding metrics: Avg Draft acceptance "
             f"rate: 27.3%, Per-position acceptance rate: 0.739, 0.478, Mean acceptance length: {mean}"
             for mean in ("2.91", "2.93")]
    message = refusal("\n".join(lines))
    assert "here 2 lines with Mean acceptance length 2.91 to 2.93 (line 1:" in message


def test_the_same_line_with_its_counts_still_reads():
    line = ("SpecDecoding metrics: Mean acceptance length: 2.91, Accepted throughput: 0.72 tokens/s, Drafted "
            "throughput: 2.64 tokens/s, Accepted: 44 tokens, Drafted: 161 tokens, Per-position acceptance rate: "
            "0.739, 0.478, 0.261, 0.174, 0.130, 0.087, 0.043, Avg Draft acceptance rate: 27.3%")
    run = read_engine_run(line)
    assert (run.drafted, run.accepted, run.steps) == (161, 44, 23)  # 1 + 44 / 23 = 2.91


def test_one_line_with_counts_among_lines_without_is_not_taken_for_a_mean_only_paste():
    with_counts = "SpecDecoding metrics: Mean acceptance length: 2.00, Accepted: 10 tokens, Drafted: 30 tokens"
    without = "SpecDecoding metrics: Mean acceptance length: 2.00, Accepted throughput: 1.00 tokens/s"
    with pytest.raises(ValueError, match="no 'Accepted:' field") as refused:
        read_engine_run(with_counts + "\n" + without)
    assert "closest to" not in str(refused.value)


def test_sglang_benchmark_scripts_are_named_apart_from_bench_serving():
    scripts = refusal(WILD / "sglang-benchmark-scripts-accept-length-no-spec-1.txt")
    assert "closest to SGLang's benchmark scripts' summary" in scripts
    assert "(line 3: 'Output throughput: 1103.382 token/s')" in scripts  # as the source printed it
    serving = refusal(WILD / "sglang-bench-serving-accept-length-2025-4.txt")
    assert "closest to SGLang bench_serving summary" in serving and "2.52" in serving


def report(decoding_stats: dict | None) -> str:
    """A trtllm-bench --report_json file in reporting.py's shape (get_statistics_dict), indented as json.dump(...,
    indent=4) writes it."""
    body = {"engine": {"model": "Qwen/Qwen3-8B", "backend": "Pytorch"}, "request_info": {"num_requests": 64},
            "performance": {"total_latency_ms": 5120.5}}
    if decoding_stats is not None:
        body["decoding_stats"] = decoding_stats
    return json.dumps(body, indent=4)


def percentiles(average: float) -> dict:
    return {"minimum": average - 1, "maximum": average + 1, "average": average, "p50": average, "p90": average + 0.5,
            "p95": average + 0.75, "p99": average + 1}


def test_a_trtllm_bench_report_json_is_refused_naming_it():
    stats = {"mode": "Eagle3", "num_draft_tokens_percentiles": percentiles(300.0),
             "num_accepted_draft_tokens_percentiles": percentiles(150.0),
             "draft_acceptance_rate_percentiles": percentiles(0.5), "acceptance_length_percentiles": percentiles(2.5)}
    text = report(stats)
    message = refusal(text)
    line = next(n for n, s in enumerate(text.splitlines(), 1) if '"decoding_stats"' in s)
    assert "closest to TensorRT-LLM trtllm-bench --report_json 'decoding_stats'" in message
    assert f"here mode 'Eagle3', acceptance length AVERAGE 2.50 (line {line}: '\"decoding_stats\": {{')" in message
    one_line = refusal(json.dumps(json.loads(text)))  # written without indent: the key's part of the line is shown
    assert "(line 1: '\"decoding_stats\": {\"mode\": \"Eagle3\"" in one_line


def test_a_report_without_decoding_stats_keeps_the_plain_refusal():
    with pytest.raises(ValueError, match="none with speculative-decoding statistics") as refused:
        read_engine_run(report(None))
    assert "closest to" not in str(refused.value)
