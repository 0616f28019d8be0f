"""The doctor on real engine output (fixtures/wild/): each excerpt raises the findings fixtures/wild/findings.json
expects of it and none it rules out (a run without a fault raises none of the faults), with the figures its
source printed; two real runs compared; a real block drafter priced as one."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from specviz.engines import CostModel, advise, diagnose, read_engine_run
from specviz.engines.compare_runs import compare_runs, comparison_text

WILD = Path(__file__).parent / "fixtures" / "wild"
EXPECTED = json.loads((WILD / "findings.json").read_text())
MANIFEST = {e["file"]: e for e in json.loads((WILD / "manifest.json").read_text())}


def raised(findings, severities=("warning", "problem")) -> set[str]:
    return {f.code for f in findings if f.severity in severities}


def finding(name: str, code: str):
    (hit,) = [f for f in diagnose(read_engine_run(WILD / name)) if f.code == code]
    return hit


def test_every_expectation_names_an_excerpt_with_counts():
    for name, entry in EXPECTED.items():
        assert name in MANIFEST and MANIFEST[name]["carries_counts"], name
        assert not set(entry["expected"]) & set(entry["not_expected"]), name
        assert entry["why"], name


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_real_runs_raise_what_they_show(name):
    entry = EXPECTED[name]
    findings = diagnose(read_engine_run(WILD / name))
    codes = raised(findings)
    assert set(entry["expected"]) <= codes, (name, codes)
    assert not set(entry["not_expected"]) & codes, (name, codes)
    assert set(entry.get("expected_info", [])) <= raised(findings, ("info",))


def test_enough_real_runs_are_checked_both_ways():
    healthy = [n for n, e in EXPECTED.items() if not e["expected"] and not e.get("expected_info")
               and "nothing_accepted" in e["not_expected"]]
    faults = {code for e in EXPECTED.values() for code in e["expected"]}
    assert len(healthy) >= 15 and {"nothing_accepted", "all_or_nothing", "short_drafts"} <= faults


def test_nothing_accepted_in_real_logs():
    pd = finding("vllm-ascend-specdecoding-pd-1.txt", "nothing_accepted")  # 3 intervals of 99 steps, k = 5
    assert (pd.numbers["accepted"], pd.numbers["trials"]) == (0, 297)
    assert pd.numbers["upper_bound"] == pytest.approx(1 - 0.01 ** (1 / 297))
    medusa = finding("vllm-v0-medusa-tokens-tokens-3.txt", "nothing_accepted")  # 51056 drafts / k = 16
    assert (medusa.numbers["accepted"], medusa.numbers["trials"]) == (0, 3191)
    dflash = finding("vllm-v1-specdecoding-no-prefix-3.txt", "nothing_accepted")  # 614 + 548 drafts of 15
    assert (dflash.numbers["accepted"], dflash.numbers["trials"]) == (61, 1162) and dflash.severity == "problem"
    assert "61 of 1162 steps accepted their first draft (5.2%" in dflash.text
    early = finding("vllm-v0-speculative-metrics-2.txt", "nothing_accepted")  # 15 drafts of 5: 3 steps
    assert early.severity == "info" and early.numbers["trials"] == 3 and early.numbers["needed"] == 44


def test_all_accepted_in_a_real_reasoning_loop():
    hit = finding("vllm-v1-specdecoding-all-accepted-7.txt", "all_or_nothing")  # 264/3 + 261/3 = 175 steps
    assert hit.numbers["every_step_all"] and hit.numbers["checks"] == 525
    assert "mean acceptance length exactly k + 1 = 4 over 175 steps" in hit.text and "loop" in hit.text


def test_short_drafts_in_a_real_summary():
    hit = finding("llamacpp-speculative-summary-1.txt", "short_drafts")  # n_drafted 132, n_draft 8
    assert hit.numbers["drafted"] == 132 and hit.numbers["k"] == 8
    assert hit.numbers["drafts_per_step"] == pytest.approx(132 / hit.numbers["steps"])
    assert hit.numbers["drafts_per_step"] < 4


def test_two_real_intervals_compared():
    """One server's two 10 s intervals (MTP, k = 5): no position moves beyond its interval. The broken DFlash
    drafter's two intervals: position 1 rises from 22/614 to 39/548 (+0.035, interval +0.006 to +0.067 at 97.5%);
    positions 3 to 15 are reached by no step of either."""
    steady = read_engine_run(WILD / "vllm-v1-specdecoding-engine-interleaved-5.txt").series
    c = compare_runs(steady[0], steady[1])
    assert (c.positions.moved == "no").all() and len(c.positions) == 5
    broken = read_engine_run(WILD / "vllm-v1-specdecoding-no-prefix-3.txt").series
    c = compare_runs(broken[0], broken[1])
    assert c.positions.moved.tolist() == ["up", "no"] and c.unreached == tuple(range(3, 16))
    row = c.positions.iloc[0]
    assert (row.accepted_a, row.reached_a, row.accepted_b, row.reached_b) == (22, 614, 39, 548)
    assert (row.change_low, row.change_high) == pytest.approx((0.006, 0.067), abs=5e-4)
    assert "position 1 rose from 0.036 to 0.071" in comparison_text(c)


def test_a_real_block_drafter_priced_as_one():
    """DFlash at k = 15 (65 steps; accepted at positions 1-5: 39, 25, 14, 7, 4). c = 0.3, v = 1 + 0.04 (n - 1):
    measured k = 4 as a block: (1 + 85/65) / (0.3 + 1.16) = 1.5806; as 4 sequential steps (1.2 + 1.16) = 0.978.
    Priced sequentially the best is k = 1: (1 + 39/65) / (0.3 + 1.04) = 1.194."""
    run = read_engine_run(WILD / "vllm-v1-specdecoding-dflash-k15-4.txt")
    cost = CostModel(c=0.3, verify=((1, 1.0), (16, 1.6)))
    block, sequential = advise(run, cost, drafter="block"), advise(run, cost)
    assert block.best_k_measured == 4 and sequential.best_k_measured == 1 and sequential.best_k == 1
    assert block.table.k.max() == 15  # the block it drafts
    assert cost.speedup(1 + 85 / 65, 4, "block") == pytest.approx(1.5806, abs=1e-4)
    assert cost.speedup(1 + 85 / 65, 4) == pytest.approx(0.9778, abs=1e-4)
