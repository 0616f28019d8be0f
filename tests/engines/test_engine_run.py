"""EngineRun: what it refuses, and every rate derived from counts worked out by hand."""
import pytest

from specviz.engines import EngineRun, rates, total
from specviz.engines.rounding import recover_steps


def run(**kw):
    base = dict(source="test", drafted=10, accepted=6, steps=4, k=3, accepted_per_pos=(3, 2, 1), emitted=10)
    return EngineRun(**(base | kw))


def test_rates_from_counts_by_hand():
    got = {r.name: r.value for r in rates(run())}
    assert got["acceptance rate"] == pytest.approx(0.6)  # 6 / 10
    assert got["mean acceptance length"] == pytest.approx(2.5)  # 1 + 6 / 4
    assert got["drafts per step"] == pytest.approx(2.5)  # 10 / 4
    assert got["tokens per step"] == pytest.approx(2.5)  # 10 / 4
    assert [got[f"marginal rate at position {i}"] for i in (1, 2, 3)] == pytest.approx([0.75, 0.5, 0.25])
    assert [got[f"conditional rate at position {i}"] for i in (1, 2, 3)] == pytest.approx([3 / 4, 2 / 3, 1 / 2])
    definitions = {r.name: r.definition for r in rates(run())}
    assert definitions["acceptance rate"] == "accepted / drafted = 6 / 10"
    assert "accepted_at_2 / accepted_at_1 = 2 / 3" in definitions["conditional rate at position 2"]


def test_rates_leave_out_what_the_counts_do_not_define():
    names = {r.name for r in rates(EngineRun(source="t", drafted=17, accepted=10))}
    assert names == {"acceptance rate"}


@pytest.mark.parametrize("change, words", [
    ({"accepted": -1, "accepted_per_pos": None}, "at least 0"),
    ({"accepted": 11, "accepted_per_pos": None, "k": None}, "exceeds drafted"),
    ({"accepted_per_pos": (2, 3, 1)}, "cannot rise"),
    ({"accepted_per_pos": (3, 2, 0)}, "sum to 5"),
    ({"accepted_per_pos": (3, 2, 1, 0)}, "for k = 3"),
    ({"drafted": 13, "accepted_per_pos": None}, "at most k drafts"),
    ({"histogram": (1, 1, 1)}, "counts 3 steps"),
    ({"histogram": (1, 0, 2, 1)}, "accounts for 7"),  # 4 steps, but 0 + 2 x 2 + 3 = 7 accepted, not 6
    ({"drafted": 10**16, "accepted_per_pos": None}, "absurd"),
    ({"steps": 2.5}, "whole number"),
    ({"temperature": -0.5}, ">= 0"),
    ({"steps": 0, "accepted_per_pos": None}, "no verify steps"),
])
def test_impossible_counts_are_refused_in_plain_words(change, words):
    with pytest.raises(ValueError, match=words):
        run(**change)


def test_a_histogram_that_fits_is_kept():
    assert run(histogram=(1, 1, 1, 1)).histogram == (1, 1, 1, 1)  # 4 steps accepting 0, 1, 2, 3: 6 accepted


def test_total_adds_counts_and_keeps_the_parts_as_series():
    a, b = run(), run(drafted=12, accepted=9, steps=4, accepted_per_pos=(4, 3, 2), emitted=13)
    t = total([a, b])
    assert (t.drafted, t.accepted, t.steps, t.emitted, t.k) == (22, 15, 8, 23, 3)
    assert t.accepted_per_pos == (7, 5, 3)
    assert t.series == (a, b)
    missing = total([a, run(emitted=None)])
    assert missing.emitted is None  # a count one part lacks is unknown in the total, not a partial sum


def test_total_with_different_k_drops_the_per_position_counts():
    t = total([run(), run(k=4, accepted_per_pos=(3, 2, 1, 0))])
    assert t.k is None and t.accepted_per_pos is None and any("k differs" in n for n in t.notes)


def test_steps_recovered_from_a_rounded_mean_and_rates():
    # 41 accepted, mean printed 3.05: 41 / n in [2.045, 2.055] -> n = 20; rates x 20 = 16, 12, 8, 5 (sum 41)
    got = recover_steps(41, 3.05, 2, (0.800, 0.600, 0.400, 0.250), drafted=76)
    assert (got.steps, got.accepted_per_pos) == (20, (16, 12, 8, 5))
    assert "the one whole number" in got.note
    # drafted / k = 1200 / 4 = 300 fits mean 1 + 450 / 300 = 2.50: taken, though 299..301 fit the mean too
    exact = recover_steps(450, 2.50, 2, (0.500, 0.400, 0.350, 0.250), drafted=1200)
    assert (exact.steps, exact.accepted_per_pos) == (300, (150, 120, 105, 75))
    assert "drafted / k" in exact.note


def test_steps_recovery_says_when_it_is_ambiguous():
    # no rates, no drafts: 450 / n in [1.495, 1.505] -> n in [299.003, 301.003], so 300 or 301 (450 / 299 = 1.51)
    got = recover_steps(450, 2.50, 2)
    assert got.steps == 300 and "one of 2 values in [300, 301]" in got.note  # 300: nearest 450 / 1.50


def test_a_run_built_by_position_as_before_has_no_load():
    """The load field comes last, so every constructor call written before it keeps its meaning."""
    run = EngineRun("vLLM log", 10, 6, 4, 3)
    assert (run.drafted, run.accepted, run.steps, run.k, run.load) == (10, 6, 4, 3, None)
