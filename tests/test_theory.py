"""Closed forms against hand-computed values."""
import pytest

from specviz.config import DecodeConfig
from specviz.theory import cost_ratio, expected_speedup, expected_tokens, mean_k, measured_speedup, verify_cost
from specviz.trace import Round, Trace


def test_expected_tokens_hand_values():
    assert expected_tokens(0.5, 2) == pytest.approx(1.75)  # 1 + 0.5 + 0.25
    assert expected_tokens(0.0, 5) == pytest.approx(1.0)  # first draft always rejected: just the resample
    assert expected_tokens(0.8, 1) == pytest.approx(1.8)


@pytest.mark.parametrize("k", [0, 1, 4, 9])
def test_alpha_one_limit_is_k_plus_one(k):
    assert expected_tokens(1.0, k) == k + 1
    assert expected_tokens(1 - 1e-9, k) == pytest.approx(k + 1, rel=1e-6)  # continuous at the limit


def test_expected_speedup_hand_values():
    assert expected_speedup(0.5, 2, 0.0) == pytest.approx(1.75)  # free draft: speedup = tokens per round
    assert expected_speedup(0.5, 2, 0.25) == pytest.approx(1.75 / 1.5)
    assert expected_speedup(0.0, 3, 0.1) == pytest.approx(1 / 1.3)  # useless draft slows things down


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="alpha"):
        expected_tokens(1.5, 2)
    with pytest.raises(ValueError, match="cost ratio"):
        expected_speedup(0.5, 2, -1)


def _round(i, drafted, draft_s, target_s):
    m = len(drafted)
    return Round(index=i, k=m, drafted=tuple(drafted), q=(0.5,) * m, p=(0.5,) * m, accept_prob=(1.0,) * m,
                 u=(None,) * m, beta=(1.0,) * m, n_accepted=m, emitted=tuple(drafted) + (9,), resampled=None, bonus=9,
                 next_p=0.5, residual_top=(), draft_s=draft_s, target_s=target_s, wall_s=draft_s + target_s)


def test_cost_ratio_and_mean_k_from_trace():
    # 6 drafted tokens in 0.06 s -> 0.01 s each; 2 rounds of target in 0.2 s -> 0.1 s each: c = 0.1
    t = Trace([1], DecodeConfig(), rounds=[_round(0, [1, 2, 3, 4], 0.04, 0.08), _round(1, [5, 6], 0.02, 0.12)])
    assert cost_ratio(t) == pytest.approx(0.1)
    assert mean_k(t) == 3
    assert cost_ratio(Trace([1], DecodeConfig())) == 0.0
    # a first round that drafted nothing ran no target pass (the prefill's logits served it): 1 pass in 0.1 s
    t = Trace([1], DecodeConfig(), rounds=[_round(0, [], 0.0, 0.0), _round(1, [5, 6], 0.02, 0.1)])
    assert cost_ratio(t) == pytest.approx(0.1)


def test_measured_speedup_is_tokens_per_s_ratio():
    fast = Trace([1], DecodeConfig(), rounds=[_round(0, [1, 2, 3], 0.0, 0.1)], total_s=1.0)  # 4 tokens/s
    slow = Trace([1], DecodeConfig(), rounds=[_round(0, [], 0.0, 0.1)], total_s=0.5)  # 2 tokens/s
    assert measured_speedup(fast, slow) == pytest.approx(2.0)
    assert measured_speedup(fast, None) is None


def _timed(rounds_spec, total_s=1.0):
    """A trace of rounds (drafted count, draft_s, target_s); index 0 first, so an AR first round costs no pass."""
    rounds = [Round(index=i, k=d, drafted=tuple(range(d)), q=(0.5,) * d, p=(0.5,) * d, accept_prob=(1.0,) * d,
                    u=(None,) * d, beta=(1.0,) * d, n_accepted=d, emitted=tuple(range(d + 1)), resampled=None, bonus=0,
                    next_p=0.5, residual_top=(), draft_s=ds, target_s=ts, wall_s=ds + ts)
              for i, (d, ds, ts) in enumerate(rounds_spec)]
    return Trace([1], DecodeConfig(k=max(d for d, _, _ in rounds_spec) or 1), rounds=rounds, total_s=total_s)


def test_verify_cost_and_cost_ratio_against_a_baseline_by_hand():
    # baseline: 4 autoregressive rounds; the first is served by the prefill, so 3 passes of 0.010 s each
    base = _timed([(0, 0.0, 0.0), (0, 0.0, 0.010), (0, 0.0, 0.010), (0, 0.0, 0.010)])
    # speculative: 2 rounds of 4 drafts at 0.002 s a draft step, verify passes of 0.015 s
    spec = _timed([(4, 0.008, 0.015), (4, 0.008, 0.015)])
    assert verify_cost(spec, base) == pytest.approx(1.5)
    assert cost_ratio(spec, base) == pytest.approx(0.2)  # 0.002 / 0.010
    assert cost_ratio(spec) == pytest.approx(0.002 / 0.015)  # no baseline: over the verify pass
    assert verify_cost(spec, None) == 1.0
    # tau(0.5, 4) = 1.9375 tokens a round, at 4 * 0.2 + 1.5 = 2.3 forwards
    assert expected_speedup(0.5, 4, 0.2, 1.5) == pytest.approx(1.9375 / 2.3)
    assert expected_speedup(0.5, 4, 0.2) == pytest.approx(1.9375 / 1.8)
