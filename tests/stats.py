"""A chi-square goodness-of-fit test for the losslessness tests."""
import numpy as np
from scipy.stats import chisquare


def chi2_pvalue(counts, probs, min_expected=5.0):
    """p-value of counts ~ Multinomial(n, probs); cells expected < min_expected are pooled into one."""
    counts, probs = np.asarray(counts, float).ravel(), np.asarray(probs, float).ravel()
    assert counts.sum() > 0 and abs(probs.sum() - 1) < 1e-6, probs.sum()
    expected = probs * counts.sum()
    big = expected >= min_expected
    obs = np.append(counts[big], counts[~big].sum())
    exp = np.append(expected[big], expected[~big].sum())
    if exp[-1] == 0:
        assert obs[-1] == 0, "a token with probability 0 was emitted"
        obs, exp = obs[:-1], exp[:-1]
    return chisquare(obs, exp).pvalue
