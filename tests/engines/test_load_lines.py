"""The load printed beside the speculative figures, read from real engine output (fixtures/wild/) and checked value
by value against what the source printed (manifest.json's ``figures``); outputs that carry means but no counts read
as a MeanRun that keeps them as printed and names what cannot be derived.

vLLM pairs each SpecDecoding line with the throughput line of the same interval; SGLang's Decode batch lines carry
their own load; benchmark results carry the concurrency and request rate they ran at."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from specviz.engines.means import MeanRun, mean_figures, underived
from specviz.engines.read import read_engine_run, read_reported
from specviz.engines.run import EngineRun, Load, load_figures, total

WILD = Path(__file__).parent / "fixtures" / "wild"
MANIFEST = {e["file"]: e for e in json.loads((WILD / "manifest.json").read_text())}
RUNNING = [f for f, e in MANIFEST.items() if e["engine"].startswith("vllm") and "Running" in e["figures"]
           and e["carries_counts"]]


def as_list(value) -> list:
    return value if isinstance(value, list) else [value]


def printed_loads(entry) -> list[tuple]:
    """(running, waiting or None, generation tokens/s) of each throughput line, as the manifest lists them (a value
    listed once holds for every line)."""
    f = entry["figures"]
    gen = as_list(f["Avg generation throughput"])
    def each(value):
        return as_list(value) * len(gen) if len(as_list(value)) == 1 else as_list(value)
    return list(zip(each(f["Running"]), each(f.get("Waiting", [None])), gen))


@pytest.mark.parametrize("name", RUNNING)
def test_each_interval_keeps_the_load_printed_beside_it(name):
    """Every load read is one the source printed, in order; an interval whose throughput line is above the excerpt
    has none (never borrowed from another interval)."""
    run = read_engine_run(WILD / name)
    parts = list(run.series) if run.series else [run]
    printed = printed_loads(MANIFEST[name])
    read = [(p.load.running, p.load.queued if printed[0][1] is not None else None, p.load.gen_tps)
            for p in parts if p.load is not None]
    assert read, "no interval was paired with its throughput line"
    assert all(load in printed for load in read), (read, printed)
    assert [printed.index(load) for load in read] == sorted(printed.index(load) for load in read)


def test_the_mtp_log_under_load_pairs_by_interval():
    """vllm#43295: the 10:27:13 SpecDecoding line has 9 running, 56 waiting; the 10:27:03 line's throughput line is
    above the excerpt, so it has no load; the KV cache usage is read as a fraction."""
    run = read_engine_run(WILD / "vllm-v1-running-waiting-mtp-8.txt")
    first, second = run.series
    assert first.load is None
    assert second.load == Load(running=9, queued=56, kv_usage=94.2 / 100, gen_tps=929.6, prompt_tps=4917.3)
    assert second.accepted == 5692 and second.drafted == 7214 and second.steps == 7214 // 2  # k = 2 (two rates)
    assert run.load is None  # a total of several intervals has no single load


def test_an_idle_interval_lends_its_throughput_line_to_no_one():
    """vllm-ascend#11431: the prefill-only interval (2 running) printed no SpecDecoding line; the two speculative
    intervals are at 3 running, 7 waiting each."""
    run = read_engine_run(WILD / "vllm-ascend-running-waiting-dspark-3.txt")
    assert [(p.load.running, p.load.queued, p.load.gen_tps) for p in run.series] == [(3, 7, 1.6), (3, 7, 2.0)]


def test_v0_intervals_keep_the_pending_queue():
    run = read_engine_run(WILD / "vllm-v0-medusa-tokens-tokens-3.txt")
    assert [(p.load.running, p.load.queued, p.load.prompt_tps) for p in run.series] == [(2, 0, 558.7), (2, 0, 278.5)]


@pytest.mark.parametrize("name", [f for f in MANIFEST if f.startswith("sglang-decode-batch")])
def test_sglang_decode_batch_lines_read_as_means_with_their_load(name):
    """Each line one entry, figures as printed; none pooled into a mean of the whole."""
    figures = MANIFEST[name]["figures"]
    run = read_reported(WILD / name)
    assert isinstance(run, MeanRun) and run.mean_length is None
    lines = len(run.series)
    for key, got in (("accept len", [e.mean_length for e in run.series]),
                     ("accept rate", [e.acceptance_rate for e in run.series]),
                     ("gen throughput (token/s)", [e.load.gen_tps for e in run.series]),
                     ("#token", [e.load.tokens for e in run.series]),
                     ("#full token", [e.load.tokens for e in run.series])):
        if key in figures:
            want = as_list(figures[key])
            assert got[-len(want):] == want if len(want) == lines else want[0] in got, (key, got, want)
    running = as_list(figures.get("#running-req", []))
    assert not running or running[-1] == run.series[-1].load.running


@pytest.mark.parametrize("name, meaning, k", [
    ("sglang-decode-batch-accept-rate-1.txt", "accept len / 4", None),  # 2025-10: len / (num_steps + 1)
    ("sglang-decode-batch-cap-len-2.txt", "(accept len - 1) / k", 5),  # 2026: cap len 6 = k + 1
    ("sglang-decode-batch-mamba-npu-3.txt", "(accept len - 1) / k", 3),  # 2026: (3.13 - 1) / 3 = 0.71
])
def test_the_accept_rate_is_read_with_the_meaning_its_figures_fit(name, meaning, k):
    run = read_reported(WILD / name)
    assert meaning in run.rate_meaning and run.k == k
    assert all(e.k == k for e in run.series)


def test_an_accept_rate_both_definitions_fit_is_called_ambiguous():
    """accept len 2.00 with rate 0.50 fits len / 4 and (len - 1) / 2: the reader says so and pins no k."""
    line = ("[2025-10-22 10:27:57 TP0] Decode batch. #running-req: 3, #token: 900, token usage: 0.01, accept len: "
            "2.00, accept rate: 0.50, cuda graph: True, gen throughput (token/s): 100.00, #queue-req: 0, ")
    run = read_reported(line)
    assert run.rate_meaning == "ambiguous" and run.k is None
    assert "ambiguous" in " ".join(run.notes) and run.series[0].load == Load(running=3, queued=0, tokens=900,
                                                                              kv_usage=0.01, gen_tps=100.0)


def test_a_source_of_means_names_what_cannot_be_derived():
    run = read_reported(WILD / "sglang-decode-batch-cap-len-2.txt")
    assert {g.split(":")[0] for g in underived(run)} == {"drafted", "accepted", "steps", "per-position rates",
                                                          "acceptance histogram"}
    entry = run.series[1]  # accept len 4.25, k = 5: 3.25 drafts accepted a step, 0.65 of k
    assert [round(r.value, 4) for r in mean_figures(entry)] == [4.25, 3.25, 0.65]
    off = read_reported(WILD / "sglang-decode-batch-no-spec-4.txt")
    assert underived(off) == ("every acceptance figure: the source reports no speculative decoding (speculation "
                              "off?)",)


@pytest.mark.parametrize("name, length, rate, blocks", [
    ("trtllm-bench-acceptance-length-2.txt", 1.86, None, 0),
    ("trtllm-bench-acceptance-rate-is-length-1.txt", None, None, 2),  # two '[AR]' blocks (BS=1, BS=4)
    ("trtllm-bench-decoding-statistics-synthetic-1.txt", 2.47, 0.49, 0),
])
def test_trtllm_bench_statistics_read_as_printed(name, length, rate, blocks):
    run = read_reported(WILD / name)
    assert (run.mean_length, run.acceptance_rate, len(run.series)) == (length, rate, blocks)
    if blocks:  # '[AR]' values are all above 1: lengths, as 2025 builds printed them
        assert [b.mean_length for b in run.series] == [2.62, 2.62]
        assert any("LENGTH" in n for n in run.series[0].notes)
    figures = MANIFEST[name]["figures"]
    spreads = {f"{s.label} {s.stat}": s.value for s in (run.series[0] if blocks else run).spreads}
    for key, value in figures.items():
        if key.startswith("[") and key.split()[1] in ("AVERAGE", "P50", "P99", "MINIMUM", "MAXIMUM"):
            assert spreads[key.replace(" ", " ", 1)] == as_list(value)[0], key


def test_an_ar_block_below_one_is_ambiguous():
    text = "-- Acceptance Rate Details ---\n[AR] MINIMUM: 0.42\n[AR] MAXIMUM: 0.80\n[AR] AVERAGE: 0.62\n"
    run = read_reported(text)
    assert run.mean_length is None and any("ambiguous" in n for n in run.notes)


def test_sglang_bench_serving_accept_length_is_the_servers_mean():
    run = read_reported(WILD / "sglang-bench-serving-accept-length-1.txt")
    assert isinstance(run, MeanRun) and run.mean_length == 5.86
    assert run.load == Load(concurrency=256, request_rate=256.0, gen_tps=6148.7)
    assert "not scoped to this run" in run.notes[0]


def test_vllm_bench_serve_text_keeps_its_concurrency():
    run = read_engine_run(WILD / "vllm-bench-serve-spec-decoding-1.txt")
    assert run.load == Load(concurrency=32, gen_tps=2905.22)


def bench_result(**spec) -> dict:
    """A vllm bench serve --save-result object (vllm/benchmarks/serve.py's keys; numbers made up)."""
    return {"date": "20260105-120000", "duration": 20.3, "completed": 100, "failed": 0, "total_input_tokens": 10000,
            "total_output_tokens": 12800, "request_throughput": 4.93, "output_throughput": 630.5,
            "max_concurrency": 8, "request_rate": "inf", **spec}


SPEC = dict(spec_decode_num_drafts=5000, spec_decode_draft_tokens=15000, spec_decode_accepted_tokens=7800,
            spec_decode_acceptance_rate=52.0, spec_decode_acceptance_length=2.56,
            spec_decode_per_position_acceptance_rates=[0.7, 0.52, 0.34])


def test_a_vllm_bench_result_json_reads_with_counts_and_load():
    run = read_engine_run(json.dumps(bench_result(**SPEC)))
    assert (run.steps, run.drafted, run.accepted, run.k, run.requests) == (5000, 15000, 7800, 3, 100)
    assert run.accepted_per_pos == (3500, 2600, 1700)  # 0.70 x 5000, 0.52 x 5000, 0.34 x 5000: sum 7800
    assert run.load == Load(concurrency=8, gen_tps=630.5)  # request_rate "inf": all at once, no rate


def test_results_at_several_concurrencies_form_a_series():
    rows = [bench_result(max_concurrency=c, output_throughput=t, **SPEC) for c, t in ((1, 120.0), (8, 630.5))]
    run = read_engine_run("\n".join(json.dumps(r) for r in rows))
    assert [p.load.concurrency for p in run.series] == [1, 8] and run.accepted == 2 * 7800


def test_a_vllm_bench_result_whose_length_disagrees_is_refused():
    with pytest.raises(ValueError, match="spec_decode_acceptance_length 2.9 is not 1 \\+ accepted / drafts"):
        read_engine_run(json.dumps(bench_result(**dict(SPEC, spec_decode_acceptance_length=2.9))))


def test_a_vllm_bench_result_without_speculation_is_its_load():
    run = read_reported(json.dumps(bench_result(request_rate=4.0)))
    assert isinstance(run, MeanRun) and run.mean_length is None
    assert run.load == Load(concurrency=8, request_rate=4.0, gen_tps=630.5)
    with pytest.raises(ValueError):
        read_engine_run(json.dumps(bench_result()))  # no counts: not an EngineRun


def test_load_figures_are_derived_in_one_place():
    assert [(r.name, r.value) for r in load_figures(Load(running=40, tokens=350592, gen_tps=155.34))] == [
        ("context tokens per running request", 350592 / 40), ("generated tokens/s per running request", 155.34 / 40)]
    assert load_figures(Load(queued=3)) == () and load_figures(None) == ()


def test_a_load_is_checked():
    with pytest.raises(ValueError, match="kv_usage is a fraction"):
        Load(kv_usage=57.9)
    with pytest.raises(ValueError, match="load running must be at least 0"):
        Load(running=-1)
    with pytest.raises(ValueError, match="must be a Load"):
        EngineRun(source="x", drafted=1, accepted=1, load={"running": 1})


def test_a_total_of_one_interval_keeps_its_load():
    one = EngineRun(source="x", drafted=4, accepted=2, load=Load(running=3))
    assert total([one]).load == Load(running=3)
    assert total([one, one]).load is None and total([one, one]).series[0].load == Load(running=3)


def test_a_bench_serve_block_pasted_with_blank_lines_keeps_its_concurrency():
    """vllm-ascend#14916 renders the block with its padding collapsed and blank lines between: read alike."""
    run = read_engine_run(WILD / "vllm-ascend-bench-serve-concurrency-3.txt")
    assert (run.steps, run.drafted, run.accepted) == (11807, 82649, 23321)
    assert run.load == Load(concurrency=3, gen_tps=126.55)


def test_a_bench_serve_block_without_speculation_is_its_load():
    """The real block cut before its Speculative Decoding section reads as a MeanRun of its load only."""
    text = (WILD / "vllm-bench-serve-spec-decoding-1.txt").read_text().split("---------------Speculative")[0]
    run = read_reported(text)
    assert isinstance(run, MeanRun) and run.mean_length is None
    assert run.load == Load(concurrency=32, gen_tps=2905.22)
    with pytest.raises(ValueError):
        read_engine_run(text)


def test_the_mtbench_summary_keeps_each_lines_length_and_throughput():
    figures = MANIFEST["sglang-mtbench-acceptance-length-1.txt"]["figures"]
    run = read_reported(WILD / "sglang-mtbench-acceptance-length-1.txt")
    assert [e.mean_length for e in run.series] == figures["Acceptance length"]
    assert [e.load.gen_tps for e in run.series] == figures["Throughput"]
