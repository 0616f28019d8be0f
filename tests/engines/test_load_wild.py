"""The load doctor on engine output with varying load, read through the readers: a vLLM server log, SGLang Decode
batch lines and vllm bench serve results, each with speculation on and off at 1 to 32 requests
(fixtures/load_from_format/, rendered from each engine's format string: no public thread holds such a pair). In
every one speculation pays up to 8 and not from 16; the doctor must say so and advise in the engine's own syntax."""
from __future__ import annotations

from pathlib import Path

import pytest

from specviz.engines.load_doctor import diagnose_load, load_frame, speedups
from specviz.engines.means import MeanRun
from specviz.engines.read import read_engine_run, read_reported
from specviz.engines.run import EngineRun

SWEEPS = Path(__file__).parent / "fixtures" / "load_from_format"
PAIRS = {"vLLM log": ("vllm-load-sweep-on.txt", "vllm-load-sweep-off.txt"),
         "SGLang Decode batch": ("sglang-load-sweep-on.txt", "sglang-load-sweep-off.txt"),
         "vllm bench serve JSON": ("vllm-bench-sweep-on.jsonl", "vllm-bench-sweep-off.jsonl")}


def runs(pair: str) -> dict:
    on, off = PAIRS[pair]
    return {"on": read_reported(SWEEPS / on), "off": read_reported(SWEEPS / off)}


@pytest.mark.parametrize("pair", PAIRS)
def test_the_crossover_lies_between_8_and_16(pair):
    found = {f.code: f for f in diagnose_load(runs(pair), k=3)}
    cross = found["load_crossover"]
    assert cross.severity == "warning" and cross.numbers["decided"]
    assert (cross.numbers["last_paying_load"], cross.numbers["first_losing_load"]) == (8, 16)
    assert found["load_advice"].numbers["off_above"] == 8


def test_the_speedups_are_the_printed_throughputs_divided():
    """vLLM log at 8 running: on 612.0 and 603.9 tokens/s (the lines' own figures), off 441.0 and 437.0: 1.39, its
    range 603.9 / 441.0 = 1.37 to 612.0 / 437.0 = 1.40 above 1."""
    frame = load_frame(runs("vLLM log"))
    at8 = frame[frame["load"] == 8]
    on = sorted(at8[at8["speculation"] == "on"]["tokens_per_s"])
    off = sorted(at8[at8["speculation"] == "off"]["tokens_per_s"])
    assert on == [603.9, 612.0] and off == [437.0, 441.0]
    row = speedups(frame).set_index("bin").loc[8]
    assert row["speedup"] == pytest.approx((sum(on) / 2) / (sum(off) / 2))
    assert row["low"] == pytest.approx(on[0] / off[1]) and row["low"] > 1
    assert speedups(frame).set_index("bin").loc[16]["high"] < 1


def test_vllm_advice_is_its_disable_by_batch_size_setting():
    advice = next(f for f in diagnose_load(runs("vLLM log"), k=3) if f.code == "load_advice")
    assert '"disable_by_batch_size": 8' in advice.text and "--speculative-disable-by-batch-size 8" in advice.text


def test_sglang_advice_names_its_steps_and_adaptive_mode():
    advice = next(f for f in diagnose_load(runs("SGLang Decode batch"), k=3) if f.code == "load_advice")
    assert "turn speculation off above 8 concurrent requests" in advice.text
    assert "--speculative-num-steps 3 --speculative-num-draft-tokens 4 --speculative-eagle-topk 1" in advice.text


def test_each_sweep_reads_as_what_it_is():
    vllm = runs("vLLM log")
    assert isinstance(vllm["on"], EngineRun) and len(vllm["on"].series) == 12 and vllm["on"].k == 3
    assert isinstance(vllm["off"], MeanRun) and [p.load.running for p in vllm["off"].series][::2] == [1, 2, 4, 8, 16, 32]
    with pytest.raises(ValueError, match="closest to vLLM throughput log lines without speculation"):
        read_engine_run(SWEEPS / "vllm-load-sweep-off.txt")
    bench = runs("vllm bench serve JSON")
    assert [p.load.concurrency for p in bench["on"].series] == [1, 2, 4, 8, 16, 32]
    assert [p.load.concurrency for p in bench["off"].series] == [1, 2, 4, 8, 16, 32]
    sglang = runs("SGLang Decode batch")
    assert [p.mean_length for p in sglang["on"].series][:2] == [2.62, 2.6]


def test_without_the_run_off_the_crossover_is_not_claimed():
    for pair in PAIRS:
        found = diagnose_load({"on": runs(pair)["on"]}, k=3)
        assert found[0].code == "load_crossover" and not found[0].numbers.get("decided")
        assert not [f for f in found if f.code == "load_advice"]
