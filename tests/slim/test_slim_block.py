"""Block verification in specviz.slim: numpy's verdicts are torch's on the same draws (dense q and q over a draft's
ids), the C stack's normalisers, p at ids, rows and draws give the floats and ids of the numpy forms, the C side refuses
what it cannot compute, and slim's runs keep the target's greedy text and its law."""
import ctypes

import numpy as np
import pytest
import torch

from specviz import DecodeConfig
from specviz import sampling as T
from specviz.slim import Lookup, ModelDraft, speculative
from specviz.slim import sampling as S
from tests.helpers.numpy_lm import ToyForward
from tests.helpers.slim_law import LAW_SHARPEN, law_statistic


@pytest.fixture
def so():
    from specviz.runtime.native import build

    if build.lib() is None:
        pytest.skip(f"no C stack here: {build.unavailable()}")
    return build.lib()


def torch_verdict(z, q_dense, x, seed, temperature):
    """torch's verify_block on numpy's replayed draws: (kept, token)."""
    p = T.logits_to_probs(torch.from_numpy(z), temperature)
    tq, m = torch.from_numpy(q_dense), len(x)
    replay = np.random.default_rng(seed)
    u, u_next = replay.random(m, dtype=np.float32), replay.random()
    w = T.block_weights(p[torch.arange(m), torch.from_numpy(x)], tq[torch.arange(m), torch.from_numpy(x)])
    h = [T.block_stop(w[i], float((w[i] * p[i].double() - tq[i].double()).clamp(min=0).sum())) for i in range(1, m)]
    h.append(w[m])
    n = max([i for i in range(1, m + 1) if float(u[i - 1]) < h[i - 1]], default=0)
    law = p[m] if n == m else T.block_residual(p[n], tq[n], w[n])
    return n, int(T.invert_cdf(law[None], torch.tensor([[u_next]], dtype=torch.float64)))


@pytest.mark.parametrize("sparse", [False, True])
def test_verify_block_decides_as_torchs_on_the_same_draws(sparse):
    rng = np.random.default_rng(1)
    v, m, seen = 40, 3, set()
    for seed in range(80):
        z = (rng.standard_normal((m + 1, v)) * 2).astype(np.float32)
        ids = np.sort(rng.choice(v, 25, replace=False))
        values = S.softmax(rng.standard_normal((m, 25)).astype(np.float32) * 2)
        if seed % 2:  # q near p on its ids: drafts kept often
            values = S.softmax(z[:m, ids] / 0.8 + rng.standard_normal((m, 25)).astype(np.float32) * 0.3)
        q = S.DraftQ(ids, values, v)
        x = np.asarray([ids[S.sample(values[i], rng)] for i in range(m)])
        mine = S.verify_block(S.RowProbs(z, 0.8), q if sparse else q.dense(), x, np.random.default_rng(seed))
        assert (mine.n_accepted, mine.next_token) == torch_verdict(z, q.dense(), x, seed, 0.8)
        seen.add(mine.n_accepted)
    assert seen == {0, 1, 2, 3}


def long_case(rng, v=262_144, m=4, near=True):
    z = (rng.standard_normal((m + 1, v)) * 4).astype(np.float32)
    ids = np.sort(rng.choice(v, 8192, replace=False))
    p = S.logits_to_probs(z, 0.8)
    values = p[:m, ids] ** (1.1 if near else 0.3)  # strided rows (a column gather), as a caller's q may be
    q = S.DraftQ(ids, (values / values.sum(1, keepdims=True)).astype(np.float32), v)
    assert not q.values.flags["C_CONTIGUOUS"]
    return z, q


def test_the_c_normalisers_give_the_softmaxs_floats(so):
    rng = np.random.default_rng(2)
    for v in (7, 1025, 5000, 262_144):
        x = (rng.standard_normal((3, v)) * 4).astype(np.float32)
        x[0, rng.integers(0, v, 3)] = -np.inf
        for threads in (1, 2, 3):
            rows = S.RowProbs(x, 0.8, threads=threads)
            rows.so = so  # short rows too, for the test
            rows.normalise(3)
            for i in range(3):
                ref = np.empty(v, np.float32)
                assert so.sv_softmax_t(x[i].ctypes.data, v, 1 / 0.8, ref.ctypes.data) == 0
                ids = rng.integers(0, v, 50)
                assert np.array_equal(rows.at(i, ids), ref[ids])
                assert rows.mass(i) == pytest.approx(1.0, abs=1e-5)
                assert np.array_equal(rows.full(i), ref)


def test_the_c_draw_is_numpys_draw(so):
    """sv_residual_draw (no row written) picks the id numpy's block_residual then sample picks, at many draws and
    weights, and the bonus from p itself (k = -1)."""
    rng = np.random.default_rng(3)
    for near in (True, False):
        z, q = long_case(rng, near=near)
        rows = S.RowProbs(z, 0.8, threads=2)
        rows.normalise(4)
        ids = np.ascontiguousarray(q.ids, dtype=np.int32)
        for n, w in ((0, 1.0), (1, 0.37), (3, 0.9)):
            e, scale = rows.kept(n)
            p, vals = e * scale, np.ascontiguousarray(q.values[n])
            law = S.block_residual(p, q, n, w)
            for u in np.append(rng.random(40), [0.0, 0.999999]):
                got = so.sv_residual_draw(e.ctypes.data, len(p), scale, w, ids.ctypes.data, vals.ctypes.data,
                                          len(ids), float(u))
                assert got == S.invert_cdf(law, float(u))
            bonus = so.sv_residual_draw(e.ctypes.data, len(p), scale, 1.0, ids.ctypes.data, vals.ctypes.data, -1, 0.5)
            assert bonus == S.invert_cdf(p, 0.5)


def test_a_run_that_records_nothing_draws_what_a_recorded_one_draws(so):
    rng = np.random.default_rng(4)
    seen = set()
    for near in (True, False, True):
        z, q = long_case(rng, near=near)
        for seed in range(15):
            r = np.random.default_rng(seed + 100)
            x = np.asarray([q.ids[S.sample(q.values[i], r)] for i in range(len(q))])
            kept = S.verify_block(S.RowProbs(z, 0.8, threads=2), q, x, np.random.default_rng(seed), keep=True)
            lean = S.verify_block(S.RowProbs(z, 0.8, threads=2), q, x, np.random.default_rng(seed), keep=False)
            assert (kept.n_accepted, kept.next_token) == (lean.n_accepted, lean.next_token)
            assert lean.residual is None and np.array_equal(kept.u, lean.u)
            seen.add(kept.n_accepted)
    assert len(seen) >= 2


def test_the_c_side_refuses_what_it_cannot_compute(so):
    x = np.zeros(10, np.float32)
    m, out = ctypes.c_float(), np.empty(10, np.float32)
    assert so.sv_softmax_norm(x.ctypes.data, 10, 0.0, ctypes.byref(m)) == -2
    bad = x.copy()
    bad[3] = np.nan
    assert so.sv_softmax_norm(bad.ctypes.data, 10, 1.0, ctypes.byref(m)) == -2
    ms, tot = np.empty(2, np.float32), np.empty(2)
    two = np.stack([x, bad])
    assert so.sv_softmax_norms(two.ctypes.data, 2, 10, 1.0, ms.ctypes.data, tot.ctypes.data, None, 2) == -2
    assert so.sv_softmax_norms(two.ctypes.data, 0, 10, 1.0, ms.ctypes.data, tot.ctypes.data, None, 2) == -2
    ids = np.array([3, 10], np.int32)
    assert so.sv_softmax_at(x.ctypes.data, 10, 1.0, 0.0, 0.1, ids.ctypes.data, 2, out.ctypes.data) == -1
    assert so.sv_softmax_from(x.ctypes.data, 10, 1.0, 0.0, 0.0, out.ctypes.data) == -1
    e, q = np.ones(10, np.float32), np.full(2, 0.05, np.float32)
    for ids, u, k in ((np.array([4, 2], np.int32), 0.5, 2), (np.array([2, 4], np.int32), 1.0, 2),
                      (np.array([2, 40], np.int32), 0.5, 2), (np.array([2, 4], np.int32), 0.5, -2)):
        assert so.sv_residual_draw(e.ctypes.data, 10, 0.1, 1.0, ids.ctypes.data, q.ctypes.data, k, u) == -1
    with pytest.raises(ValueError, match="NaN"):
        S.RowProbs(np.stack([bad] * 500).reshape(1, -1), 0.8).normalise(1)


@pytest.mark.parametrize("prompt", ([1, 2, 3, 1, 2, 3, 1, 2], [3, 8, 2, 11, 0, 6, 3, 8]))
def test_greedy_text_is_the_targets_own_with_block_verification(prompt):
    cfg = DecodeConfig(temperature=0.0, max_new_tokens=20, k=4, verify="block")
    assert speculative(ToyForward(), Lookup(), prompt, cfg).new_tokens == ToyForward().greedy(prompt, 20)


@pytest.mark.parametrize("extra", [{}, {"record": False}, {"draft_stop": 0.3}])
def test_block_verification_in_slim_emits_the_targets_law(extra):
    draft = lambda: ModelDraft(ToyForward(seed=1, sharpen=LAW_SHARPEN))  # noqa: E731
    chi2, bound = law_statistic(1.0, 0, draft=draft, k=2, verify="block", **extra)
    assert chi2 < bound, (chi2, bound)


def test_a_block_round_records_its_stop_chances():
    """A recorded block round keeps h_1..h_m in accept_prob: the last is P_m, the product of the capped ratios read
    from the round's own p and q; those below the kept prefix that the walk down never needed are NaN."""
    prompt, cfg = [5, 4, 9, 4, 9, 4], DecodeConfig(temperature=1.0, max_new_tokens=16, k=3, verify="block", seed=3)
    trace = speculative(ToyForward(), ModelDraft(ToyForward(seed=1)), prompt, cfg)
    assert len(trace.new_tokens) == 16
    drafted = [r for r in trace.rounds if r.drafted]
    assert drafted
    for r in drafted:
        w = 1.0
        for p, q in zip(r.p, r.q):
            w = min(1.0, w * p / q)
        assert r.accept_prob[-1] == pytest.approx(w, rel=1e-5)
        n = r.n_accepted
        assert all(a == a for a in r.accept_prob[max(n - 1, 0):])  # h from the last down to the one that kept
        assert all(a != a for a in r.accept_prob[: max(n - 1, 0)])
