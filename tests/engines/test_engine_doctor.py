"""Each seeded fixture raises its finding, the healthy ones none of the faults."""
from pathlib import Path

import pytest

from specviz.engines import CostModel, EngineRun, diagnose, read_engine_run

FIXTURES = Path(__file__).parent / "fixtures"
LLAMA = FIXTURES / "llamacpp"
FAULTS = {"cliff", "temperature_collapse", "budget_mismatch", "drift", "nothing_accepted", "all_or_nothing",
          "short_drafts", "position0_moves_with_k"}


def codes(findings):
    return {f.code for f in findings}


def finding(findings, code):
    (found,) = [f for f in findings if f.code == code]
    return found


@pytest.mark.parametrize("name", ["vllm_healthy.log", "vllm_requests_choice.jsonl", "vllm_greedy.jsonl",
                                  "sglang_healthy.jsonl", "trtllm_healthy.json", "trtllm_stream.sse",
                                  "vllm_metrics_2.prom", "llamacpp_metrics.prom", "llamacpp/server.log"])
def test_healthy_runs_raise_no_fault(name):
    found = {f.code for f in diagnose(read_engine_run(FIXTURES / name)) if f.severity != "info"}
    assert not found & FAULTS, found


def test_healthy_run_reports_alpha_and_both_curves():
    findings = diagnose(read_engine_run(FIXTURES / "vllm_healthy.log"))  # drawn with alpha = 0.7
    alpha = finding(findings, "alpha")
    assert alpha.numbers["low"] < 0.7 < alpha.numbers["high"]
    curve = finding(findings, "curve").numbers
    # 1820, 1260, 884 accepted of 2577 steps: marginal a_i / 2577, conditional a_i / a_(i-1)
    assert curve["marginal"] == [0.706, 0.489, 0.343]
    assert curve["conditional"] == [0.706, 0.692, 0.702]
    assert finding(findings, "iid_fit").severity == "info"


@pytest.mark.parametrize("name, reached, flag", [
    ("vllm_cliff.log", 653, '"num_speculative_tokens": 5'),
    ("sglang_cliff.json", 126, "--speculative-num-steps 5 --speculative-eagle-topk 1 --speculative-num-draft-tokens 6"),
    ("trtllm_cliff.json", 126, "max_draft_len: 5"),
])
def test_cliff_after_position_5(name, reached, flag):
    cliff = finding(diagnose(read_engine_run(FIXTURES / name)), "cliff")
    assert cliff.severity == "problem"
    assert cliff.numbers["position"] == 6 and cliff.numbers["rate_after"] == 0.0
    assert cliff.numbers["reached"] == reached  # steps that accepted all of the first five drafts
    assert flag in cliff.text and "draft-length mismatch" in cliff.text


@pytest.mark.parametrize("name, emitted, expected", [
    ("vllm_mismatch.json", 61, 140), ("sglang_mismatch.json", 101, 200), ("trtllm_mismatch.json", 61, 140)])
def test_budget_mismatch(name, emitted, expected):
    found = finding(diagnose(read_engine_run(FIXTURES / name)), "budget_mismatch")
    assert found.severity == "problem"
    assert (found.numbers["emitted"], found.numbers["accepted_plus_steps"]) == (emitted, expected)
    assert "bonus token" in found.text


def test_tokens_emitted_outside_steps_is_a_warning():
    run = EngineRun(source="t", drafted=400, accepted=200, steps=100, k=4, emitted=900, requests=2)
    found = finding(diagnose(run), "budget_mismatch")  # 900 > 300 + 2 prefill tokens + 1%
    assert found.severity == "warning" and "600 tokens were emitted outside verify steps" in found.text
    assert "budget_mismatch" not in codes(diagnose(EngineRun(source="t", drafted=400, accepted=200, steps=100, k=4,
                                                             emitted=302, requests=2)))


@pytest.mark.parametrize("greedy, sampled", [
    ("vllm_greedy.jsonl", "vllm_sampled.jsonl"), ("sglang_greedy.json", "sglang_sampled.json"),
    ("trtllm_greedy.json", "trtllm_sampled.json")])
def test_temperature_collapse_pairs(greedy, sampled):
    runs = [read_engine_run(FIXTURES / greedy, temperature=0), read_engine_run(FIXTURES / sampled, temperature=0.7)]
    found = finding(diagnose(runs), "temperature_collapse")
    assert found.severity == "problem" and found.numbers["sampled_runs"] == [1]
    assert "pass the draft's probabilities" in found.text and "min(1, p/q)" in found.text
    each = diagnose([read_engine_run(FIXTURES / greedy), read_engine_run(FIXTURES / sampled)])
    assert "temperature_collapse" not in codes(each)  # temperatures unknown: nothing to compare


def test_real_llamacpp_collapses_when_sampling():
    """llama.cpp keeps a draft only when the target's own sample equals it (common_sampler_sample_and_accept_n):
    the bundled pair's recorded responses accept 233 of 480 drafts greedily, 78 of 1343 at temperature 0.8."""
    greedy = read_engine_run(sorted(LLAMA.glob("completion-t0-p*.json")))
    sampled = read_engine_run(sorted(LLAMA.glob("completion-t0.8-p*.json")))
    assert (greedy.accepted, greedy.drafted, sampled.accepted, sampled.drafted) == (233, 480, 78, 1343)
    found = finding(diagnose([greedy, sampled]), "temperature_collapse")
    assert found.numbers["greedy_rate"] == pytest.approx(233 / 480)
    assert found.numbers["sampled_rate"] == pytest.approx(78 / 1343)
    assert found.numbers["ratio"] == pytest.approx((78 / 1343) / (233 / 480))  # 0.120
    assert found.numbers["ratio_low"] < 0.12 < found.numbers["ratio_high"] < 0.5


def test_runs_are_pooled_by_temperature_for_one_finding_each():
    """Ten responses, five greedy and five at T = 0.8, read one by one: one finding, the pools' own rates."""
    greedy = [read_engine_run(p) for p in sorted(LLAMA.glob("completion-t0-p*.json"))]
    sampled = [read_engine_run(p) for p in sorted(LLAMA.glob("completion-t0.8-p*.json"))]
    found = [f for f in diagnose(greedy + sampled) if f.code == "temperature_collapse"]
    assert len(found) == 1 and found[0].numbers["sampled_runs"] == [5, 6, 7, 8, 9]
    assert found[0].numbers["greedy_rate"] == pytest.approx(233 / 480)
    assert found[0].text.startswith("runs 6, 7, 8, 9, 10 against runs 1, 2, 3, 4, 5: ")


def test_a_gentle_fall_with_temperature_is_no_collapse():
    greedy = read_engine_run(FIXTURES / "vllm_greedy.jsonl", temperature=0)  # 555 / 900
    warm = read_engine_run(FIXTURES / "vllm_requests_choice.jsonl", temperature=0.7)  # 344 / 675
    assert "temperature_collapse" not in codes(diagnose([greedy, warm]))


def test_drift_over_a_log():
    found = finding(diagnose(read_engine_run(FIXTURES / "vllm_drift.log")), "drift")
    assert found.numbers["first"] > found.numbers["last"] + 0.2 and found.numbers["intervals"] == 24
    assert found.numbers["p_value"] < 1e-6


def test_positions_that_do_not_pay_by_hand():
    run = read_engine_run(FIXTURES / "vllm_healthy.log")  # marginal 1820, 1260, 884 over 2577 steps
    # c = 0.3, v = 1: speedup (1 + sum of marginals) / (0.3 k + 1) = 1.3125, 1.3720, 1.3359 for k = 1, 2, 3
    found = finding(diagnose(run, cost=CostModel(c=0.3)), "positions_do_not_pay")
    assert found.numbers["best_k"] == 2
    assert found.numbers["speedups"] == pytest.approx([1.0, 1.3125, 1.372, 1.3359], abs=5e-4)
    assert found.text.startswith("position 3 does not pay under c = 0.3")
    # c = 0.05: 2.1954 / 1.10 = 1.996 < 2.5382 / 1.15 = 2.207, so the third position pays
    assert "positions_do_not_pay" not in codes(diagnose(run, cost=CostModel(c=0.05)))


def test_several_runs_are_labelled():
    runs = [read_engine_run(FIXTURES / "vllm_healthy.log"), read_engine_run(FIXTURES / "vllm_cliff.log")]
    findings = diagnose(runs)
    cliff = finding(findings, "cliff")
    assert cliff.numbers["run"] == 1 and cliff.text.startswith("run 2 (vLLM log): ")


def test_what_cannot_be_checked_is_said():
    findings = diagnose(read_engine_run(FIXTURES / "llamacpp_server_old.log"))
    assert codes(findings) == {"missing"}
    assert any("no verify-step count" in f.text for f in findings)
    with pytest.raises(ValueError, match="EngineRun"):
        diagnose("vllm.log")
