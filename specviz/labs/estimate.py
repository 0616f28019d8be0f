"""How long will a sweep take? A short timed pilot, then tau(alpha, k) rounds per run.

Notation: alpha = E[beta] (mean acceptance probability), tau = tokens per round (``specviz.theory``).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from ..config import DecodeConfig
from ..decoder import autoregressive_generate, speculative_generate
from ..theory import expected_tokens


@dataclass(frozen=True)
class Costs:
    """From a short pilot run: seconds per baseline token, and per draft the seconds of a round at the
    smallest and largest k and the acceptance (alpha) it showed."""

    token_s: float
    k_lo: int
    k_hi: int
    round_s: dict  # draft name -> (seconds per round at k_lo, at k_hi)
    alpha: dict  # draft name -> alpha in the pilot

    def round(self, name: str, k: int) -> float:
        """Seconds of one round with k drafts, interpolated between the two pilot runs."""
        lo, hi = self.round_s[name]
        return lo + (hi - lo) * (k - self.k_lo) / max(self.k_hi - self.k_lo, 1)


def measure_costs(target, drafts: dict, ids: torch.Tensor, ks: list[int], cfg: DecodeConfig,
                  tokens: int = 12) -> Costs:
    """A pilot at ``ids``: ``tokens`` autoregressive tokens, and per draft a run at the smallest and the
    largest k (everything the real runs do, timed as they are)."""
    pilot = replace(cfg, max_new_tokens=tokens, k_policy="fixed")
    base = autoregressive_generate(target, ids, pilot)
    round_s, alpha = {}, {}
    for name, draft in drafts.items():
        runs = [speculative_generate(target, draft, ids, replace(pilot, k=k)) for k in (min(ks), max(ks))]
        round_s[name] = tuple(t.total_s / max(len(t.rounds), 1) for t in runs)
        alpha[name] = min(sum(t.counts() for t in runs).alpha, 1.0)
    return Costs(base.total_s / max(len(base.new_tokens), 1), min(ks), max(ks), round_s, alpha)


def estimate_seconds(costs: Costs, n_prompts: int, ks: list[int], max_new_tokens: int, alpha: float | None = None,
                     repeats: int = 1) -> float:
    """Predicted wall time of a sweep: per prompt, the baseline plus, per (draft, k), n / tau(alpha, k) rounds.
    ``alpha`` None uses each draft's pilot alpha; 1.0 and 0.0 bound the estimate."""
    n = max_new_tokens
    total = n * costs.token_s
    for name in costs.round_s:
        a = costs.alpha[name] if alpha is None else alpha
        total += sum(n / expected_tokens(a, k) * costs.round(name, k) for k in ks)
    return total * n_prompts * repeats


def estimate_policy_seconds(costs: Costs, name: str, n_prompts: int, configs: dict, max_new_tokens: int,
                            alpha: float | None = None) -> float:
    """Predicted wall time of the k-policy comparison with draft ``name``: per prompt, the baseline plus one run
    per config (an adaptive policy priced at its starting k, a confidence stop at its largest k: upper bounds)."""
    n, a = max_new_tokens, costs.alpha[name] if alpha is None else alpha
    total = n * costs.token_s
    for cfg in configs.values():
        k = cfg.max_k if cfg.draft_stop else cfg.k
        total += n / expected_tokens(a, k) * max(costs.round(name, k), 0.0)
    return total * n_prompts


def sweep_runs(n_prompts: int, n_drafts: int, ks: list[int], repeats: int = 1) -> int:
    """The runs a sweep makes: per repeat and prompt, the baseline and every (draft, k)."""
    return n_prompts * repeats * (1 + n_drafts * len(ks))


def policy_runs(n_prompts: int, n_configs: int) -> int:
    """The runs a k-policy comparison makes: per prompt, the baseline and every config."""
    return n_prompts * (1 + n_configs)
