"""The load doctor: crossovers hand-computed on built runs, "too few loads to tell" where the run cannot say, the
goodput model's crossover on a throughput that is exactly linear, and real excerpts (fixtures/wild/) whose rows are
the figures their lines print."""
from __future__ import annotations

from pathlib import Path

import pytest

from specviz.engines.load_doctor import (
    TOO_FEW,
    binned,
    crossover_finding,
    diagnose_load,
    drift_finding,
    load_frame,
    model_crossover,
    speedups,
)
from specviz.engines.means import MeanRun
from specviz.engines.read import read_reported
from specviz.engines.run import EngineRun, Load, total
from specviz.views.load_engine_plots import load_figure

WILD = Path(__file__).parent / "fixtures" / "wild"


def on_run(source: str, loads, tps, accepted=None, k: int = 2) -> EngineRun:
    """A speculating run, one interval per load: 100 verify steps each, ``accepted`` drafts (default 150)."""
    accepted = accepted or [150] * len(loads)
    parts = [EngineRun(source=source, drafted=100 * k, accepted=a, steps=100, k=k,
                       load=Load(running=n, gen_tps=float(t))) for n, t, a in zip(loads, tps, accepted)]
    return total(parts, source) if len(parts) > 1 else parts[0]


def off_run(source: str, loads, tps) -> MeanRun:
    return MeanRun(source=source, series=[MeanRun(source=source, load=Load(running=n, gen_tps=float(t)))
                                          for n, t in zip(loads, tps)])


@pytest.mark.slow
def test_the_crossover_lies_between_the_last_load_that_paid_and_the_first_that_did_not():
    """on / off at 1, 2, 4, 8 running: 200/100 = 2.0, 300/190 = 1.58, 400/380 = 1.05, 420/600 = 0.70: it paid at 4,
    not at 8; one interval per load, so each range is its point and the change is decided."""
    runs = {"on": on_run("vLLM log", [1, 2, 4, 8], [200, 300, 400, 420]),
            "off": off_run("vLLM log", [1, 2, 4, 8], [100, 190, 380, 600])}
    frame = load_frame(runs)
    s = speedups(frame)
    assert list(s["bin"]) == [1, 2, 4, 8]
    assert list(s["speedup"].round(4)) == [2.0, round(300 / 190, 4), round(400 / 380, 4), 0.7]
    found = crossover_finding(frame)
    assert found.numbers["decided"] and found.severity == "warning"
    assert (found.numbers["last_paying_load"], found.numbers["first_losing_load"]) == (4, 8)
    assert "between 4 and 8 running requests" in found.text
    advice = [f for f in diagnose_load(runs, k=2) if f.code == "load_advice"]
    assert len(advice) == 1 and '"disable_by_batch_size": 4' in advice[0].text
    assert advice[0].numbers["off_above"] == 4
    fig = load_figure(frame, (4, 8))
    assert [(shape.x0, shape.x1) for shape in fig.layout.shapes] == [(4, 8)]
    assert [list(t.y) for t in fig.data if t.name == "off (speculation off)"] == [[100, 190, 380, 600]]


def test_ranges_that_hold_one_leave_the_crossover_undecided_and_give_no_advice():
    """A second interval at 4 running with 360 tokens/s: the bin's range is 360/380 = 0.95 to 400/380 = 1.05,
    which holds 1, so the run does not tell 4 from 8."""
    runs = {"on": on_run("vLLM log", [1, 2, 4, 4, 8], [200, 300, 400, 360, 420]),
            "off": off_run("vLLM log", [1, 2, 4, 8], [100, 190, 380, 600])}
    frame = load_frame(runs)
    row = speedups(frame).set_index("bin").loc[4]
    assert (round(row["low"], 4), round(row["high"], 4)) == (round(360 / 380, 4), round(400 / 380, 4))
    found = crossover_finding(frame)
    assert not found.numbers["decided"] and "do not tell" in found.text
    assert not [f for f in diagnose_load(runs, k=2) if f.code == "load_advice"]


def test_sglang_advice_names_its_steps_and_adaptive_mode():
    runs = {"on": on_run("SGLang Decode batch log", [1, 8], [200, 300]),
            "off": off_run("SGLang Decode batch log", [1, 8], [100, 400])}
    advice = [f for f in diagnose_load(runs, k=3) if f.code == "load_advice"][0]
    assert "turn speculation off above 1 concurrent requests" in advice.text
    assert "--speculative-num-steps 3 --speculative-num-draft-tokens 4" in advice.text
    assert "adaptive" in advice.text


def test_one_load_is_too_few_to_tell():
    """One load both ways (the off run's second interval generated nothing: it compares nothing)."""
    runs = {"on": on_run("vLLM log", [4, 8], [400, 500]), "off": off_run("vLLM log", [4, 8], [380, 0])}
    assert list(speedups(load_frame(runs))["bin"]) == [4]
    found = diagnose_load(runs)
    assert found[0].code == "load_crossover" and found[0].text.startswith(TOO_FEW)
    assert found[1].code == "load_drift" and found[1].numbers["direction"] == "untold"
    assert not [f for f in found if f.code == "load_advice"]


@pytest.mark.parametrize("accepted, word", [([150, 140, 50, 60], "fell"), ([50, 60, 150, 140], "rose"),
                                            ([100, 120, 110, 130], "stayed"), ([150, 50], "untold")])
def test_acceptance_drift_is_read_off_the_bins(accepted, word):
    """Mean length 1 + accepted / 100 steps, half the intervals at 1 running, half at 8: 2.45 (2.4-2.5) -> 1.55
    (1.5-1.6) fell; 2.1-2.2 and 2.1-2.3 overlap; one interval at each end has no range to read a change against."""
    half = len(accepted) // 2
    frame = load_frame([on_run("vLLM log", [1] * half + [8] * half, [100] * len(accepted), accepted)])
    found = drift_finding(frame)
    assert found.numbers["direction"] == word
    assert (found.numbers["low"], found.numbers["high"]) == pytest.approx(
        (1 + sum(accepted[:half]) / 100 / half, 1 + sum(accepted[half:]) / 100 / half))


def test_the_models_crossover_on_a_linear_step_cost():
    """Off: a pass costs 0.01 + 0.001 b s, so b / (0.01 + 0.001 b) tokens/s at 1, 2, 4, 8, 16. On: mean length 1.9
    at k = 2 and a free draft, so speedup = 1.9 (0.01 + 0.001 b) / (0.01 + 0.003 b) < 1 when b > 0.009 / 0.0011 =
    8.2: the model crosses at batch 9, having paid at 8."""
    loads = [1, 2, 4, 8, 16]
    runs = {"on": on_run("vLLM log", [1], [100], [90]), "off": off_run("vLLM log", loads,
                                                                       [b / (0.01 + 0.001 * b) for b in loads])}
    cross = model_crossover(load_frame(runs), k=2)
    assert (cross.verdict, cross.batch, cross.last_paying) == ("crosses", 9, 8)


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="EngineRun or MeanRun"):
        load_frame({"x": 3})
    with pytest.raises(ValueError, match="nothing to chart"):
        load_figure(load_frame([]))


# -- real excerpts ------------------------------------------------------------------------------------------
def test_vllm_logs_under_load_give_the_figures_their_lines_print():
    """vllm#43295: the 10:27:13 interval at 9 running, 929.6 tokens/s, 1 + 5692 / 3607 = 2.58 printed; the 10:30:43
    one at 8 running, 1004.4 tokens/s, 1 + 6418 / 3627 = 2.77 printed (the other intervals' throughput lines lie
    above the excerpts: no load, no row)."""
    frame = load_frame({name: read_reported(WILD / name) for name in ("vllm-v1-running-waiting-mtp-8.txt",
                                                                      "vllm-v1-running-waiting-mtp-9.txt")})
    rows = [(r.load, r.tokens_per_s, round(r.mean_length, 2)) for r in frame.itertuples()]
    assert rows == [(9, 929.6, 2.58), (8, 1004.4, 2.77)]
    assert set(frame["engine"]) == {"vLLM"} and set(frame["speculation"]) == {"on"}
    assert list(binned(frame)["bin"]) == [8]  # 8 and 9 running share a bin: one load, too few to tell
    found = crossover_finding(frame)
    assert found.text.startswith(TOO_FEW) and "speculation off at the same loads" in found.text
    assert TOO_FEW in drift_finding(frame).text


def test_sglang_decode_batch_lines_give_their_load_and_context():
    """sglang#30047: '#running-req: 40, #full token: 350592, accept len: 3.13, gen throughput (token/s): 155.34'."""
    frame = load_frame([read_reported(WILD / "sglang-decode-batch-mamba-npu-3.txt")])
    row = frame.iloc[0]
    assert (row["load"], row["tokens_per_s"], row["mean_length"]) == (40, 155.34, 3.13)
    assert row["context_per_request"] == 350592 / 40 and row["engine"] == "SGLang"


@pytest.mark.slow
def test_real_sglang_runs_on_and_off_share_too_few_loads():
    """sglang#11948 speculated at 1 running only; sglang#1270 (no speculation) ran at 2 then 1: one shared load."""
    runs = {"on": read_reported(WILD / "sglang-decode-batch-accept-rate-1.txt"),
            "off": read_reported(WILD / "sglang-decode-batch-no-spec-4.txt")}
    frame = load_frame(runs)
    off = frame[frame["speculation"] == "off"]
    assert list(off["load"]) == [2, 2, 2] + [1] * 7 and off["tokens_per_s"].iloc[0] == 447.31
    assert list(frame[frame["speculation"] == "on"]["mean_length"]) == [2.17, 1.95, 1.8, 2.05, 1.8]
    found = diagnose_load(runs)
    assert found[0].text.startswith(TOO_FEW) and found[0].numbers["shared_bins"] == 1
    fig = load_figure(frame)
    assert [len(t.x) for t in fig.data] == [5, 5, 10]  # on: tokens/s and length; off: tokens/s only


def test_a_benchmark_reads_as_its_concurrency():
    """vllm-ascend#14916: 'Maximum request concurrency: 3', 126.55 tok/s, 1 + 23321 / 11807 = 2.98 printed."""
    frame = load_frame([read_reported(WILD / "vllm-ascend-bench-serve-concurrency-3.txt")])
    row = frame.iloc[0]
    assert (row["load"], row["load_kind"], row["tokens_per_s"]) == (3, "concurrency", 126.55)
    assert round(row["mean_length"], 2) == 2.98

