"""The conformance kit: its statistics on hand-computed values, its stated power against a simulation, the greedy
classification, bad input, and one pass (Leviathan's rule) and one flag (a lossy rule) against specviz.serve."""
import json
import threading

import numpy as np
import pytest
import torch
from scipy.stats import chi2

from specviz.conformance import LlamaCpp, OpenAI, Setting, read_card, read_samples, run
from specviz.conformance.__main__ import main
from specviz.conformance.greedy import classify
from specviz.conformance.power import biased, detectable_tv, kept_law, plan_n, power, simulated_power
from specviz.conformance.stats import OTHER, holm, merged_table, position_tests, table_test
from specviz.serve import Engine, ScalarResidual, make_server, table_pair


# -- statistics, by hand ---------------------------------------------------------------------------------------
def test_chi_square_of_a_hand_computed_table():
    # [[30, 10], [20, 20]]: expected 25, 15 in both rows; chi2 = 2 (25/25 + 25/15) = 5.333, df 1
    labels, table = merged_table(["a"] * 30 + ["b"] * 10, ["a"] * 20 + ["b"] * 20)
    assert labels == ["a", "b"] and table.tolist() == [[30, 10], [20, 20]]
    stat, df, p, method = table_test(table)
    assert (df, method) == (1, "chi-square")
    assert stat == pytest.approx(16 / 3) and p == pytest.approx(chi2.sf(16 / 3, 1)) and p == pytest.approx(0.02092, abs=1e-5)


def test_rare_categories_are_merged_until_big_enough():
    # 100 a / 100 b a side; c, d, e once each: expected 1, 0.5, 0.5 -> merged, then too small -> b joins them
    on, off = ["a"] * 100 + ["b"] * 100 + ["c"], ["a"] * 100 + ["b"] * 100 + ["d", "e"]
    labels, table = merged_table(on, off)
    assert labels == ["a", OTHER] and table.tolist() == [[100, 101], [100, 102]]


def test_a_small_two_by_two_table_takes_fishers_exact_test():
    stat, df, p, method = table_test(np.array([[3, 1], [1, 3]]))
    assert method == "Fisher exact" and p == pytest.approx(0.4857, abs=1e-4)  # 2 * (16 + 1) / 70


def test_holm_by_hand():
    # sorted 0.01, 0.03, 0.04 -> 3 * 0.01, max(0.03, 2 * 0.03), max(0.06, 1 * 0.04)
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])


def test_position_tests_condition_on_the_modal_prefix_and_skip_thin_ones():
    on = [(1, 2, 3)] * 40 + [(1, 3, 3)] * 10
    off = [(1, 2, 4)] * 40 + [(2, 3, 3)] * 10
    t = position_tests(on, off, [1, 2, 3], min_group=20).set_index(["position", "kind"])
    assert t.loc[(2, "conditional"), "given"] == "1" and t.loc[(2, "conditional"), "n_off"] == 40
    assert t.loc[(3, "conditional"), "given"] == "1 2"
    assert t.loc[(3, "conditional"), "pvalue"] < 1e-9  # 3 against 4 after the same prefix
    assert (1, "conditional") not in t.index  # token 1's conditional test is its joint one


# -- power: the stated figure against the detection rate measured ---------------------------------------------
@pytest.mark.slow
def test_stated_power_matches_the_simulated_detection_rate():
    law, n, alpha = [0.4, 0.3, 0.2, 0.1], 400, 0.05 / 4
    tv = detectable_tv(law, n, n, alpha)
    rng = np.random.default_rng(0)
    for bias in (tv, tv / 2):
        b = np.array(law) + [-bias, bias, 0, 0]
        measured = simulated_power(law, b, n, n, alpha, 500, rng)
        assert abs(measured - power(law, bias, n, n, alpha)) < 0.05, (bias, measured)
    assert power(law, tv, n, n, alpha) == pytest.approx(0.95, abs=1e-6)
    assert abs(plan_n(law, tv, alpha) - n) <= 2  # the planner inverts the same curve
    assert simulated_power(law, law, n, n, alpha, 500, rng) < 0.03  # and the test keeps its level


def test_a_law_with_a_large_merged_cell_states_the_power_it_measures():
    # Zipf over 50 tokens at N = 500: the tokens under 1% merged (0.163) outweigh every token but the first (0.302),
    # so the stated bias moves probability from that token to the merged cell, and the simulation draws that shape
    zipf = 1 / np.arange(1, 51) ** 1.2
    law, n, alpha = zipf / zipf.sum(), 500, 0.05 / 6
    kept = kept_law(law, n, n)
    assert kept_law(kept, n, n) == pytest.approx(kept) and kept[1] == pytest.approx(law[law < 0.01].sum())
    tv = detectable_tv(law, n, n, alpha)
    assert power(law, tv, n, n, alpha) == pytest.approx(0.95, abs=1e-6)
    measured = simulated_power(kept, biased(kept, tv), n, n, alpha, 400, np.random.default_rng(1))
    assert abs(measured - 0.95) < 0.05, measured


# -- greedy ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(5))
def test_greedy_divergence_is_classified_by_the_margin_there(seed):
    rng = np.random.default_rng(seed)
    off = rng.integers(0, 50, 12).tolist()
    at = int(rng.integers(1, 12))
    on = off[:at] + [off[at] + 1] + off[at + 1:]
    margin = float(10 ** rng.uniform(-6, 0))
    top = [[(t, -0.1), (t + 1, -0.1 - (margin if i == at else 2.0))] for i, t in enumerate(off)]
    d = classify("p0", on, off, top)
    assert (d.position, d.token_on, d.token_off) == (at + 1, off[at] + 1, off[at])
    assert d.margin == pytest.approx(margin) and d.kind == ("near-tie" if margin < 1e-3 else "structural")
    assert classify("p0", off, off, top).kind == "identical"
    assert classify("p0", on, off, None).kind == "unknown (no logprobs)"


# -- bad input ------------------------------------------------------------------------------------------------
def lines(mode, n, setting="T=0.6 top_k=3 top_p=1 min_p=0", tokens=(1, 2)):
    return [dict(engine="e", version="1", prompt_id="p0", setting=setting, settings=Setting().to_dict(), mode=mode,
                 sample=i, seed=i, n_predict=len(tokens), tokens=list(tokens), texts=[], logprobs=None, top=None,
                 draft_n=None, draft_accepted=None) for i in range(n)]


def write(path, rows, extra=""):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + extra)
    return path


def test_bad_samples_are_refused_with_a_reason(tmp_path):
    on = write(tmp_path / "on.jsonl", lines("on", 40))
    assert len(read_samples(on, write(tmp_path / "off.jsonl", lines("off", 40)))) == 80
    with pytest.raises(ValueError, match="different settings"):
        read_samples(on, write(tmp_path / "b.jsonl", lines("off", 40, setting="T=1 top_k=0 top_p=1 min_p=0")))
    with pytest.raises(ValueError, match="too few samples: 10"):
        read_samples(on, write(tmp_path / "c.jsonl", lines("off", 10)))
    with pytest.raises(ValueError, match="line 41 is not JSON"):
        read_samples(on, write(tmp_path / "d.jsonl", lines("off", 40), extra="{oops\n"))
    with pytest.raises(ValueError, match="expected 'off'"):
        read_samples(on, on)
    with pytest.raises(ValueError, match="lacks tokens"):
        read_samples(on, write(tmp_path / "e.jsonl", [{k: v for k, v in r.items() if k != "tokens"}
                                                     for r in lines("off", 40)]))
    with pytest.raises(ValueError, match="not a conformance card"):
        read_card(on)


def test_the_command_line_says_why_it_cannot_read_the_files(tmp_path, capsys):
    on = write(tmp_path / "on.jsonl", lines("on", 40))
    bad = write(tmp_path / "off.jsonl", lines("off", 40), extra="{oops\n")
    assert main(["--on", str(on), "--off", str(bad)]) == 2  # neither a pass (0) nor a flag (1)
    err = capsys.readouterr().err
    assert err.startswith("python -m specviz.conformance: error: ") and "line 41 is not JSON" in err
    assert "Traceback" not in err


def test_scalar_residual_bug_by_hand():
    p, q = torch.tensor([[0.5, 0.3, 0.2]]), torch.tensor([[0.2, 0.2, 0.6]])
    # x = 0: max(0, p - q(0) = 0.2) = [0.3, 0.1, 0] -> [0.75, 0.25, 0]; x = 2: nothing above 0.6 -> p itself
    assert ScalarResidual().residual(p, q, torch.tensor([0]))[0].tolist() == pytest.approx([0.75, 0.25, 0])
    assert ScalarResidual().residual(p, q, torch.tensor([2]))[0].tolist() == pytest.approx([0.5, 0.3, 0.2])


# -- against specviz.serve: the negative control ----------------------------------------------------------------
@pytest.fixture
def served():
    servers = []

    def start(rule):
        server = make_server(Engine(*table_pair(), rule=rule))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield start
    for s in servers:
        s.shutdown()
        s.server_close()


@pytest.mark.slow
def test_leviathan_passes_and_a_lossy_rule_is_flagged(served, tmp_path):
    exact = run(LlamaCpp(served("leviathan")), [[1]], n=200, seed=0, out_dir=tmp_path)
    assert exact.verdict == "pass" and exact.n == 200 and exact.tests.tested.sum() == 6  # positions 2-4, two kinds
    assert exact.acceptance["drafted"] > 0 and exact.greedy[0].kind == "identical"
    card = read_card(tmp_path / "card.json")
    assert card.attrs["verdict"] == "pass" and "would be caught 95% of the time" in card.attrs["power"]
    assert len(read_samples(tmp_path / "samples-on.jsonl", tmp_path / "samples-off.jsonl")) == 400
    assert main(["--on", str(tmp_path / "samples-on.jsonl"), "--off", str(tmp_path / "samples-off.jsonl")]) == 0
    lossy = run(LlamaCpp(served("typical")), [[1]], n=200, seed=0, greedy_tokens=0)
    assert lossy.verdict == "flag" and lossy.tests.flagged.sum() >= 2


@pytest.mark.slow
def test_a_bad_request_is_answered_400_and_read_as_a_value_error(served):
    with pytest.raises(ValueError, match="answered 400.*speculative.rule must be one of"):
        LlamaCpp(served("leviathan"), extra={"speculative.rule": "nope"}).draw([1], Setting(), True, 0, 4, 1)


@pytest.mark.slow
def test_the_openai_client_reads_token_ids_and_a_structural_divergence(served):
    url = served("optimistic")
    client = OpenAI(url, url, extra_off={"speculative": False})
    draw = client.draw([1], Setting(0.0, 0, 1.0, 0.0), False, 0, 6, n_probs=2)
    assert len(draw.tokens) == 6 and all(isinstance(t, int) for t in draw.tokens) and len(draw.top[0]) == 2
    on = client.draw([3], Setting(0.0, 0, 1.0, 0.0), True, 0, 12, n_probs=2)
    off = client.draw([3], Setting(0.0, 0, 1.0, 0.0), False, 0, 12, n_probs=2)
    d = classify("p0", on.tokens, off.tokens, off.top)
    assert d.kind == "structural" and d.margin > 1e-3  # the optimistic rule keeps the draft's argmax


def test_the_card_plot_has_one_bar_per_tested_row():
    from specviz.views.conformance_plots import pvalue_figure

    tests = position_tests([(1, 2)] * 50, [(1, 3)] * 50, [1, 2]).assign(
        prompt_id="p0", tested=lambda t: t.position > 1, p_holm=lambda t: t.pvalue)
    fig = pvalue_figure(tests)
    assert sum(len(bar.x) for bar in fig.data) == 2 and {bar.name for bar in fig.data} == {"joint", "conditional"}
