"""Every format parses into the counts that were written (fixtures/README.md: the seeded ones from
make_fixtures.py's printout, the others worked out here), the format named; llama.cpp's from real recordings."""
import json
from pathlib import Path

import pytest

from specviz.engines import read_engine_run
from specviz.engines.specviz_trace import trace_run
from tests.helpers.traces import sample_trace

FIXTURES = Path(__file__).parent / "fixtures"
LLAMA = FIXTURES / "llamacpp"


def counts(run):
    return (run.drafted, run.accepted, run.steps, run.k, run.emitted, run.accepted_per_pos)


def test_vllm_log_lines_sum_to_the_drawn_counts():
    run = read_engine_run(FIXTURES / "vllm_healthy.log")
    assert run.source == "vLLM log"
    assert counts(run) == (7731, 3964, 2577, 3, None, (1820, 1260, 884))
    assert len(run.series) == 12 and sum(r.steps for r in run.series) == 2577
    assert all(any("drafted / k" in n for n in r.notes) for r in run.series)  # steps recovered, and said so


def test_vllm_log_line_whose_steps_must_be_recovered():
    line = ("INFO 09-14 10:00:10 [metrics.py:120] SpecDecoding metrics: Mean acceptance length: 3.05, Accepted "
            "throughput: 4.10 tokens/s, Drafted throughput: 7.60 tokens/s, Accepted: 41 tokens, Drafted: 76 tokens, "
            "Per-position acceptance rate: 0.800, 0.600, 0.400, 0.250, Avg Draft acceptance rate: 53.9%")
    run = read_engine_run(line)
    # 76 / 4 = 19 steps would print mean 3.16; 41 / n in [2.045, 2.055] -> 20, and rates x 20 = 16, 12, 8, 5
    assert counts(run) == (76, 41, 20, 4, None, (16, 12, 8, 5))


def test_vllm_log_fields_are_read_by_name_in_any_order():
    line = ("SpecDecoding metrics: Draft acceptance rate: 53.9%, Drafted: 76 tokens, Accepted: 41 tokens, "
            "Per-position acceptance rate: [0.800, 0.600, 0.400, 0.250], Mean acceptance length: 3.05")
    assert counts(read_engine_run(line)) == (76, 41, 20, 4, None, (16, 12, 8, 5))
    with_drafts = line + ", Drafts: 20"
    assert read_engine_run(with_drafts).notes[0] == "steps = the printed Drafts"


def test_vllm_v0_lines_are_totals_since_start():
    run = read_engine_run(FIXTURES / "vllm_v0.log")
    assert run.source == "vLLM log (V0 engine)"
    # the last line; steps = 800 draft tokens / k = 4; accepted = the prefix, emitted - steps = 700 - 200, not the
    # printed 541 (V0 counts every matching draft, also after the first rejection: vllm#9565)
    assert counts(run) == (800, 500, 200, 4, 700, None)
    assert "541 counts every matching draft" in " ".join(run.notes)
    first, second = run.series
    assert (second.drafted, second.accepted, second.steps, second.emitted) == (400, 260, 100, 360)


def test_vllm_per_request_metrics_both_shapes():
    root = read_engine_run(FIXTURES / "vllm_greedy.jsonl")  # metrics.speculative_decoding, dense histograms
    assert root.source == "vLLM per-request metrics" and root.requests == 6
    assert counts(root) == (900, 555, 225, 4, 786, (181, 146, 130, 98))
    choice = read_engine_run(FIXTURES / "vllm_requests_choice.jsonl")  # per-choice stats, sparse histograms
    assert counts(choice) == (675, 344, 225, 3, 575, (156, 112, 76))


def test_vllm_stream_takes_the_terminal_chunk_and_the_usage_after_it():
    run = read_engine_run(FIXTURES / "vllm_stream.sse")
    # histogram {0: 2, 1: 4, 2: 3, 3: 3}: 12 steps, 4 + 6 + 9 = 19 accepted; position 1 by 4 + 3 + 3 = 10 steps
    assert counts(run) == (36, 19, 12, 3, 32, (10, 6, 3))
    assert run.histogram == (2, 4, 3, 3)


def test_vllm_detailed_per_step_arrays():
    stats = {"num_spec_steps": 4, "num_accepted_draft_tokens": 6, "num_draft_tokens": 12, "num_spec_tokens": 3,
             "acceptance_histogram": [1, 1, 1, 1], "per_step_accepted": [3, 0, 1, 2], "per_step_drafted": [3] * 4}
    run = read_engine_run(json.dumps({"id": "x", "metrics": {"speculative_decoding": stats}}))
    assert run.histogram == (1, 1, 1, 1) and run.accepted_per_pos == (3, 2, 1)  # steps accepting > 0, > 1, > 2
    stats["per_step_accepted"] = [3, 3, 1, 2]
    with pytest.raises(ValueError, match="disagrees"):
        read_engine_run(json.dumps({"metrics": {"speculative_decoding": stats}}))


def test_prometheus_two_vllm_scrapes_give_the_counts_between_them():
    run = read_engine_run([FIXTURES / "vllm_metrics_1.prom", FIXTURES / "vllm_metrics_2.prom"])
    assert run.source == "Prometheus scrape (vllm)" and run.model == "meta-llama/Llama-3.1-8B-Instruct"
    # the second scrape's draws, engines 0 and 1 summed: 500 + 600 steps, 735 + 951 accepted
    assert counts(run) == (3300, 1686, 1100, 3, 2786, (344 + 435, 233 + 307, 158 + 209))
    one = read_engine_run(FIXTURES / "vllm_metrics_1.prom")
    assert counts(one) == (3300, 756 + 915, 1100, 3, 756 + 915 + 1100, (362 + 419, 235 + 302, 159 + 194))
    assert "since the server started" in one.notes[-1]


def test_prometheus_llamacpp_two_scrapes_in_one_text():
    run = read_engine_run(FIXTURES / "llamacpp_metrics.prom")
    assert run.source == "Prometheus scrape (llamacpp)"
    # (80, 320, 180, [60, 50, 40, 30], 330) - (37, 148, 79, [28, 23, 16, 12], 160)
    assert counts(run) == (172, 101, 43, 4, 170, (32, 27, 24, 18))


def test_llamacpp_real_scrapes_before_and_after():
    greedy = read_engine_run([LLAMA / "metrics-before.txt", LLAMA / "metrics-after-t0.txt"])
    assert counts(greedy) == (480, 233, 82, 6, 320, (61, 49, 43, 34, 24, 22))
    sampled = read_engine_run([LLAMA / "metrics-after-t0.txt", LLAMA / "metrics-after.txt"])
    assert counts(sampled) == (1823 - 480, 311 - 233, 315 - 82, 6, 320, (57, 14, 5, 1, 1, 0))


def test_llamacpp_server_log_recovers_the_steps_its_metrics_count():
    run = read_engine_run(LLAMA / "server.log")
    assert run.source == "llama.cpp server log" and run.requests == 10
    # ten "draft acceptance" lines; the steps each line's mean length pins down add up to the server's own
    # spec_decode_num_drafts_total (metrics-after.txt: 315)
    assert (run.drafted, run.accepted, run.steps, run.emitted) == (1823, 311, 315, 640)
    assert run.series[0].steps == 20  # task 1: 43 accepted, mean len 3.15 -> 43 / 2.15


def test_llamacpp_older_server_log_has_no_steps():
    run = read_engine_run(FIXTURES / "llamacpp_server_old.log")
    assert (run.drafted, run.accepted, run.steps) == (17, 10, None)


def test_llamacpp_completion_responses():
    run = read_engine_run(LLAMA / "completion-t0-p0.json")
    assert run.source == "llama.cpp server response"
    assert (run.drafted, run.accepted, run.steps, run.emitted, run.temperature, run.top_k) == (115, 43, None, 64, 0.0, 0)
    old = read_engine_run(FIXTURES / "llamacpp_completion_old.json")
    assert (old.k, old.drafted, old.accepted, old.emitted) == (16, 17, 10, 33)
    assert old.temperature == pytest.approx(0.8)


def test_llama_speculative_simple_summary():
    run = read_engine_run(LLAMA / "speculative-simple.txt")
    assert run.source == "llama-speculative summary"
    assert counts(run) == (127, 49, 71 - 49, 6, 71, None)  # steps = n_predict - n_accept
    assert any("n_draft" in note and "adaptive" in note for note in run.notes)  # k's reading said, with its doubt
    heuristic = read_engine_run(FIXTURES / "wild" / "llamacpp-speculative-summary-heuristic-3.txt")
    assert heuristic.k == 53 and any("k is unknown" in note for note in heuristic.notes)


def test_sglang_meta_info():
    run = read_engine_run(FIXTURES / "sglang_healthy.jsonl")
    assert run.source == "SGLang meta_info" and run.requests == 3
    # histograms [1,2,3,2,2] + [2,1,1,2,2] + [0,1,2,1,1]; k = 40 proposed / 10 steps
    assert run.histogram == (3, 4, 6, 5, 5)
    assert counts(run) == (92, 51, 23, 4, 77, (20, 16, 10, 5))


def test_sglang_stream_reads_the_finished_chunk_once():
    chunk = '{"text": "a", "meta_info": {"id": "s1", "completion_tokens": %d%s}}'
    final = (', "spec_verify_ct": 5, "spec_num_correct_drafts": 12, "spec_num_proposed_drafts": 20, '
             '"spec_correct_drafts_histogram": [0, 1, 2, 1, 1], "spec_accept_length": 3.6')
    text = "\n\n".join(["data: " + chunk % (9, ""), "data: " + chunk % (18, final), "data: [DONE]"])
    assert counts(read_engine_run(text)) == (20, 12, 5, 4, 18, (5, 4, 2, 1))


def test_tensorrt_llm_per_choice_stats():
    run = read_engine_run(FIXTURES / "trtllm_healthy.json")
    assert run.source == "TensorRT-LLM per-request stats"
    assert counts(run) == (60, 30, 20, 3, 51, (12, 12, 6))  # survival of [8, 0, 6, 6]
    stream = read_engine_run(FIXTURES / "trtllm_stream.sse")
    assert counts(stream) == (32, 6, 8, 4, 15, (4, 2, 0, 0))


def test_specviz_trace_as_an_engine_run():
    trace = sample_trace()  # round 0: 3 drafted, 1 accepted; round 1: 2 drafted, both accepted
    run = trace_run(trace)
    assert counts(run) == (5, 3, 2, 3, 5, (2, 1, 0))
    assert run.histogram == (0, 1, 1, 0) and run.temperature == 1.0
    read = read_engine_run(trace.to_json())
    assert read.source == "specviz trace" and counts(read) == counts(run)
    assert trace_run(sample_trace(greedy=True)).temperature == 0.0


def test_several_files_of_one_format_are_summed():
    run = read_engine_run([FIXTURES / "vllm_greedy.jsonl", FIXTURES / "vllm_sampled.jsonl"])
    assert (run.accepted, run.steps) == (555 + 4, 225 + 225) and len(run.series) == 2


def test_temperature_given_where_the_format_does_not_say():
    run = read_engine_run(FIXTURES / "vllm_sampled.jsonl", temperature=0.7)
    assert run.temperature == 0.7 and any("as given" in n for n in run.notes)
    with pytest.raises(ValueError, match="reports temperature 0"):
        read_engine_run(LLAMA / "completion-t0-p0.json", temperature=0.7)
