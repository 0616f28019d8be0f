"""Anything that cannot be read is a ValueError that says why, where, and which formats are accepted."""
from pathlib import Path

import pytest

from specviz.engines import read_engine_run

FIXTURES = Path(__file__).parent / "fixtures"
VLLM_LINE = ("INFO 09-14 10:00:10 [metrics.py:120] SpecDecoding metrics: Mean acceptance length: 3.05, Accepted: "
             "{a} tokens, Drafted: {d} tokens, Per-position acceptance rate: 0.800, 0.600, 0.400, 0.250, Avg Draft "
             "acceptance rate: {r}%")


def refused(source, *words, **kw):
    with pytest.raises(ValueError) as info:
        read_engine_run(source, **kw)
    message = str(info.value)
    for word in words:
        assert word in message, message
    return message


@pytest.mark.parametrize("source, words", [
    ("", ["is empty"]),
    ("  \n\t\n", ["is empty"]),
    (b"\x00\x01\x02GGUF\x00", ["binary data"]),
    (b"\xff\xfe\xfa not text", ["not UTF-8"]),
    ([], ["no input given"]),
    ("hello, world\nnothing to see", ["no line of a known format", "'hello, world'"]),
    ('{"choices": [{"index": 0, "text": "hi"}]}', ["none with speculative-decoding statistics"]),
])
def test_unreadable_inputs(source, words):
    message = refused(source, *words)
    assert "Accepted formats:" in message and "Prometheus" in message  # says what would have been read


def test_truncated_json_names_the_line():
    text = (FIXTURES / "trtllm_healthy.json").read_text()
    refused(text[: len(text) // 2], "not valid JSON", "line ", "truncated")


def test_truncated_jsonl_and_sse_name_the_line():
    lines = (FIXTURES / "vllm_greedy.jsonl").read_text().splitlines()
    refused("\n".join(lines[:3] + [lines[3][:40]]), "line 4", "not valid JSON")
    stream = (FIXTURES / "vllm_stream.sse").read_text()
    cut = stream[: stream.index("speculative_decoding_stats\":{") + 60]
    refused(cut, "line 5", "cut short")


def test_two_formats_mixed_in_one_text():
    vllm = VLLM_LINE.format(a=41, d=76, r=53.9)
    llama = "slot print_timing: id  0 | task 1 | draft acceptance = 0.37391 (   43 accepted /   115 generated), mean len =  3.15"
    refused(vllm + "\n" + llama, "two formats mixed", "vllm log", "llama.cpp server log")
    jsonl = (FIXTURES / "vllm_greedy.jsonl").read_text().splitlines()[0] + "\n" + \
        (FIXTURES / "sglang_healthy.jsonl").read_text().splitlines()[0]
    refused(jsonl, "two formats mixed", "vLLM per-request metrics (from line 1)", "SGLang meta_info (from line 2)")
    scrape = (FIXTURES / "llamacpp_metrics.prom").read_text()
    refused(scrape + vllm + "\n", "not a Prometheus text scrape")


def test_files_of_different_formats_are_not_summed():
    refused([FIXTURES / "vllm_healthy.log", FIXTURES / "sglang_healthy.jsonl"], "different formats", "diagnose")


def test_accepted_more_than_drafted_names_the_line():
    text = "some other log line\n" + VLLM_LINE.format(a=500, d=100, r=500.0)
    refused(text, "line 2", "accepted (500) exceeds drafted (100)")


def test_a_printed_rate_that_contradicts_the_counts():
    refused(VLLM_LINE.format(a=41, d=76, r=71.0), "disagrees with Accepted / Drafted = 41 / 76")


def test_absurd_and_negative_counts():
    scrape = "# TYPE vllm:spec_decode_num_accepted_tokens_total counter\nvllm:spec_decode_num_accepted_tokens_total 1e20\n"
    refused(scrape, "absurd")
    bad = '{"id": "r", "metrics": {"speculative_decoding": {"num_spec_steps": 4, "num_accepted_draft_tokens": -5}}}'
    refused(bad, "line 1", "at least 0")
    fractional = bad.replace("-5", "2.5")
    refused(fractional, "whole number")


def test_per_position_counts_that_rise():
    scrape = "\n".join(["# TYPE vllm:spec_decode_num_drafts_total counter", "vllm:spec_decode_num_drafts_total 10",
                        "# TYPE vllm:spec_decode_num_accepted_tokens_total counter",
                        "vllm:spec_decode_num_accepted_tokens_total 9",
                        "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter",
                        'vllm:spec_decode_num_accepted_tokens_per_pos_total{position="0"} 4',
                        'vllm:spec_decode_num_accepted_tokens_per_pos_total{position="1"} 5', ""])
    refused(scrape, "position 1 accepted more drafts (5) than position 0 (4)")


def test_scrapes_in_the_wrong_order_look_like_a_restart():
    refused([FIXTURES / "vllm_metrics_2.prom", FIXTURES / "vllm_metrics_1.prom"], "fell from", "restarted")


def test_several_models_in_a_scrape_need_a_choice():
    lines = []
    for line in (FIXTURES / "vllm_metrics_1.prom").read_text().splitlines():
        lines.append(line)
        if not line.startswith("#"):  # the same counters for a second model
            lines.append(line.replace("meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen3-8B"))
    text = "\n".join(lines) + "\n"
    refused(text, "several models", "Qwen/Qwen3-8B", "model=")
    run = read_engine_run(text, model="Qwen/Qwen3-8B")
    assert run.model == "Qwen/Qwen3-8B" and run.steps == 1100
