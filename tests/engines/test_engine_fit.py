"""alpha under Leviathan's i.i.d. model: the closed form by hand, recovery from counts drawn with a known alpha
(within the interval, and the interval covering it about as often as it says), and the model's own test."""
import numpy as np
import pytest
from scipy.stats import chi2

from specviz.engines import EngineRun, fit_alpha, positions
from specviz.engines.fit import decimals_for, fit_moments, loglik, moment_alpha, profile_interval


def drawn_run(alpha, k, steps, seed, rates=None):
    """A run of ``steps`` steps of k drafts; each position accepted with alpha (or rates[i]) once reached."""
    rng = np.random.default_rng(seed)
    accepted = np.zeros(steps, dtype=int)
    for i in range(k):
        p = alpha if rates is None else rates[i]
        accepted += (accepted == i) & (rng.random(steps) < p)
    per_pos = tuple(int((accepted > i).sum()) for i in range(k))
    return EngineRun(source="drawn", drafted=steps * k, accepted=int(accepted.sum()), steps=steps, k=k,
                     accepted_per_pos=per_pos)


def test_mle_is_accepted_over_reached_by_hand():
    run = EngineRun(source="t", drafted=12, accepted=6, steps=4, k=3, accepted_per_pos=(3, 2, 1))
    pos = positions(run)
    assert pos.reached == (4, 3, 2) and pos.conditional == (0.75, 2 / 3, 0.5)
    fit = fit_alpha(run)
    assert fit.alpha == pytest.approx(6 / 9)  # (3 + 2 + 1) / (4 + 3 + 2)
    # the interval's ends lie where the log-likelihood has dropped by half the chi-square 90% quantile
    drop = chi2.ppf(0.9, 1) / 2
    for end in (fit.low, fit.high):
        assert loglik(6 / 9, 6, 3) - loglik(end, 6, 3) == pytest.approx(drop, abs=1e-6)
    assert fit.low < 6 / 9 < fit.high


def test_histogram_gives_the_same_positions():
    run = EngineRun(source="t", drafted=60, accepted=30, steps=20, k=3, histogram=(8, 0, 6, 6))
    pos = positions(run)
    assert pos.accepted == (12, 12, 6) and pos.reached == (20, 12, 12)


def test_alpha_recovered_within_its_interval():
    fit = fit_alpha(drawn_run(0.7, 5, 2000, seed=1))
    assert fit.low < 0.7 < fit.high
    assert fit.high - fit.low < 0.04  # 2000 steps pin alpha down to a few hundredths
    assert fit.p_value > 0.01  # drawn i.i.d.: the model's own test has no quarrel with it


@pytest.mark.slow
def test_interval_covers_the_true_alpha_about_90_percent_of_the_time():
    covered = [fit.low <= 0.6 <= fit.high for fit in (fit_alpha(drawn_run(0.6, 4, 300, seed)) for seed in range(400))]
    # 400 draws at 0.9: standard error 0.015, so 0.85..0.95 is over three of them either side
    assert 0.85 <= np.mean(covered) <= 0.95


def test_iid_test_rejects_rates_that_change_with_position():
    fit = fit_alpha(drawn_run(None, 4, 3000, seed=2, rates=(0.9, 0.5, 0.9, 0.5)))
    assert fit.p_value < 1e-6 and fit.df == 3


def test_edges_of_the_interval():
    assert profile_interval(0, 50) == (0.0, pytest.approx(1 - np.exp(-chi2.ppf(0.9, 1) / 2 / 50)))
    low, high = profile_interval(50, 0)
    assert high == 1.0 and low == pytest.approx(np.exp(-chi2.ppf(0.9, 1) / 2 / 50))


def test_moments_without_per_position_counts():
    assert moment_alpha(0.5 + 0.25, 2) == pytest.approx(0.5)  # alpha + alpha^2 = 0.75 at alpha = 0.5
    assert moment_alpha(0, 3) == 0.0 and moment_alpha(3, 3) == 1.0
    run = drawn_run(0.6, 4, 1500, seed=3)
    fit = fit_moments(run.accepted, run.steps, run.k)
    assert fit.low < 0.6 < fit.high and "moments" in fit.method
    only_totals = EngineRun(source="t", drafted=run.drafted, accepted=run.accepted, steps=run.steps, k=run.k)
    assert fit_alpha(only_totals).method == fit.method
    assert fit_alpha(EngineRun(source="t", drafted=10, accepted=5)) is None  # no steps: nothing to fit


@pytest.mark.parametrize("width, decimals", [(0.13, 2), (0.02, 2), (0.0099, 3), (0.9, 1), (3.0, 0), (0.0, 4)])
def test_decimals_follow_the_interval(width, decimals):
    assert decimals_for(width) == decimals
