"""Anything that cannot be read is a ValueError that says why, where, and which formats are accepted; a number past
what an engine can print is refused before anything is sized by it."""
import tracemalloc
from pathlib import Path

import pytest

from specviz.engines import CostModel, cost_from_llama_bench, read_engine_run

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


# -- numbers bounded by what they can mean, refused before anything is sized by them ---------------------------------
V0_LINE = ("INFO 03-02 11:20:04 metrics.py:467] Speculative metrics: Draft acceptance rate: 0.500, System efficiency: "
           "0.500, Number of speculative tokens: {k}, Number of accepted tokens: {a}, Number of draft tokens: {d}, "
           "Number of emitted tokens: {e}.")
SPARSE = ('{"metrics": {"speculative_decoding": {"num_spec_steps": 1, "num_accepted_draft_tokens": 0, '
          '"acceptance_histogram": {"0": 1, "%d": 0}}}}')
SGLANG = ('{"meta_info": {"id": "a1", "completion_tokens": 3, "spec_verify_ct": 1, "spec_num_correct_drafts": 1, '
          '"spec_num_proposed_drafts": %d}}')
SERVER = "slot print_timing: id  0 | task 1 | draft acceptance = 0.50000 (    1 accepted /     2 generated), mean len = {m}"


def peak_bytes(fn) -> int:
    """The most memory Python allocated while ``fn`` ran (tracemalloc: counted, not timed)."""
    tracemalloc.start()
    try:
        fn()
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return peak


def test_a_v0_line_with_k_of_a_hundred_million_is_refused_before_any_allocation():
    """262 bytes used to size a 10^8-entry distribution in the moment fit (5.7 GB)."""
    line = V0_LINE.format(k=10**8, a=10**8, d=2 * 10**8, e=3 * 10**8)
    assert len(line) < 300
    assert peak_bytes(lambda: refused(line, "line 1", "= 100,000,000", "no engine drafts more than 64")) < 256 * 2**10


def test_a_sparse_histogram_key_of_sixty_thousand_is_refused_before_the_dense_list_is_built():
    """145 bytes used to build a 60,000-entry histogram and its survival function in quadratic time (148 s)."""
    text = SPARSE % 59_999
    assert len(text) < 150
    assert peak_bytes(lambda: refused(text, "acceptance histogram keys must be draft counts from 0 to 64",
                                      "0 to 59999")) < 256 * 2**10


@pytest.mark.parametrize("source, words", [
    (SGLANG % 10**12, ["k = proposed / verify steps = 1,000,000,000,000", "no engine drafts more than 64"]),
    ('{"metrics": {"speculative_decoding": {"num_spec_steps": 2, "num_accepted_draft_tokens": 1, '
     '"num_spec_tokens": 1000000000}}}', ["num_spec_tokens = 1,000,000,000"]),
    ('{"metrics": {"speculative_decoding": {"num_spec_steps": 2, "num_accepted_draft_tokens": 1, '
     '"per_step_accepted": [1, 100000000]}}}', ["per_step_accepted must hold draft counts from 0 to 64"]),
    ('{"metrics": {"speculative_decoding": {"num_spec_steps": 2, "num_accepted_draft_tokens": 1, '
     '"acceptance_histogram": [' + ", ".join(["0"] * 100) + "]}}}", ["100 entries: a step accepts at most 64"]),
    ('{"choices": [{"speculative_decoding": {"total_accepted_draft_tokens": 1, "total_draft_tokens": 2, '
     '"num_spec_tokens": 65}}]}', ["k (drafts per step) = 65"]),
    (VLLM_LINE.format(a=41, d=76, r=53.9).replace("0.800, 0.600, 0.400, 0.250", ", ".join(["0.010"] * 1000)),
     ["line 1", "7,192 characters long"]),  # a 7 KB line: step recovery took over 60 s
    (VLLM_LINE.format(a=41, d=76, r=53.9).replace("0.800, 0.600, 0.400, 0.250", ", ".join(["0.010"] * 500)),
     ["500 per-position rates: a step drafts at most 64"]),
    (VLLM_LINE.format(a=41, d=76, r=53.9).replace("0.800", "1.800"), ["a fraction between 0 and 1, got 1.8"]),
    (VLLM_LINE.format(a=41, d=76, r=53.9).replace("3.05", "0.50"), ["mean acceptance length 0.5 is not between"]),
    (SERVER.format(m=" 99.00"), ["mean acceptance length 99.0 is not between 1 and 65"]),
    ("n_draft   = 4\nn_predict = " + "9" * 400 + "\nn_drafted = 40\nn_accept  = 20\n", ["whole numbers"]),
    ("# TYPE vllm:spec_decode_num_accepted_tokens_total counter\nvllm:spec_decode_num_accepted_tokens_total +Inf\n",
     ["a counter is a finite count"]),
    ("# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter\n"
     'vllm:spec_decode_num_accepted_tokens_per_pos_total{position="99"} 1\n', ["position label from 0 to 63"]),
    ("# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter\n"
     'vllm:spec_decode_num_accepted_tokens_per_pos_total{position="\u00b2"} 1\n', ["position label from 0 to 63"]),
    ('{"id": "r", "metrics": {"speculative_decoding": {"num_spec_steps": Infinity, "num_accepted_draft_tokens": 1}}}',
     ["num_spec_steps should be a finite number, got inf"]),
    ('{"id": "r", "metrics": {"speculative_decoding": {"num_spec_steps": 2, "num_accepted_draft_tokens": 1, '
     '"acceptance_histogram": [1, 1e999]}}}', ["acceptance histogram must hold whole step counts"]),
    ('{"model": "' + "m" * 5000 + '", "timings": {"draft_n": 2, "draft_n_accepted": 1, "predicted_n": 3}}',
     ["a model's name is a text of at most 4,096 characters"]),
    ("{}\n" + "[" * 100_000 + "\n", ["line 2", "nests too deeply"]),
    ("data: {}\ndata: " + "[" * 100_000 + "\n", ["line 2", "nests too deeply"]),
])
def test_numbers_past_what_an_engine_can_print(source, words):
    refused(source, *words)


def test_a_long_line_holding_a_marker_is_refused_and_any_other_long_line_passed_over():
    """No engine prints its figures on a line of 4,096 characters or more; a log may hold other long lines (a prompt
    echoed), which are read past as before."""
    log = (FIXTURES / "vllm_healthy.log").read_text()
    echo = "INFO Received request cmpl-1: prompt: '" + "eval time = / 1 / " * 50_000 + "'"
    assert read_engine_run(echo + "\n" + log) == read_engine_run(log)
    long_line = VLLM_LINE.format(a=41, d=76, r=53.9) + ", Pad: " + ", x" * 2000
    text = log + "\n" + long_line
    refused(text, f"line {text.splitlines().index(long_line) + 1}:", "characters long", "under 4,096")


def test_a_mean_of_one_that_no_step_count_fits_reads_without_a_division_by_zero():
    line = VLLM_LINE.format(a=12, d=4000, r=0.3).replace("3.05", "1.00").replace("0.800, 0.600, 0.400, 0.250",
                                                                                  "0.013, 0.001, 0.000, 0.000")
    run = read_engine_run(line)  # steps ~ accepted / (mean - 1) divided by zero
    assert run.accepted == 12 and run.steps is None and "fit no whole number of steps" in " ".join(run.notes)


def test_an_id_that_is_a_list_stands_alone():
    record = ('{"id": [1, 2], "metrics": {"speculative_decoding": {"num_spec_steps": 2, "num_accepted_draft_tokens": 1, '
              '"num_spec_tokens": 2}}}')
    assert read_engine_run(record + "\n" + record).requests == 2


@pytest.mark.parametrize("text, words", [
    ("| model | size | test | t/s |\n| --- | --- | --- | --- |\n", ["holds no llama-bench result rows"]),
    ("[]", ["holds no llama-bench result rows"]),
    ("model_type,n_prompt,n_gen,avg_ts\n", ["holds no llama-bench result rows"]),
    ("| model | size | test | t/s |\n| --- | --- | --- | --- |\n| m | 1 GiB | tg64 |  |\n", ["unreadable llama-bench row"]),
    ("| model | size | test | t/s |\n| --- | --- | --- | --- |\n| m | 1 GiB | tg64 | 0.00 ± 0 |\n",
     ["finite number above 0, got 0.0"]),
    ('[{"model_type": "m", "n_prompt": 0, "n_gen": 64, "avg_ts": 1e999}]', ["finite number above 0, got inf"]),
    ('[{"model_type": "m", "n_prompt": 1e999, "n_gen": 0, "avg_ts": 5}]', ["not a llama-bench result row"]),
    ('model_type,n_prompt,n_gen,avg_ts\n"' + "x" * 200_000 + '",1,0,1\n', ["not llama-bench output", "field larger"]),
    ("[" * 100_000, ["not llama-bench output", "RecursionError"]),
])
def test_llama_bench_output_that_cannot_be_read(text, words):
    with pytest.raises(ValueError) as info:
        cost_from_llama_bench(text, c=0.1)
    assert all(word in str(info.value) for word in words), str(info.value)


def test_a_cost_model_holds_a_bounded_curve():
    with pytest.raises(ValueError, match="129 verify-cost points: at most 128"):
        CostModel(c=0.1, verify=tuple((n, 1.0) for n in range(1, 130)))
    with pytest.raises(ValueError, match="distinct row counts from 1 to 1,048,576"):
        CostModel(c=0.1, verify=((1, 1.0), (10**30, 2.0)))
