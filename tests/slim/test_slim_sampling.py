"""specviz.slim's numpy math against specviz.sampling's torch functions, on the same inputs (and the same draws)."""
import numpy as np
import pytest
import torch

from specviz import sampling as T
from specviz.slim import sampling as S


def logits(rows=3, vocab=50, seed=0):
    return np.random.default_rng(seed).standard_normal((rows, vocab)).astype(np.float32) * 3


@pytest.mark.parametrize("temperature, top_k, top_p", [(0.0, 0, 1.0), (1.0, 0, 1.0), (0.7, 5, 1.0), (1.3, 0, 0.8),
                                                       (0.8, 10, 0.9), (1.0, 1, 1.0), (0.5, 0, 0.05)])
def test_the_distribution_is_torchs(temperature, top_k, top_p):
    x = logits()
    ours = S.logits_to_probs(x, temperature, top_k, top_p)
    theirs = T.logits_to_probs(torch.from_numpy(x), temperature, top_k, top_p).numpy()
    assert ours.dtype == np.float32 and np.allclose(ours, theirs, atol=1e-6)
    assert ((ours == 0) == (theirs == 0)).all()  # the same tokens removed by top-k and top-p


def test_the_inverted_cdf_residual_beta_and_residual_top_are_torchs():
    p, q = (S.softmax(x) for x in logits(2, 40, seed=1))
    for u in (0.0, 0.1, 0.5, 0.93, 0.999999):
        ids = T.invert_cdf(torch.from_numpy(p)[None], torch.tensor([[u]], dtype=torch.float64))
        assert S.invert_cdf(p, u) == int(ids)
    r = S.residual(p, q)
    assert np.allclose(r, T.residual(torch.from_numpy(p), torch.from_numpy(q)).numpy(), atol=1e-7)
    assert np.allclose(S.beta(p[None], q[None]), T.beta(torch.from_numpy(p[None]), torch.from_numpy(q[None])).numpy())
    ours = S.residual_top(r, p, q)
    theirs = T.residual_top(torch.from_numpy(r), torch.from_numpy(p), torch.from_numpy(q))
    assert [t for t, *_ in ours] == [t for t, *_ in theirs] and np.allclose([v[1:] for v in ours],
                                                                           [v[1:] for v in theirs])
    assert S.residual(p, p) is p  # no residual mass: p itself, as torch's


def test_verify_decides_as_torchs_rule_on_the_same_draws():
    """The same uniforms (numpy's, replayed): the same accept probabilities, the same first rejection, the same
    residual, the same token drawn from it (or the bonus)."""
    p = S.softmax(logits(4, 30, seed=2))
    q = S.softmax(logits(3, 30, seed=3))
    for seed in range(40):
        x = np.random.default_rng(seed).integers(0, 30, 3)
        verdict = S.verify(p, q, x, np.random.default_rng(seed))
        replay = np.random.default_rng(seed)
        u, u_next = replay.random(3, dtype=np.float32), replay.random()
        tp, tq = torch.from_numpy(p), torch.from_numpy(q)
        accept_prob = torch.clamp(tp[torch.arange(3), torch.from_numpy(x)] / tq[torch.arange(3), torch.from_numpy(x)],
                                  max=1.0)
        n = T.first_rejection(torch.from_numpy(u) < accept_prob)
        assert np.allclose(verdict.accept_prob, accept_prob.numpy()) and verdict.n_accepted == n
        law = tp[3] if n == 3 else T.residual(tp[n], tq[n])
        drawn = int(T.invert_cdf(law[None], torch.tensor([[u_next]], dtype=torch.float64)))
        assert verdict.next_token == drawn
        assert (verdict.residual is None) == (n == 3)


@pytest.mark.parametrize("temperature, top_k, top_p", [(1.0, 0, 1.0), (0.8, 5, 1.0), (0.7, 0, 0.9)])
def test_verify_rows_is_verify_with_each_rows_p_computed_when_reached(temperature, top_k, top_p):
    """The same uniforms, the same verdict, the same residual, and the accept probabilities up to the rejection."""
    z = logits(4, 30, seed=4)
    p = S.logits_to_probs(z, temperature, top_k, top_p)
    q = S.softmax(logits(3, 30, seed=5) / 0.5)
    for seed in range(60):
        x = np.random.default_rng(seed + 100).integers(0, 30, 3)
        x[0] = int(q[0].argmax()) if seed % 3 else x[0]  # some rounds keep their first draft
        full = S.verify(p, q, x, np.random.default_rng(seed))
        lazy = S.verify_rows(z, q, x, np.random.default_rng(seed), temperature, top_k, top_p)
        n = full.n_accepted
        assert (lazy.n_accepted, lazy.next_token) == (n, full.next_token)
        reached = min(n + 1, 3)
        assert np.array_equal(lazy.accept_prob[:reached], full.accept_prob[:reached])
        assert np.isnan(lazy.accept_prob[reached:]).all() and np.array_equal(lazy.u, full.u)
        assert (lazy.residual is None and full.residual is None) or np.array_equal(lazy.residual, full.residual)


def test_greedy_verify_is_torchs():
    x = logits(5, 20, seed=4)
    best = x.argmax(-1)
    for drafted in ([], best[:4].tolist(), [best[0], (best[1] + 1) % 20, best[2], best[3]]):
        ours = S.verify_greedy(x, np.asarray(drafted, dtype=np.int64))
        theirs = T.verify_greedy(torch.from_numpy(x[: len(drafted) + 1]), torch.tensor(drafted, dtype=torch.long))
        assert (ours.n_accepted, ours.next_token) == (theirs.n_accepted, theirs.next_token)


@pytest.mark.parametrize("vocab", [4097, 262_144, 300_001])
def test_the_inverted_cdf_by_blocks_is_the_whole_cumulative_sums(vocab):
    """Over a large vocabulary the inverse CDF goes block by block: the same id as the one cumulative sum over all of
    it (torch's), for spread, peaked and sparse distributions and draws at the blocks' edges; never a zero."""
    rng = np.random.default_rng(vocab)
    spread = S.softmax(rng.standard_normal(vocab).astype(np.float32) * 3)
    sparse = np.zeros(vocab, np.float32)
    sparse[rng.choice(vocab, 5, replace=False)] = [0.4, 0.3, 0.2, 0.05, 0.05]
    one = np.zeros(vocab, np.float32)
    one[vocab - 1] = 1.0
    for p in (spread, S.softmax(rng.standard_normal(vocab).astype(np.float32) * 12), sparse, one):
        for u in [0.0, 0.999999, 1.0 - 1e-12, *rng.random(40)]:
            x = S.invert_cdf(p, float(u))
            assert x == int(T.invert_cdf(torch.from_numpy(p)[None], torch.tensor([[u]], dtype=torch.float64)))
        cdf = np.cumsum(p, dtype=np.float64)
        for i in range(S.CDF_BLOCK - 1, vocab, S.CDF_BLOCK):  # a draw at a block's edge, where rounding decides:
            u = cdf[i] / cdf[-1]  # an id with mass whose interval of the CDF reaches the edge
            if u < 1.0:
                x = S.invert_cdf(p, u)
                assert p[x] > 0 and cdf[x - 1] - 1e-9 <= cdf[i] <= cdf[x] + 1e-9
