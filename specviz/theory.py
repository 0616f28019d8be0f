"""Closed forms for speculative decoding (Leviathan et al. 2023, section 3) and their estimators.

alpha = E[beta], the chance a draft is accepted (beta = sum_v min(p, q) at a position);
k = drafts per round; c = cost ratio, the time of one draft step over the time of one target
forward. Assuming acceptances are i.i.d. with probability alpha:
  expected tokens per round  E[tau] = (1 - alpha^(k+1)) / (1 - alpha)              (eq. 1)
  expected walltime speedup         = (1 - alpha^(k+1)) / ((1 - alpha)(k c + 1))   (theorem 3.8)
"""
from __future__ import annotations

from .trace import target_passes


def expected_tokens(alpha: float, k: int) -> float:
    """Expected tokens a round emits (accepted drafts plus the resample or bonus): 1 .. k+1."""
    _check(alpha, k)
    if alpha == 1.0:  # the limit of the geometric sum: every draft accepted, plus the bonus
        return float(k + 1)
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def expected_speedup(alpha: float, k: int, c: float) -> float:
    """Predicted walltime speedup over autoregressive decoding: a round costs k draft steps (k c)
    plus one target forward (1), and emits expected_tokens(alpha, k) tokens."""
    if c < 0:
        raise ValueError(f"cost ratio c must be >= 0, got {c}")
    return expected_tokens(alpha, k) / (k * c + 1.0)


def cost_ratio(trace) -> float:
    """c measured from one run: mean draft time per drafted token / mean time of a target forward pass
    (one a round, see trace.target_passes). 0.0 if nothing was drafted or timed."""
    rounds = list(trace.rounds)
    drafted = sum(len(r.drafted) for r in rounds)
    target_s = sum(r.target_s for r in rounds)
    if not drafted or not target_s:
        return 0.0
    return (sum(r.draft_s for r in rounds) / drafted) / (target_s / target_passes(rounds))


def mean_k(trace) -> float:
    """Mean drafts per round (k varies under an adaptive k policy; fixed k gives k itself)."""
    rounds = list(trace.rounds)
    return sum(len(r.drafted) for r in rounds) / len(rounds) if rounds else 0.0


def measured_speedup(trace, baseline) -> float | None:
    """tokens/s of the speculative run over tokens/s of the autoregressive baseline (None if unknown)."""
    if baseline is None:
        return None
    fast, slow = trace.summary().tokens_per_s, baseline.summary().tokens_per_s
    return fast / slow if slow else None


def _check(alpha: float, k: int) -> None:
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must lie in [0, 1], got {alpha}")
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
