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


def numpy_only(monkeypatch):
    monkeypatch.setattr(S, "native", lambda n: None)


@pytest.fixture
def so():
    from specviz.runtime.native import build

    if build.lib() is None:
        pytest.skip(f"no C stack here: {build.unavailable()}")
    return build.lib()


@pytest.mark.parametrize("vocab", [4097, 262_144])
def test_a_long_rows_softmax_residual_and_draw_in_c_are_numpys(so, monkeypatch, vocab):
    """Over a long row the C stack's softmax at a temperature, residual and inverse CDF give numpy's floats (to a few
    ulp of the exponent; C's exp flushes below e^-87.3, numpy's goes on through subnormals) and numpy's ids, masked (-inf)
    entries included."""
    rng = np.random.default_rng(vocab)
    x = rng.standard_normal(vocab).astype(np.float32) * 4
    x[rng.choice(vocab, 100, replace=False)] = -np.inf
    q = np.zeros(vocab, np.float32)
    q[:3000] = S.softmax(rng.standard_normal(3000).astype(np.float32) * 4)
    draws = rng.random(200)
    numpy_only(monkeypatch)
    refs = {t: S.logits_to_probs(x[None], t)[0] for t in (0.3, 0.8, 1.0, 1.7)}
    theirs = {t: S.residual(ref, q) for t, ref in refs.items()}
    picked = {t: [S.invert_cdf(r, float(u)) for u in draws] for t, r in theirs.items()}
    monkeypatch.undo()  # the C stack from here on
    for t, ref in refs.items():
        p, r = S.logits_to_probs(x[None], t)[0], S.residual(ref, q)
        assert p.dtype == np.float32 and np.allclose(p, ref, rtol=1e-5, atol=1e-30)
        assert (p[ref == 0] == 0).all() and (p[ref > 1e-37] > 0).all()
        assert np.allclose(r, theirs[t], rtol=1e-6, atol=1e-30)
        same = [S.invert_cdf(r, float(u)) for u in draws] == picked[t]
        assert same, "a draw landed elsewhere than numpy's"
    both = S.logits_to_probs(np.stack([x, x[::-1]]), 0.8)  # several rows: each its own softmax
    assert np.array_equal(both[0], S.logits_to_probs(x[None], 0.8)[0]) and np.allclose(both[1].sum(), 1.0)


def test_c_sampling_refuses_what_it_cannot_sample(so):
    """NaN or +inf logits, no finite entry, a temperature that is not positive, u outside [0, 1), negative or no
    weights: refused by the C side (-2 / -1), and by the library with a ValueError."""
    v = S.NATIVE_FROM + 1
    good, out = np.zeros(v, np.float32), np.empty(v, np.float32)
    for bad in (np.nan, np.inf):
        x = good.copy()
        x[7] = bad
        assert so.sv_softmax_t(x.ctypes.data, v, 1.0, out.ctypes.data) == -2
        with pytest.raises(ValueError, match="NaN"):
            S.logits_to_probs(x[None], 0.8)
    assert so.sv_softmax_t(np.full(v, -np.inf, np.float32).ctypes.data, v, 1.0, out.ctypes.data) == -2
    for inv_t in (0.0, -1.0, np.inf):
        assert so.sv_softmax_t(good.ctypes.data, v, inv_t, out.ctypes.data) == -2
    assert so.sv_softmax_t(good.ctypes.data, 0, 1.0, out.ctypes.data) == -2
    assert so.sv_softmax_t(good.ctypes.data, v, 1.0, out.ctypes.data) == 0 and np.allclose(out, 1 / v)
    p = out.copy()
    for u in (-0.1, 1.0, np.nan):
        assert so.sv_invert_cdf(p.ctypes.data, v, u) == -1
    neg = p.copy()
    neg[3] = -1e-3
    for w in (neg, np.zeros(v, np.float32)):
        assert so.sv_invert_cdf(w.ctypes.data, v, 0.5) == -1
        with pytest.raises(ValueError, match="no id to draw"):
            S.invert_cdf(w, 0.5)
    assert so.sv_residual(p.ctypes.data, p.ctypes.data, 0, out.ctypes.data) == -1.0


def test_verify_rows_over_a_long_row_keeps_the_targets_law():
    """Speculative sampling with the C path's p, residual and draws (one draft from a q unlike p): the first token
    emitted follows p (chi-square over p's likely ids and the rest pooled), over a 5,000-id vocabulary."""
    from scipy.stats import chisquare

    rng = np.random.default_rng(5)
    v, n = 5000, 12000
    x = np.full((2, v), -8.0, np.float32)
    x[:, :6] = [2.0, 1.5, 1.0, 0.5, 0.0, -0.5]
    q = np.zeros((1, v), np.float32)
    q[0, :6] = [0.05, 0.1, 0.3, 0.3, 0.2, 0.05]
    p = S.logits_to_probs(x[:1], 0.8)[0]
    counts = np.zeros(7)
    for _ in range(n):
        d = np.asarray([S.sample(q[0], rng)])
        verdict = S.verify_rows(x, q, d, rng, 0.8)
        first = int(d[0]) if verdict.n_accepted else verdict.next_token
        counts[min(first, 6)] += 1
    expected = np.append(p[:6], p[6:].sum()).astype(np.float64)
    expected *= n / expected.sum()
    assert chisquare(counts, expected).pvalue > 1e-3


def test_beta_and_the_residuals_top_in_c_are_numpys(so):
    """Over a long row, beta (sv_overlap) and the residual's top ids (sv_top_k) are the numpy forms' (ties: the lower
    id first); greedy records take the C softmax at temperature 1; what the C side cannot take it refuses (-1)."""
    rng = np.random.default_rng(9)
    v = S.NATIVE_FROM * 3 + 5
    x = (rng.standard_normal((3, v)) * 3).astype(np.float32)
    p, q = S.logits_to_probs(x, 0.8), S.logits_to_probs(x[::-1].copy(), 0.8)
    assert np.allclose(S.beta(p, q), np.minimum(p, q).sum(-1), rtol=1e-5)
    r = S.residual(p[0], q[0])
    top = np.argsort(-r, kind="stable")[: S.RESIDUAL_TOP]
    assert [t for t, *_ in S.residual_top(r, p[0], q[0])] == top.tolist()
    tied = np.zeros(v, np.float32)
    tied[[40, 7, 900, 3]] = [0.5, 0.5, 0.2, 0.5]
    assert [t for t, *_ in S.residual_top(tied, tied, None)] == [3, 7, 40, 900]
    assert np.allclose(S.logits_to_probs(x[:1], 0.0), S.softmax(x[:1]), atol=1e-7)
    out = np.empty(64, np.int32)
    assert so.sv_overlap(p[0].ctypes.data, q[0].ctypes.data, 0) == -1.0
    for n, k in ((0, 8), (v, 0), (v, 65)):
        assert so.sv_top_k(r.ctypes.data, n, k, out.ctypes.data) == -1
    assert so.sv_top_k(r.ctypes.data, 3, 8, out.ctypes.data) == 3  # fewer ids than asked: all of them


def draft_q(rows=3, vocab=300, seed=7):
    """q of a draft over some ids (ascending) of the vocabulary: (DraftQ, the same rows dense)."""
    rng = np.random.default_rng(seed)
    ids = np.sort(rng.choice(vocab, vocab // 3, replace=False)).astype(np.int64)
    q = S.DraftQ(ids, S.softmax(rng.standard_normal((rows, len(ids))).astype(np.float32) * 2), vocab)
    return q, q.dense()


@pytest.mark.parametrize("vocab", [300, 262_144])
def test_q_over_the_drafts_ids_verifies_as_its_dense_rows(vocab):
    """The same verdict, draws and residual floats from q kept over the draft's ids as from its dense rows (the
    residual in C over a long row: ``sv_residual_over``)."""
    q, dense = draft_q(3, vocab)
    z = logits(4, vocab, seed=8)
    assert np.array_equal(dense[:, q.ids], q.values) and dense.sum() == pytest.approx(3.0, abs=1e-5)
    for seed in range(40):
        rng = np.random.default_rng(seed)
        x = q.ids[rng.integers(len(q.ids), size=3)]  # drafts are drawn from q: among its ids
        a = S.verify_rows(z, q, x, np.random.default_rng(seed), 0.8)
        b = S.verify_rows(z, dense, x, np.random.default_rng(seed), 0.8)
        assert (a.n_accepted, a.next_token) == (b.n_accepted, b.next_token) and np.array_equal(a.u, b.u)
        assert np.array_equal(a.accept_prob, b.accept_prob, equal_nan=True)
        assert (a.residual is None and b.residual is None) or np.array_equal(a.residual, b.residual)
    p = S.logits_to_probs(z[:1], 0.8)[0]
    assert np.array_equal(S.residual_over(p, q, 1), S.residual(p, dense[1]))


@pytest.mark.parametrize("vocab", [300, 262_144])
def test_a_run_that_keeps_nothing_decides_as_one_that_keeps_the_residual(vocab):
    """verify_rows without a record (keep False: p read at each draft from its row's normaliser on two threads, the
    token after the kept drafts drawn from the row's exponentials in C) gives the verdict the written rows give: the
    same uniforms, accept probabilities, kept drafts and token, seed for seed; with no drafts (an autoregressive
    token) the token sampled from p. Rounds of every length of kept drafts are among them."""
    q, _ = draft_q(3, vocab)
    seen = set()
    for seed in range(60):
        rng = np.random.default_rng(seed)
        z = logits(4, vocab, seed=seed)
        z[:, q.ids[:4]] += rng.uniform(0, 8)  # a draft's likely ids likely to the target too, by degrees
        x = q.ids[rng.integers(4, size=3)]
        a = S.verify_rows(z, q, x, np.random.default_rng(seed), 0.8)
        b = S.verify_rows(z, q, x, np.random.default_rng(seed), 0.8, threads=2, keep=False)
        assert (b.n_accepted, b.next_token) == (a.n_accepted, a.next_token) and np.array_equal(a.u, b.u)
        assert np.array_equal(a.accept_prob, b.accept_prob, equal_nan=True) and b.residual is None
        seen.add(a.n_accepted)
        none = np.zeros(0, np.int64)
        c = S.verify_rows(z[:1], S.point_mass(none, vocab), none, np.random.default_rng(seed), 0.8, keep=False)
        assert c.next_token == S.sample(S.logits_to_probs(z[:1], 0.8)[0], np.random.default_rng(seed))
    assert seen == {0, 1, 2, 3}


def test_q_over_ids_refuses_what_is_not_a_draft_vocabulary(so):
    """DraftQ refuses ids that do not ascend within the vocabulary and values of another shape or dtype; the C
    residual over ids refuses ids out of order or out of range, and an empty row (-1), writing nothing."""
    q, _ = draft_q()
    with pytest.raises(ValueError, match="ascend"):
        S.DraftQ(q.ids[::-1].copy(), q.values[:, ::-1].copy(), q.vocab)
    with pytest.raises(ValueError, match="ascend"):
        S.DraftQ(q.ids, q.values, int(q.ids[-1]))
    with pytest.raises(ValueError, match="float32"):
        S.DraftQ(q.ids, q.values.astype(np.float64), q.vocab)
    v = S.NATIVE_FROM + 1
    p = np.full(v, 1.0 / v, np.float32)
    out = np.full(v, -7.0, np.float32)
    vals = np.full(3, 0.1, np.float32)
    for ids in ([5, 3, 9], [5, 5, 9], [-1, 3, 9], [1, 2, v]):
        ids = np.asarray(ids, np.int32)
        assert so.sv_residual_over(p.ctypes.data, v, ids.ctypes.data, vals.ctypes.data, 3, out.ctypes.data) == -1.0
        assert (out == -7.0).all()
    ids = np.asarray([1, 2, 3], np.int32)
    assert so.sv_residual_over(p.ctypes.data, 0, ids.ctypes.data, vals.ctypes.data, 3, out.ctypes.data) == -1.0
    assert so.sv_residual_over(p.ctypes.data, v, ids.ctypes.data, vals.ctypes.data, -1, out.ctypes.data) == -1.0
