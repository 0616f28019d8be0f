"""alpha from an engine's counts under Leviathan's i.i.d. model, with an interval and a test of the model.

The model: each draft is accepted with probability alpha, independently, until the first rejection, so a step
of k drafts accepts j of them with probability alpha^j (1 - alpha) (j < k) or alpha^k (j = k): a truncated
geometric. Position i is *reached* by the steps that accepted every draft before it (all steps, for i = 0) and
accepted by accepted_at_i of them, so the likelihood is binomial position by position:
  l(alpha) = sum_i  a_i log(alpha) + (r_i - a_i) log(1 - alpha),    r_0 = steps, r_i = a_{i-1}
and the maximum-likelihood estimate is closed-form: alpha = sum a_i / sum r_i. The interval is the profile-
likelihood one (2 [l(alpha_hat) - l(alpha)] <= the chi-square quantile, one degree of freedom). The model's own
test: one alpha for every position against a rate per position (a likelihood-ratio G-test). Without per-position
counts, steps and k alone give a moment estimate (sum_{i=1..k} alpha^i = accepted / steps) with a parametric
bootstrap interval.

Binomial intervals for the doctor's findings: Wilson's score interval for a rate, the exact (Clopper-Pearson)
one-sided bounds, Newcombe's hybrid score interval for the difference of two independent rates and the MOVER-R
interval (Donner and Zou 2012) for their ratio, both built from the Wilson intervals of each rate.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import brentq
from scipy.special import xlogy
from scipy.stats import beta, chi2, norm

from .run import EngineRun

LEVEL = 0.90
IID_P, IID_EFFECT = 0.01, 0.05  # the i.i.d. model is called off when rejected at this level by this much


@dataclass(frozen=True)
class Positions:
    reached: tuple[int, ...]  # [i]: steps that reached position i (accepted every draft before it)
    accepted: tuple[int, ...]  # [i]: steps that accepted position i
    steps: int

    @property
    def conditional(self) -> tuple[float | None, ...]:  # P(accept i | reached i) = a_i / a_{i-1}
        return tuple(a / r if r else None for a, r in zip(self.accepted, self.reached))

    @property
    def marginal(self) -> tuple[float, ...]:  # P(accept i) per step = a_i / steps
        return tuple(a / self.steps for a in self.accepted)


@dataclass(frozen=True)
class AlphaFit:
    alpha: float
    low: float
    high: float
    method: str
    level: float = LEVEL
    g: float | None = None  # the i.i.d. model's likelihood-ratio statistic (per-position fits only)
    df: int | None = None
    p_value: float | None = None


def positions(run: EngineRun) -> Positions | None:
    """Reached and accepted counts per position, from per-position counts (and steps) or the histogram."""
    if run.accepted_per_pos is not None and run.steps:
        a = run.accepted_per_pos
        return Positions(reached=(run.steps,) + a[:-1], accepted=a, steps=run.steps)
    if run.histogram is not None and sum(run.histogram):
        h, n = run.histogram, sum(run.histogram)
        a = tuple(sum(h[j] for j in range(i + 1, len(h))) for i in range(len(h) - 1))
        return Positions(reached=(n,) + a[:-1], accepted=a, steps=n) if a else None
    return None


def fit_alpha(run: EngineRun, level: float = LEVEL) -> AlphaFit | None:
    """The i.i.d. fit of a run: per-position maximum likelihood where the counts allow, else moments."""
    pos = positions(run)
    if pos is not None and sum(pos.reached):
        return fit_positions(pos, level)
    if run.steps and run.k:
        return fit_moments(run.accepted, run.steps, run.k, level)
    return None


def fit_positions(pos: Positions, level: float = LEVEL) -> AlphaFit:
    successes, trials = sum(pos.accepted), sum(pos.reached)
    failures = trials - successes
    alpha = successes / trials
    low, high = profile_interval(successes, failures, level)
    g, df, p = iid_test(pos, alpha)
    return AlphaFit(alpha, low, high, "maximum likelihood over per-position counts", level, g, df, p)


def loglik(alpha: float, successes: float, failures: float) -> float:
    return float(xlogy(successes, alpha) + xlogy(failures, 1.0 - alpha))


def profile_interval(successes: int, failures: int, level: float = LEVEL) -> tuple[float, float]:
    """{alpha : 2 [l(alpha_hat) - l(alpha)] <= chi2_1(level)}: the binomial likelihood's interval."""
    q = chi2.ppf(level, 1) / 2
    alpha = successes / (successes + failures)
    top = loglik(alpha, successes, failures)

    def drop(a: float) -> float:
        return top - loglik(a, successes, failures) - q

    low = 0.0 if successes == 0 else brentq(drop, 1e-300, alpha) if alpha > 0 else 0.0
    high = 1.0 if failures == 0 else brentq(drop, alpha, 1 - 1e-16)
    return low, high


def iid_test(pos: Positions, alpha: float) -> tuple[float | None, int | None, float | None]:
    """G = 2 sum_i [l_i(c_i) - l_i(alpha)] over reached positions, c_i their own rates; df = positions - 1."""
    used = [(a, r) for a, r in zip(pos.accepted, pos.reached) if r]
    if len(used) < 2:
        return None, None, None
    g = 2 * sum(loglik(a / r, a, r - a) - loglik(alpha, a, r - a) for a, r in used)
    g = max(g, 0.0)
    df = len(used) - 1
    return g, df, float(chi2.sf(g, df))


def iid_rejected(fit: AlphaFit, pos: Positions) -> bool:
    """The i.i.d. model rejected (G-test p below IID_P) and off by a margin that matters: some position's
    conditional rate IID_EFFECT or more from alpha. The doctor's verdict, and the advice's reason to use the
    measured curve instead."""
    if fit.p_value is None or fit.p_value >= IID_P:
        return False
    return max(abs(c - fit.alpha) for c in pos.conditional if c is not None) >= IID_EFFECT


def fit_moments(accepted: int, steps: int, k: int, level: float = LEVEL, draws: int = 400) -> AlphaFit:
    """sum_{i=1..k} alpha^i = accepted / steps, with a parametric bootstrap interval (steps of k drafts drawn
    from the fitted truncated geometric, refitted)."""
    alpha = moment_alpha(accepted / steps, k)
    rng = np.random.default_rng(0)  # the interval is a property of the counts: the same every time
    probs = truncated_geometric(alpha, k)
    refits = [moment_alpha(float(np.dot(np.arange(k + 1), rng.multinomial(steps, probs))) / steps, k)
              for _ in range(draws)]
    tail = (1 - level) / 2
    return AlphaFit(alpha, float(np.quantile(refits, tail)), float(np.quantile(refits, 1 - tail)),
                    "moments (mean accepted drafts per step), no per-position counts", level)


def moment_alpha(mean_accepted: float, k: int) -> float:
    if mean_accepted <= 0:
        return 0.0
    if mean_accepted >= k:
        return 1.0
    return brentq(lambda a: sum(a ** i for i in range(1, k + 1)) - mean_accepted, 0.0, 1.0)


def truncated_geometric(alpha: float, k: int) -> np.ndarray:
    """P(a step of k drafts accepts exactly j), j = 0..k, under the i.i.d. model."""
    p = np.array([alpha ** j * (1 - alpha) for j in range(k)] + [alpha ** k])
    return p / p.sum()


def decimals_for(width: float) -> int:
    """Decimals worth showing for a value known to within an interval ``width`` wide: down to the first
    significant digit of its half-width, no further."""
    if width <= 0:
        return 4
    return max(0, min(4, int(np.ceil(-np.log10(width / 2)))))


# -- binomial intervals ---------------------------------------------------------------------------------------
def wilson(successes: int, trials: int, level: float = 0.95) -> tuple[float, float]:
    """Wilson's score interval for successes / trials (two-sided, ``level``): it stays inside [0, 1] and keeps
    its coverage at 0 or all successes, where the plain p +- z se collapses to a point."""
    if trials <= 0:
        raise ValueError(f"a rate needs at least one trial, got {trials}")
    z = float(norm.ppf(0.5 + level / 2))
    p = successes / trials
    centre = (p + z * z / (2 * trials)) / (1 + z * z / trials)
    half = z / (1 + z * z / trials) * float(np.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)))
    return max(0.0, centre - half), min(1.0, centre + half)


def upper_bound(successes: int, trials: int, confidence: float) -> float:
    """The exact one-sided upper bound (Clopper-Pearson): the largest rate under which seeing at most
    ``successes`` in ``trials`` still has chance 1 - confidence. With none: 1 - (1 - confidence)^(1/trials)."""
    return 1.0 if successes >= trials else float(beta.ppf(confidence, successes + 1, trials - successes))


def difference_interval(x1: int, n1: int, x2: int, n2: int, level: float = 0.95) -> tuple[float, float, float]:
    """(p2 - p1, low, high): Newcombe's hybrid score interval for the change from rate 1 to rate 2."""
    p1, p2 = x1 / n1, x2 / n2
    (l1, u1), (l2, u2) = wilson(x1, n1, level), wilson(x2, n2, level)
    d = p2 - p1
    return d, d - float(np.hypot(p2 - l2, u1 - p1)), d + float(np.hypot(u2 - p2, p1 - l1))


def ratio_interval(x1: int, n1: int, x2: int, n2: int, level: float = 0.95) -> tuple[float, float, float]:
    """(p1 / p2, low, high): the MOVER-R interval of a ratio of two independent rates (p2 > 0), from each rate's
    Wilson interval; it holds at p1 = 0, where the log-ratio's delta-method interval does not exist."""
    if x2 <= 0:
        raise ValueError("a ratio of rates needs a denominator rate above 0")
    p1, p2 = x1 / n1, x2 / n2
    (l1, u1), (l2, u2) = wilson(x1, n1, level), wilson(x2, n2, level)
    low = (p1 * p2 - np.sqrt(max((p1 * p2) ** 2 - l1 * u2 * (2 * p1 - l1) * (2 * p2 - u2), 0.0))) / (u2 * (2 * p2 - u2))
    high = (p1 * p2 + np.sqrt(max((p1 * p2) ** 2 - u1 * l2 * (2 * p1 - u1) * (2 * p2 - l2), 0.0))) / (l2 * (2 * p2 - l2))
    return p1 / p2, max(0.0, float(low)), float(high)
