"""For the losslessness tests: a chi-square goodness-of-fit test, the exact law of the first two tokens, and the
first two tokens of many seeded runs drawn as one batched run (tree runs: tests/helpers/tree_seeds.py)."""
import numpy as np
import torch
from scipy.stats import chisquare

from specviz import DecodeConfig, speculative_generate, speculative_generate_batch
from specviz.sampling import logits_to_probs

PINNED = 12  # seeded rows of a batched law run checked against their own single-prompt run


def chi2_pvalue(counts, probs, min_expected=5.0):
    """p-value of counts ~ Multinomial(n, probs); cells expected < min_expected are pooled into one."""
    counts, probs = np.asarray(counts, float).ravel(), np.asarray(probs, float).ravel()
    assert counts.sum() > 0 and abs(probs.sum() - 1) < 1e-6, probs.sum()
    expected = probs / probs.sum() * counts.sum()  # float32 sums are off by up to 1e-6; chisquare wants 1.5e-8
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


def decided(trace):
    """What a trace decided, round by round (timings differ run to run)."""
    return [(r.k, r.drafted, r.n_accepted, r.emitted, r.resampled, r.bonus, r.u) for r in trace.rounds]


def seeded_runs(target, drafter, prompts, cfg, runs):
    """The traces of seeds 0..runs-1, prompt ``prompts[seed % len(prompts)]`` (a tensor: that one prompt), drawn
    as ONE batched run: row b draws exactly what ``speculative_generate`` with seed b draws (``specviz.batch``),
    so the law tests keep their draws and their power; the first rows are checked against their single runs."""
    prompts = [prompts] if isinstance(prompts, torch.Tensor) else list(prompts)
    rows = [prompts[b % len(prompts)] for b in range(runs)]
    traces = speculative_generate_batch(target, drafter, rows, DecodeConfig(**{**cfg.to_dict(), "seed": 0}))
    for seed in range(min(PINNED, runs)):
        single = speculative_generate(target, drafter, rows[seed], DecodeConfig(**{**cfg.to_dict(), "seed": seed}))
        assert decided(traces[seed]) == decided(single), f"row {seed} drew otherwise than its single run"
    return traces


def first_two_counts(traces, vocab_size: int) -> torch.Tensor:
    """(V, V) counts of the traces' first two tokens."""
    counts = torch.zeros(vocab_size, vocab_size)
    for trace in traces:
        t1, t2 = trace.new_tokens[:2]
        counts[t1, t2] += 1
    return counts
