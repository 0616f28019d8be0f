"""specviz.slim's law check: the pairs of tokens many seeded runs emit against the law enumerated from the target
alone (tests/slim/test_slim_decoder.py, tests/slim/test_slim_block.py)."""
import numpy as np
import torch

from specviz import DecodeConfig
from specviz import sampling as T
from specviz.slim import Lookup, speculative
from tests.helpers.numpy_lm import ToyForward

LAW_PROMPT, LAW_SHARPEN = [2, 0, 2], 1.5  # lookup drafts 0, which the target gives p = 0.46 there


def exact_law(prompt, n, temperature, top_k):
    """P(first n tokens) of the toy at these settings, enumerated through specviz.sampling's torch transforms."""
    fwd, out = ToyForward(sharpen=LAW_SHARPEN), {(): 1.0}
    for _ in range(n):
        nxt = {}
        for seq, prob in out.items():
            ids = list(prompt) + list(seq)
            p = T.logits_to_probs(torch.from_numpy(fwd.logits_at(ids, len(ids) - 1)), temperature, top_k).numpy()
            nxt.update({seq + (v,): prob * float(p[v]) for v in np.flatnonzero(p)})
        out = nxt
    return out


def law_statistic(temperature, top_k, runs=6000, draft=None, k=1, **extra):
    """(chi-square of the emitted pairs' frequencies against the law enumerated from the target alone, its 99.99th
    percentile): two tokens after a prompt, over ``runs`` seeds, drafted by ``draft()`` (default: prompt lookup,
    which drafts one token there)."""
    from scipy.stats import chi2 as dist

    prompt, cfg = LAW_PROMPT, dict(temperature=temperature, top_k=top_k, max_new_tokens=2, k=k, **extra)
    seen: dict = {}
    for seed in range(runs):
        pair = tuple(speculative(ToyForward(sharpen=LAW_SHARPEN), (draft or Lookup)(), prompt,
                                 DecodeConfig(seed=seed, **cfg)).new_tokens)
        seen[pair] = seen.get(pair, 0) + 1
    law = exact_law(prompt, 2, temperature, top_k)
    assert set(seen) <= set(law)
    big = [s for s in law if law[s] * runs >= 5]  # cells too rare for the statistic are pooled
    expected = [law[s] * runs for s in big] + [runs * (1 - sum(law[s] for s in big))]
    observed = [seen.get(s, 0) for s in big] + [runs - sum(seen.get(s, 0) for s in big)]
    return sum((o - e) ** 2 / e for o, e in zip(observed, expected) if e > 0), dist.ppf(0.9999, len(big))
