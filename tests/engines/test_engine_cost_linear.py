"""Every reader's work grows linearly with its input: each is fed worst-case text (long runs of the characters its
patterns and splitters repeat: spaces, digits, '=', '/', ':', ',', '|'), at two sizes four times apart, and the
larger must cost less than 8x the smaller (linear: about 4x; a quadratic reader: 16x and more). Both are measured
in the same run as this thread's CPU time (other processes on a loaded host do not count), each the least of a few
interleaved repeats: a ratio, never an absolute time. The fast tier runs at 64 and 256 KiB (a quadratic reader
already takes seconds there); the slow one at the tab's limit."""
import contextlib
import time

import pytest

from specviz.engines import cost_from_llama_bench, read_engine_run
from specviz.engines.lines import MAX_LINE
from specviz.engines.rounding import recover_steps
from specviz.trace import MAX_TRACE_BYTES

KiB = 2**10
SERVER_LINE = "slot print_timing: id  0 | task 1 | draft acceptance = 0.50000 (    1 accepted /     2 generated), mean len = 1.50"
V1_HEAD = "INFO [metrics.py:96] SpecDecoding metrics: Mean acceptance length: 2.00, Accepted: 1 tokens, Drafted: 2 tokens"
V0_HEAD = ("INFO [metrics.py:300] Speculative metrics: Draft acceptance rate: 0.250, Number of speculative tokens: 4, "
           "Number of accepted tokens: 1, Number of draft tokens: 4, Number of emitted tokens: 2")
WORST_RECOVERY = ("SpecDecoding metrics: Mean acceptance length: 1.00, Accepted: 5 tokens, Drafted: 100000 tokens, "
                  "Per-position acceptance rate: " + ", ".join(["0.001"] * 64))
SUMMARY = "n_draft   = 4\nn_predict = 30\nn_drafted = 40\nn_accept  = 20\naccept    = 50.000%\n"
PROM_HEAD = "# TYPE vllm:spec_decode_num_accepted_tokens_total counter\n"
BENCH_HEAD = ("| model | size | params | backend | threads | test | t/s | pad |\n"
              "| --- | --- | --- | --- | --- | --- | --- | --- |\n")
REQUEST = ('{"id": "r%d", "choices": [{"index": 0, "text": "%s", "finish_reason": "length"}], "metrics": '
           '{"speculative_decoding": {"num_spec_steps": 3, "num_accepted_draft_tokens": 3, "num_spec_tokens": 2, '
           '"acceptance_histogram": [1, 1, 1]}}}')


def run_of(piece: str, width: int = MAX_LINE) -> str:
    """``piece`` repeated to ``width`` characters."""
    return (piece * (width // len(piece) + 1))[:width]


def lines(size: int, line: str, every: int = 0, marked: str = "") -> str:
    """``line`` repeated to ``size`` characters, with ``marked`` after every ``every`` lines."""
    out, n = [], 0
    while n < size:
        out.append(line)
        n += len(line) + 1
        if every and len(out) % (every + 1) == every:
            out.append(marked)
            n += len(marked) + 1
    return "\n".join(out + ([marked] if marked else []))


def read(text: str) -> None:
    """The engine tab's reader: a run or a ValueError (a refusal is the reader's work too)."""
    with contextlib.suppress(ValueError):
        read_engine_run(text)


def bench(text: str) -> None:
    with contextlib.suppress(ValueError):
        cost_from_llama_bench(text, c=0.1)


CASES = {  # name: (reader, text of about n characters)
    "vLLM lines, a ', ' run in a field": (read, lambda n: lines(n, V1_HEAD + ", Pad: " + run_of(", ", MAX_LINE - 200))),
    "vLLM, one line of ', x' pieces": (read, lambda n: "SpecDecoding metrics: Accepted: 1 tokens" + ", x" * (n // 3)),
    "vLLM V0 lines, an '=' and ':' run": (read, lambda n: lines(n, V0_HEAD + ", Pad: " + run_of("=:", MAX_LINE - 250))),
    "vLLM lines at the widest step recovery": (read, lambda n: lines(n // 8, WORST_RECOVERY)),  # a line ~1 ms
    "llama.cpp log, 'eval time = ' and '/' runs": (
        read, lambda n: lines(n, "slot print_timing: id  0 | task 1 | eval time = " + run_of("eval time = / 12 /  ", 4000),
                              every=9, marked=SERVER_LINE)),
    "llama.cpp log, one 'eval time = ' line": (read, lambda n: "| task 1 | " + "eval time = " * (n // 12) + "\n"
                                                + SERVER_LINE),
    "llama.cpp log, '| task' and digit runs": (read, lambda n: lines(n, run_of("| task 1234567 ", 4000), every=9,
                                                                   marked=SERVER_LINE)),
    "summary, '=' and space runs": (read, lambda n: lines(n, "n_draft" + run_of(" = ", 4000) + "x") + "\n" + SUMMARY),
    "summary, one line of spaces": (read, lambda n: "n_drafted" + " " * n + "= 1x\n" + SUMMARY),
    "Prometheus, long labels of '=' and ','": (
        read, lambda n: PROM_HEAD + lines(n, 'vllm:spec_decode_num_accepted_tokens_total{model_name="m",pad="'
                                         + run_of("=,", 3900) + '"} 1')),
    "Prometheus, one long line": (read, lambda n: PROM_HEAD + "vllm:spec_decode_num_accepted_tokens_total" + " " * n
                                  + "1\n"),
    "JSON lines with long texts": (read, lambda n: lines(n, REQUEST % (0, run_of("a:b/c=d ", 4000)))),
    "JSON nested deeply": (read, lambda n: "[" * n),
    "vLLM lines without their prefix, ', ' runs": (read, lambda n: lines(n, "Mean acceptance length: 2.00, Accepted: 1 "
                                                                      "tokens, Drafted: 2 tokens, Pad: "
                                                                      + run_of(", Accepted: ", 3900))),
    "per-round lines, '| accepted ' runs": (read, lambda n: lines(n, "slot update_slots: id  3 | task 0 "
                                                                + run_of("| accepted 1/", 4000))),
    "statistics lines, ', ' and ' = ' runs": (read, lambda n: lines(n, "statistics d: #gen drafts = 1, "
                                                                  + run_of(", #a = ", 3900), every=9,
                                                                  marked=SERVER_LINE)),
    "bench summary, ':' runs": (read, lambda n: lines(n, "Pad" + run_of(": ", 4000)) + "\nDrafts: 1\n"
                                "Draft tokens: 2\nAccepted tokens: 1\n"),
    "Prometheus web UI table, ' | ' runs": (read, lambda n: "vllm:spec_decode_num_drafts_total{e=\"0\"} | 1\n"
                                            + lines(n, run_of(" | ", 4000))),
    "a paste with placeholders, one long response": (read, lambda n: '{"choices": [ ... ], "metrics": '
                                                     '{"speculative_decoding": {"num_spec_steps": 1, "pad": "'
                                                     + "x" * n + '"}}'),
    "log lines that start like JSON lists": (read, lambda n: lines(n, "[12345] " + run_of("[x] ", 4000))),
    "llama-bench table, wide cells": (bench, lambda n: BENCH_HEAD + lines(
        n, "| m 1B | 1 GiB | 1 B | CPU | 2 | pp4 | 10.0 ± 1.0 | " + run_of("-: ", 900) + " |")),
    "llama-bench CSV, one huge field": (bench, lambda n: 'model_type,n_prompt,n_gen,avg_ts\n"' + "x" * n + '",1,0,1\n'),
}


def cpu_seconds(fn, text: str, calls: int) -> float:
    t0 = time.thread_time()
    for _ in range(calls):
        fn(text)
    return time.thread_time() - t0


def growth(fn, make, small: int, repeats: int = 3) -> float:
    """time(4 small) / time(small), each the least of ``repeats`` interleaved timings of ``calls`` calls (as many as
    make the small one last about 20 ms, so that neither is a few clock ticks)."""
    a, b = make(small), make(4 * small)
    fn(a)  # warm: imports, compiled patterns
    once = max(cpu_seconds(fn, a, 1), 1e-6)
    calls = max(1, min(200, round(0.02 / once)))
    times = {id(a): [], id(b): []}
    for _ in range(repeats):
        for text in (a, b):
            times[id(text)].append(cpu_seconds(fn, text, calls))
    return min(times[id(b)]) / min(times[id(a)])


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES)
def test_each_reader_is_linear(case):
    fn, make = CASES[case]
    assert growth(fn, make, 64 * KiB) < 8


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES)
def test_each_reader_is_linear_at_the_tabs_limit(case):
    fn, make = CASES[case]
    assert len(make(MAX_TRACE_BYTES)) <= 1.02 * MAX_TRACE_BYTES + 2 * KiB  # the makers size what they are asked for
    assert growth(fn, make, MAX_TRACE_BYTES // 4, repeats=2) < 8


def test_step_recovery_does_not_grow_with_the_span_it_searches():
    """The steps a printed mean allows span up to 200,000 values; recovery bisects the rounded counts' sum instead of
    trying each, so a span 4x wider costs about the same (trying each: 4x)."""
    rates = (0.05, 0.03, 0.02)  # 0.1 accepted a step: the printed mean 1.10 allows about accepted steps counts

    def recover(accepted: int) -> None:
        recover_steps(accepted, 1.10, 2, rates)

    assert growth(recover, lambda n: n, 40_000) < 2.5
