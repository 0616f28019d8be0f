"""The doctor's findings for the questions users ask, on seeded runs whose answers are worked out by hand: nothing
accepted, all-or-nothing acceptance, drafts far shorter than k, the temperature collapse as a ratio with its
interval, position 1 moving with k, two runs compared position by position, and the drafter's kind in the cost
model and the advice."""
import numpy as np
import pytest
from scipy.stats import binom

from specviz.engines import CostModel, EngineRun, advise, diagnose
from specviz.engines.compare_runs import compare_runs, comparison_text, step_histogram
from specviz.engines.cost import drafter_kind
from specviz.engines.fit import difference_interval, positions, ratio_interval, upper_bound, wilson
from specviz.views.engine_plots import comparison_chart


def run_of(per_pos, steps, k=None, **more) -> EngineRun:
    """A vLLM-style run: every step drafts k tokens, accepted at position i in per_pos[i] steps."""
    k = k or len(per_pos)
    return EngineRun(source="vLLM log", drafted=more.pop("drafted", steps * k), accepted=sum(per_pos), steps=steps,
                     k=k, accepted_per_pos=tuple(per_pos), **more)


def found(findings, code, severity=None):
    hits = [f for f in findings if f.code == code and severity in (None, f.severity)]
    assert len(hits) <= 1, hits
    return hits[0] if hits else None


# -- the intervals, against published values --------------------------------------------------------------------
def test_intervals_match_published_examples():
    # Newcombe (1998), Stat Med 17:857 and 17:873: Wilson for 81/263 is 0.2553 to 0.3662; the hybrid score
    # interval for 56/70 - 48/80 is 0.0524 to 0.3339
    assert wilson(81, 263) == pytest.approx((0.2553, 0.3662), abs=5e-5)
    d, low, high = difference_interval(48, 80, 56, 70)
    assert (d, low, high) == pytest.approx((0.2, 0.0524, 0.3339), abs=5e-5)
    # Clopper-Pearson's bound is the rate at which seeing at most x has chance 1 - confidence
    bound = upper_bound(5, 1000, 0.99)
    assert binom.cdf(5, 1000, bound) == pytest.approx(0.01, rel=1e-6)
    assert upper_bound(0, 60, 0.99) == pytest.approx(1 - 0.01 ** (1 / 60))  # 0.0739


@pytest.mark.slow
def test_ratio_interval_covers_at_its_level():
    """Seeded: 400 pairs of binomials at a known ratio; a 95% interval must cover it 92 to 98% of the time (a
    binomial(400, 0.95) count falls outside 368..392 with chance under 0.3%)."""
    rng = np.random.default_rng(7)
    for p1, p2, n in ((0.02, 0.3, 300), (0.45, 0.6, 500)):
        xs, ys = rng.binomial(n, p1, 400), rng.binomial(n, p2, 400)
        covered = sum(low <= p1 / p2 <= high for low, high in
                      (ratio_interval(x, n, y, n)[1:] for x, y in zip(xs, ys)))
        assert 368 <= covered <= 392, (p1, p2, covered)
    # at 10 of 1000 over 290 of 1000: 0.0345 (0.0187 to 0.0638), worked from each rate's Wilson interval
    assert ratio_interval(10, 1000, 290, 1000) == pytest.approx((0.03448, 0.01865, 0.06376), abs=5e-5)


# -- nothing accepted -------------------------------------------------------------------------------------------
def test_nothing_accepted_with_enough_steps_is_a_problem_with_its_checklist():
    run = run_of((0, 0, 0, 0, 0), steps=60)
    hit = found(diagnose(run), "nothing_accepted")
    assert hit.severity == "problem"
    assert hit.numbers["upper_bound"] == pytest.approx(0.07388, abs=1e-5)  # 1 - 0.01^(1/60)
    for cause in ("another target or tokenizer", "vocabulary map", "wrong layers", "exact-match rule at T > 0",
                  "quantized target"):
        assert cause in hit.text
    assert "0 of 60 steps accepted their first draft" in hit.text and "mean acceptance length exactly 1" in hit.text


@pytest.mark.parametrize("steps, severity", [(44, "problem"), (43, "info"), (40, "info")])
def test_how_many_steps_are_enough(steps, severity):
    """None accepted in n steps: under 10% at 99% needs 1 - 0.01^(1/n) < 0.1, n >= 44 (0.0994; 43 gives 0.1016)."""
    hit = found(diagnose(run_of((0, 0, 0), steps=steps)), "nothing_accepted")
    assert hit.severity == severity
    if severity == "info":
        assert "too few to tell" in hit.text and hit.numbers["needed"] == 44


def test_near_zero_counts_and_healthy_ones():
    hit = found(diagnose(run_of((5, 1, 0), steps=1000)), "nothing_accepted")
    assert hit.severity == "problem" and hit.numbers["rate"] == 0.005
    assert found(diagnose(run_of((300, 90, 27), steps=1000)), "nothing_accepted") is None
    # without per-position counts: steps bound the first drafts; without steps, per draft (1 - 0.01^(1/200))
    only_steps = EngineRun(source="vLLM log", drafted=None, accepted=0, steps=100)
    assert found(diagnose(only_steps), "nothing_accepted").severity == "problem"
    only_drafts = found(diagnose(EngineRun(source="llama.cpp server response", drafted=200, accepted=0)),
                        "nothing_accepted")
    assert only_drafts.numbers["upper_bound"] == pytest.approx(0.02276, abs=1e-5)
    assert "0 of 200 drafts accepted" in only_drafts.text


# -- all or nothing ---------------------------------------------------------------------------------------------
def test_all_or_nothing_is_broken_logits_not_easy_text():
    """0.85 of steps accept position 1, 2 and 3 alike, so once the first passes the 1,700 later
    checks all pass (conditional 0.85, 1, 1)."""
    findings = diagnose(run_of((850, 850, 850), steps=1000))
    hit = found(findings, "all_or_nothing")
    assert hit.severity == "problem" and hit.numbers["checks"] == 1700 and not hit.numbers["every_step_all"]
    assert hit.numbers["chance"] == pytest.approx(0.98 ** 1700)
    assert "either nothing or all 3 drafts" in hit.text and "broken logits" in hit.text
    iid = found(findings, "iid_fit")
    assert "all-or-nothing" in iid.text and "not easy text" in iid.text
    assert not any("easy text stays easy" in f.text for f in findings)


@pytest.mark.parametrize("accepted, raised", [(228, True), (227, False)])
def test_all_or_nothing_needs_228_later_checks(accepted, raised):
    """0.98^228 = 0.00999 < 1% <= 0.98^227 = 0.0102."""
    findings = diagnose(run_of((accepted, accepted), steps=1000))
    assert (found(findings, "all_or_nothing") is not None) == raised
    if not raised:
        assert "too few to tell all-or-nothing acceptance" in found(findings, "iid_fit").text


def test_mean_length_stuck_at_k_plus_one():
    hit = found(diagnose(run_of((200, 200, 200), steps=200)), "all_or_nothing")
    assert hit.numbers["every_step_all"] and hit.numbers["checks"] == 600
    assert "mean acceptance length exactly k + 1 = 4 over 200 steps" in hit.text
    totals = EngineRun(source="vLLM log", drafted=600, accepted=600, steps=200, k=3)  # no per-position counts
    assert found(diagnose(totals), "all_or_nothing").numbers["checks"] == 600


def test_a_gentle_rise_is_said_with_its_numbers():
    findings = diagnose(run_of((700, 560, 476), steps=1000))  # conditional 0.7, 0.8, 0.85
    assert found(findings, "all_or_nothing") is None
    iid = found(findings, "iid_fit")
    assert iid.severity == "warning" and "from 0.700 at position 1 to 0.850 at position 3" in iid.text


# -- short drafts -----------------------------------------------------------------------------------------------
def test_short_drafts_named_with_their_numbers():
    run = EngineRun(source="llama-speculative summary", drafted=132, accepted=47, steps=82, k=8, requests=1)
    hit = found(diagnose(run), "short_drafts")
    assert hit.severity == "warning" and hit.numbers["drafts_per_step"] == pytest.approx(132 / 82)
    assert "1.61 a step with k = 8 (20% of the 656" in hit.text
    assert "cannot explain the 524 missing" in hit.text and "--draft-p-min" in hit.text  # 1 x 7 = 7 < 524
    budget = EngineRun(source="vLLM log", drafted=3000, accepted=1000, steps=1000, k=8, requests=1000)
    assert "so it can explain the 5000 missing" in found(diagnose(budget), "short_drafts").text  # 1000 x 7 >= 5000
    assert found(diagnose(run, drafter="ngram"), "short_drafts").severity == "info"


def test_half_of_k_is_not_short():
    assert found(diagnose(EngineRun(source="vLLM log", drafted=2000, accepted=900, steps=1000, k=4)),
                 "short_drafts") is None
    assert found(diagnose(EngineRun(source="vLLM log", drafted=1999, accepted=900, steps=1000, k=4)),
                 "short_drafts") is not None


# -- the temperature collapse as a ratio ------------------------------------------------------------------------
def test_collapse_judged_by_the_ratio_whatever_the_greedy_rate():
    """Greedy acceptance 0.29 (an absolute bar of 0.3 on it would miss this), sampled 0.01: 0.0345 times the greedy rate,
    0.0187 to 0.0638, wholly under 0.5."""
    greedy = EngineRun(source="t", drafted=1000, accepted=290, temperature=0.0)
    sampled = EngineRun(source="t", drafted=1000, accepted=10, temperature=0.7)
    hit = found(diagnose([greedy, sampled]), "temperature_collapse")
    assert hit.numbers["ratio"] == pytest.approx(0.03448, abs=5e-5)
    assert (hit.numbers["ratio_low"], hit.numbers["ratio_high"]) == pytest.approx((0.01865, 0.06376), abs=5e-5)
    assert "0.03 times the greedy rate (95% interval 0.02 to 0.06, under 0.5)" in hit.text


@pytest.mark.parametrize("g, s, n", [(290, 200, 1000),  # 0.69 (0.59 to 0.81): a gentle fall
                                     (60, 24, 100)])  # 0.40 (0.27 to 0.58): low, but too few drafts to say
def test_no_collapse_when_the_interval_reaches_one_half(g, s, n):
    runs = [EngineRun(source="t", drafted=n, accepted=g, temperature=0.0),
            EngineRun(source="t", drafted=n, accepted=s, temperature=1.0)]
    assert found(diagnose(runs), "temperature_collapse") is None


# -- position 1 across k ----------------------------------------------------------------------------------------
K8 = (610, 430, 300, 210, 150, 100, 70, 50)


def test_position0_moving_with_k():
    """0.740 at k = 3 against 0.610 at k = 8: -0.130, Newcombe's 95% interval -0.170 to -0.089."""
    runs = [run_of((740, 520, 360), steps=1000), run_of(K8, steps=1000)]
    hit = found(diagnose(runs), "position0_moves_with_k")
    assert hit.severity == "warning" and hit.numbers["k"] == [3, 8]
    assert (hit.numbers["change"], hit.numbers["low"], hit.numbers["high"]) == pytest.approx((-0.13, -0.1703, -0.0891),
                                                                                            abs=5e-5)
    assert "74.0% of the time at k = 3" in hit.text and "down 0.130" in hit.text


@pytest.mark.parametrize("first, steps", [(720, 1000),  # -0.020 (-0.059 to +0.019): within its interval
                                          (72000, 100000)])  # -0.020 (-0.024 to -0.016): beyond it, but < 0.05
def test_position0_within_its_interval_or_the_step_boundaries(first, steps):
    runs = [run_of((740 * steps // 1000, 500 * steps // 1000), steps=steps), run_of((first, 500 * steps // 1000,
                                                                                    300 * steps // 1000), steps=steps)]
    assert found(diagnose(runs), "position0_moves_with_k") is None


def test_position0_compares_only_the_same_pair():
    runs = [run_of((740, 520, 360), steps=1000, model="a"), run_of(K8, steps=1000, model="b")]
    assert found(diagnose(runs), "position0_moves_with_k") is None


# -- two runs compared ------------------------------------------------------------------------------------------
BEFORE, AFTER = run_of((700, 490, 343), steps=1000), run_of((700, 420, 210), steps=1000)  # conditional .7 .7 .7 / .7 .6 .5


def test_which_positions_moved():
    """Each interval at 1 - 0.05/3: position 1 0 (-0.049 to +0.049), position 2 -0.100 (-0.160 to -0.039), position 3
    -0.200 (-0.275 to -0.122). Mean length 2.533 to 2.330: per-step variances 1.5349 and 1.2411 over 1000 steps, so
    -0.203 +- 1.96 x 0.05269 = -0.306 to -0.100."""
    c = compare_runs(BEFORE, AFTER, ("before", "after"))
    frame = c.positions
    assert c.level == pytest.approx(1 - 0.05 / 3)
    assert frame.moved.tolist() == ["no", "down", "down"]
    assert frame.change_low.tolist() == pytest.approx([-0.04898, -0.15999, -0.27467], abs=5e-5)
    assert frame.change_high.tolist() == pytest.approx([0.04898, -0.03898, -0.12233], abs=5e-5)
    assert c.length == pytest.approx((2.533, 2.330, -0.203, -0.3063, -0.0997), abs=5e-4)
    text = comparison_text(c)
    assert "position 2 fell from 0.700 to 0.600" in text and "position 3 fell from 0.700 to 0.500" in text
    assert "position 1 did not move beyond its interval" in text and "mean acceptance length from 2.53 to 2.33" in text
    assert "it fell" in text
    backwards = comparison_text(compare_runs(AFTER, BEFORE))
    assert "position 3 rose from 0.500 to 0.700" in backwards  # the direction is read from the numbers


def test_comparison_across_k_and_its_refusal():
    c = compare_runs(BEFORE, run_of((700, 420, 210, 100, 40), steps=1000))
    assert c.only == (4, 5) and "positions 4 and 5: drafted by one run only" in comparison_text(c)
    assert step_histogram(positions(BEFORE)) == [300, 210, 147, 343]
    with pytest.raises(ValueError, match="run 2 has none"):
        compare_runs(BEFORE, EngineRun(source="t", drafted=100, accepted=50))


def test_two_runs_diagnosed_are_compared():
    hit = found(diagnose([BEFORE, AFTER]), "runs_compared")
    assert hit.severity == "info" and hit.numbers["down"] == [2, 3] and hit.numbers["up"] == []
    assert found(diagnose([BEFORE, BEFORE]), "runs_compared").numbers["down"] == []


@pytest.mark.slow
def test_comparison_chart():
    frame = compare_runs(BEFORE, AFTER).positions
    fig = comparison_chart(frame)
    rates, change = fig.data[:2], fig.data[2]
    assert [list(t.y) for t in rates] == [pytest.approx([0.7, 0.7, 0.7]), pytest.approx([0.7, 0.6, 0.5])]
    assert list(change.marker.symbol) == ["circle-open", "circle", "circle"]  # filled where it moved
    assert list(change.error_y.arrayminus) == pytest.approx(list(frame.change - frame.change_low))
    assert "No position" in comparison_chart(frame.iloc[0:0]).layout.title.text


# -- the drafter's kind -----------------------------------------------------------------------------------------
def test_cost_per_drafter_kind():
    cost = CostModel(c=0.1, verify=((1, 1.0), (9, 1.8)))  # v(5) = 1 + 0.8 x 4/8 = 1.4
    assert cost.step_cost(4) == cost.step_cost(4, "sequential") == pytest.approx(0.4 + 1.4)
    assert cost.step_cost(4, "block") == pytest.approx(0.1 + 1.4)  # one pass whatever k
    assert cost.step_cost(4, "ngram") == pytest.approx(1.4)
    assert cost.step_cost(0, "block") == 1.0
    assert drafter_kind("DFlash") == "block" and drafter_kind("lookup") == "ngram" and drafter_kind(None) == "sequential"
    with pytest.raises(ValueError, match="unknown drafter kind"):
        drafter_kind("tree")


ALPHA_08 = run_of((800, 640, 512), steps=1000)  # alpha = 0.8 exactly; the i.i.d. model fits (G = 0)


def test_advice_follows_the_drafter_kind():
    """c = 0.05, v = 1: at k = 3 E[tau] = (1 - 0.8^4) / 0.2 = 2.952, speedup 2.952 / 1.15 = 2.567 sequential but
    2.952 / 1.05 = 2.811 as a block; a block drafter's table stops at its block, k = 3, where it is best."""
    sequential = advise(ALPHA_08, CostModel(c=0.05), max_k=12)
    block = advise(ALPHA_08, CostModel(c=0.05), drafter="block")
    assert sequential.best_k == 8 and block.table.k.max() == 3 and block.best_k == 3
    # the table is rounded to what alpha's interval allows (one decimal here)
    assert sequential.table.loc[2, "speedup_iid"] == pytest.approx(2.567, abs=0.05)
    assert block.table.loc[2, "speedup_iid"] == pytest.approx(2.811, abs=0.05)
    assert any("the table stops at the run's k = 3" in n for n in block.notes)
    lookup = advise(ALPHA_08, CostModel(c=0.05), drafter="ngram")  # free drafts: the speedup rises to the edge
    assert lookup.best_k == 8 and any("the best k is the table's last, k = 8" in n for n in lookup.notes)


def test_advice_uses_the_measured_curve_when_the_doctor_rejects_iid():
    """Conditional 0.8, 0.5, 0.25: rejected. c = 0.2, v = 1: measured 1.8 / 1.2 = 1.500, 2.2 / 1.4 = 1.571,
    2.3 / 1.6 = 1.4375, so k = 2, whatever the i.i.d. fit says."""
    advice = advise(run_of((800, 400, 100), steps=1000), CostModel(c=0.2))
    assert advice.basis == "measured curve" and advice.best_k == 2 and advice.best_k_range == (2, 2)
    assert any("the i.i.d. model is rejected" in n for n in advice.notes)
    edge = advise(run_of((300, 270, 250), steps=1000), CostModel(c=0.05))  # measured best at the run's own k
    assert edge.basis == "measured curve" and edge.best_k == 3
    assert any("no advice beyond k = 3" in n for n in edge.notes)


@pytest.mark.parametrize("run, words", [(run_of((0, 0, 0), steps=300), "nothing accepted"),
                                        (run_of((850, 850, 850), steps=1000), "all or nothing")])
def test_no_advice_on_a_wiring_fault(run, words):
    with pytest.raises(ValueError, match=f"no advice on k: {words}"):
        advise(run, CostModel(c=0.05))
