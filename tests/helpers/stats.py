"""For the losslessness tests: a chi-square goodness-of-fit test and the exact law of the first two tokens."""
import numpy as np
import torch
from scipy.stats import chisquare

from specviz.sampling import logits_to_probs


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


def exact_first_two(target, prompt, cfg):
    """P(t1, t2) = p(t1 | prompt) p(t2 | prompt, t1), with the run's transforms, as a (V, V) table."""
    prompt = prompt.to(target.device)
    with torch.no_grad():
        p1 = logits_to_probs(target(prompt).logits[0, -1], cfg.temperature, cfg.top_k, cfg.top_p)
        V = p1.shape[-1]
        ext = torch.cat([prompt.repeat(V, 1), torch.arange(V, device=target.device)[:, None]], dim=1)
        p2 = logits_to_probs(target(ext).logits[:, -1], cfg.temperature, cfg.top_k, cfg.top_p)
    return (p1[:, None] * p2).cpu()
