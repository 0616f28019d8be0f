"""Closed forms for speculative decoding (Leviathan et al. 2023, section 3) and their estimators.

alpha = E[beta], the chance a draft is accepted (beta = sum_v min(p, q) at a position);
k = drafts per round; c = cost ratio, the time of one draft step over the time of one target
forward. Assuming acceptances are i.i.d. with probability alpha:
  expected tokens per round  E[tau] = (1 - alpha^(k+1)) / (1 - alpha)              (eq. 1)
  expected walltime speedup         = (1 - alpha^(k+1)) / ((1 - alpha)(k c + 1))   (theorem 3.8)
The theorem prices the verify pass (the target over k + 1 tokens) like a one-token forward. On a real machine it
costs v >= 1 one-token forwards (on a CPU, more rows cost more), so with a baseline run to measure the one-token
forward this module also predicts  E[tau] / (k c + v),  c and v both relative to that forward.
"""
from __future__ import annotations


def expected_tokens(alpha: float, k: int) -> float:
    """Expected tokens a round emits (accepted drafts plus the resample or bonus): 1 .. k+1."""
    _check(alpha, k)
    if alpha == 1.0:  # the limit of the geometric sum: every draft accepted, plus the bonus
        return float(k + 1)
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def expected_speedup(alpha: float, k: float, c: float, v: float = 1.0) -> float:
    """Predicted walltime speedup over autoregressive decoding: a round costs k draft steps (k c) plus one
    verify pass (v target forwards; Leviathan's theorem takes v = 1) and emits expected_tokens(alpha, k)."""
    if c < 0 or v <= 0:
        raise ValueError(f"need cost ratio c >= 0 and verify cost v > 0, got c={c}, v={v}")
    return expected_tokens(alpha, k) / (k * c + v)


def counts_of(run):
    """A run's ``Counts``: from a Trace, or a Counts as it is (several runs summed)."""
    return run.counts() if hasattr(run, "counts") else run


def forward_s(run) -> float:
    """Mean seconds of one target forward pass in a run (0.0 if none was timed)."""
    c = counts_of(run)
    return c.target_s / c.target_passes if c.target_passes else 0.0


def cost_ratio(trace, baseline=None) -> float:
    """c measured (``trace`` and ``baseline``: Traces, or Counts of several runs): mean draft time per drafted token over the time of one target forward, which is the
    baseline's one-token forward where a baseline run is given, else this run's verify pass. 0.0 if nothing
    was drafted or timed."""
    c = counts_of(trace)
    unit = forward_s(baseline) if baseline is not None else forward_s(trace)
    return (c.draft_s / c.drafted) / unit if c.drafted and unit else 0.0


def verify_cost(trace, baseline) -> float:
    """v measured: the run's mean verify pass over the baseline's one-token forward (1.0 if either is unknown)."""
    unit, verify = forward_s(baseline) if baseline is not None else 0.0, forward_s(trace)
    return verify / unit if unit and verify else 1.0


def mean_k(trace) -> float:
    """Mean drafts per round (k varies under an adaptive k policy; fixed k gives k itself)."""
    c = counts_of(trace)
    return c.drafted / c.rounds if c.rounds else 0.0


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
