"""The verify math on hand-built distributions."""
import pytest
import torch
from transformers.generation.logits_process import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

from specviz.sampling import (
    align_vocab,
    beta,
    logits_to_probs,
    point_mass,
    process_logits,
    residual,
    sample,
    verify,
    verify_greedy,
)
from tests.helpers.stats import chi2_pvalue

P = torch.tensor([[0.5, 0.3, 0.2, 0.0], [0.1, 0.2, 0.3, 0.4]], dtype=torch.float64)
Q = torch.tensor([[0.25, 0.25, 0.25, 0.25], [0.4, 0.4, 0.1, 0.1]], dtype=torch.float64)


@pytest.mark.parametrize("t,top_k,top_p", [(1.0, 0, 1.0), (0.7, 5, 1.0), (1.3, 0, 0.8), (0.9, 7, 0.6)])
def test_process_logits_matches_transformers_warpers(t, top_k, top_p):
    logits = torch.randn(3, 20, generator=torch.Generator().manual_seed(0))
    ref = TemperatureLogitsWarper(t)(None, logits.clone())
    if top_k:
        ref = TopKLogitsWarper(top_k)(None, ref)
    if top_p < 1:
        ref = TopPLogitsWarper(top_p)(None, ref)
    assert torch.equal(process_logits(logits, t, top_k, top_p), ref)


def test_greedy_probs_are_plain_softmax():
    logits = torch.tensor([1.0, 3.0, 2.0])
    assert torch.allclose(logits_to_probs(logits, 0, top_k=1, top_p=0.1), logits.softmax(-1))


def test_beta_and_residual_by_hand():
    assert beta(P, Q).tolist() == pytest.approx([0.25 + 0.25 + 0.2 + 0.0, 0.1 + 0.2 + 0.1 + 0.1])
    # max(0, p - q) = [0.25, 0.05, 0, 0] -> normalised by 0.3
    assert residual(P[0], Q[0]).tolist() == pytest.approx([0.25 / 0.3, 0.05 / 0.3, 0.0, 0.0])
    assert torch.equal(residual(P[0], P[0]), P[0])  # no residual mass: fall back to p


def test_point_mass_residual_is_p_without_x():
    q = point_mass(torch.tensor([0]), 4, torch.float64)[0]
    assert residual(P[0], q).tolist() == pytest.approx([0.0, 0.6, 0.4, 0.0])
    assert beta(P[:1], q[None]).item() == pytest.approx(0.5)  # accepted with probability p(x)


def test_verify_accepts_by_ratio_and_records_u():
    # x = (0, 1): ratios p/q = 0.5/0.25 = 2 -> 1.0 and 0.2/0.4 = 0.5
    p = torch.cat([P, torch.tensor([[0.0, 0.0, 0.0, 1.0]], dtype=torch.float64)])
    g = torch.Generator().manual_seed(0)
    u = torch.rand(2, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    v = verify(p, Q, torch.tensor([0, 1]), g)
    assert v.accept_prob.tolist() == pytest.approx([1.0, 0.5])
    assert torch.equal(v.u, u)
    expected_n = 2 if u[1] < 0.5 else 1
    assert v.n_accepted == expected_n
    if expected_n == 2:
        assert v.next_token == 3 and v.residual is None  # bonus from p_3 = onehot(3)
    else:
        assert v.residual.tolist() == pytest.approx([0.0, 0.0, 0.2 / 0.5, 0.3 / 0.5])


def test_all_accepted_draws_bonus_from_last_p():
    p = torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [1.0, 0.0, 0.0]], dtype=torch.float64)
    q = torch.tensor([[0.0, 1.0, 0.0], [0.5, 0.0, 0.5]], dtype=torch.float64)
    for seed in range(20):
        v = verify(p, q, torch.tensor([1, 2]), torch.Generator().manual_seed(seed))
        assert (v.n_accepted, v.next_token, v.rejected) == (2, 0, False)


def test_zero_target_probability_is_always_rejected():
    p = torch.tensor([[0.0, 1.0], [0.5, 0.5]], dtype=torch.float64)
    q = torch.tensor([[1.0, 0.0]], dtype=torch.float64)
    v = verify(p, q, torch.tensor([0]), torch.Generator().manual_seed(0))
    assert (v.n_accepted, v.next_token, v.rejected) == (0, 1, True)


@pytest.mark.law
@pytest.mark.slow
@pytest.mark.parametrize("point", [False, True])
def test_emitted_token_law_is_p(point):
    """One position: the emitted token (accepted draft or resample) must follow p exactly."""
    p, q = P[1], Q[1]
    g = torch.Generator().manual_seed(1)
    counts = torch.zeros(4)
    for _ in range(4000):
        x = torch.multinomial(q, 1, generator=g)
        qq = point_mass(x, 4, torch.float64) if point else q[None]
        v = verify(torch.stack([p, p]), qq, x, g)
        counts[x if v.n_accepted else v.next_token] += 1
    assert chi2_pvalue(counts, p) > 1e-3


@pytest.mark.law
@pytest.mark.slow
def test_wrong_residual_is_detected():
    """The tutorial's residual max(0, p - q(x)) with the scalar q(x) biases the law; the same test sees it."""
    p, q = P[1], Q[1]
    g = torch.Generator().manual_seed(1)
    counts = torch.zeros(4)
    for _ in range(4000):
        x = int(torch.multinomial(q, 1, generator=g))
        if torch.rand(1, generator=g, dtype=torch.float64) < min(1.0, p[x] / q[x]):
            counts[x] += 1
        else:
            r = torch.clamp(p - q[x], min=0)
            r = r / r.sum() if r.sum() > 0 else p
            counts[torch.multinomial(r, 1, generator=g)] += 1
    assert chi2_pvalue(counts, p) < 1e-3


def test_verify_greedy():
    logits = torch.tensor([[0.0, 5.0, 1.0], [3.0, 0.0, 1.0], [0.0, 0.0, 9.0]])
    v = verify_greedy(logits, torch.tensor([1, 2]))  # 1 matches argmax, 2 does not (argmax 0)
    assert (v.n_accepted, v.next_token, v.rejected, v.u) == (1, 0, True, None)
    v = verify_greedy(logits, torch.tensor([1, 0]))
    assert (v.n_accepted, v.next_token, v.rejected) == (2, 2, False)


def test_align_vocab_pads_and_cuts():
    x = torch.tensor([1.0, 2.0, 3.0])
    assert align_vocab(x, 2).tolist() == [1.0, 2.0]
    padded = align_vocab(x, 5)
    assert padded[:3].tolist() == [1.0, 2.0, 3.0] and torch.isinf(padded[3:]).all()
    assert logits_to_probs(padded, 1.0)[3:].sum() == 0


@pytest.mark.law
def test_sample_follows_the_distribution_and_never_draws_a_zero():
    """Inverse-CDF sampling: the law of 20,000 draws against p (chi-square), zero-probability ids (at the start,
    the middle and the end) never drawn, and one id per row for batched rows."""
    p = torch.tensor([0.0, 0.1, 0.0, 0.45, 0.05, 0.4, 0.0], dtype=torch.float64)
    g = torch.Generator().manual_seed(0)
    draws = sample(p.expand(20_000, -1), g)
    counts = torch.bincount(draws, minlength=len(p)).double()
    assert counts[p == 0].sum() == 0
    assert chi2_pvalue(counts[p > 0], p[p > 0]) > 1e-3
    rows = torch.eye(5)[[3, 0, 4]]  # point masses
    assert sample(rows, g).tolist() == [3, 0, 4] and sample(rows[0], g).shape == ()
    skewed = torch.tensor([1e-6, 1.0 - 1e-6]).float()  # unnormalised float32 rows work too
    assert int(sample(skewed * 3, g)) in (0, 1)


def test_residual_top_lists_the_residuals_top_tokens_with_their_p_and_q():
    from specviz.sampling import RESIDUAL_TOP, residual_top

    p = torch.tensor([0.5, 0.2, 0.2, 0.1])
    q = torch.tensor([0.1, 0.6, 0.1, 0.2])
    residual = torch.clamp(p - q, min=0)
    residual = residual / residual.sum()  # norm(max(0, p - q)) = (0.8, 0, 0.2, 0)
    got = residual_top(residual, p, q)
    assert [t for t, *_ in got] == [0, 2]  # tokens with residual 0 are left out, highest first
    assert got[0][1:] == pytest.approx((0.8, 0.5, 0.1)) and got[1][1:] == pytest.approx((0.2, 0.2, 0.1))
    assert [row[3] for row in residual_top(residual, p, None)] == [0.0, 0.0]  # no q row (a tree's point mass)
    assert residual_top(None, p, q) == ()
    assert len(residual_top(torch.full((50,), 0.02), torch.full((50,), 0.02), None)) == RESIDUAL_TOP
