"""The k-sweep lab: the sweep as a stream of runs, per-position acceptance, fixed k against the adaptive
k policies, and an estimate of how long a sweep will take before it starts.

Notation as in ``specviz.sweep``: one row per run with additive counts (``run_row``), so every aggregate
is a ratio of sums; alpha = E[beta], tau = tokens per round, c = draft step / target forward.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterable, Iterator

import pandas as pd
import torch

from .config import DecodeConfig
from .decoder import autoregressive_generate, speculative_generate
from .sweep import run_row, warm_up
from .theory import expected_tokens

BASELINE = "autoregressive"


# -- per-position acceptance ----------------------------------------------------------------------------
def position_rows(trace, **labels) -> list[dict]:
    """Additive per-position counts of one run: at draft position i (1-based), how many rounds drafted
    a token there and how many of those were accepted (position i needs 1..i-1 accepted too)."""
    depth = max((len(r.drafted) for r in trace.rounds), default=0)
    return [labels | dict(position=i + 1, drafted=sum(len(r.drafted) > i for r in trace.rounds),
                          accepted=sum(r.n_accepted > i for r in trace.rounds)) for i in range(depth)]


def per_position(positions: pd.DataFrame) -> pd.DataFrame:
    """Per (draft, k, position): drafted, accepted and the rate accepted / drafted (position x k heatmap)."""
    g = positions.groupby(["draft", "k", "position"], sort=False)[["drafted", "accepted"]].sum().reset_index()
    g["rate"] = g.accepted / g.drafted
    return g


# -- fixed k against the adaptive policies -------------------------------------------------------------
def policy_configs(cfg: DecodeConfig, fixed_ks: Iterable[int] = (4,), policies: Iterable[str] = ("history", "heuristic"),
                   stops: Iterable[float] = ()) -> dict[str, DecodeConfig]:
    """Label -> config: each fixed k, then each adaptive policy starting from cfg.k within [min_k, max_k],
    then each confidence stop (draft up to max_k, stop below draft_stop: transformers' default rule is 0.4)."""
    out = {f"fixed k={k}": replace(cfg, k=int(k), k_policy="fixed") for k in fixed_ks}
    start = min(max(cfg.k, cfg.min_k), cfg.max_k)
    out |= {policy: replace(cfg, k=start, k_policy=policy) for policy in policies}
    out |= {stop_label(s, cfg.max_k): replace(cfg, k=cfg.max_k, k_policy="fixed", draft_stop=s) for s in stops}
    return out


def stop_label(stop: float, max_k: int) -> str:
    return f"stop < {stop:g} (k ≤ {max_k})"


def iter_policies(target, draft, prompts: list, configs: dict[str, DecodeConfig]) -> Iterator[tuple[dict, list[dict]]]:
    """Per prompt: the autoregressive baseline, then one run per labelled config; yields
    (run_row with a ``policy`` label, one row per round with the k it used)."""
    warm_up(target, {"draft": draft}, prompts[0], next(iter(configs.values())))
    for i, ids in enumerate(prompts):
        first = next(iter(configs.values()))
        yield run_row(autoregressive_generate(target, ids, first), policy=BASELINE, prompt=i), []
        for label, cfg in configs.items():
            trace = speculative_generate(target, draft, ids, cfg)
            rounds = [dict(policy=label, prompt=i, round=r.index, k=r.k, drafted=len(r.drafted),
                           accepted=r.n_accepted) for r in trace.rounds]
            yield run_row(trace, policy=label, prompt=i), rounds


def compare_policies(target, draft, prompts: list, cfg: DecodeConfig | None = None, fixed_ks=(4,),
                     policies=("history", "heuristic"), stops=()) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(runs, rounds): one row per run, one row per round (its k). ``policy_summary(runs)`` aggregates."""
    runs, rounds = [], []
    for row, rs in iter_policies(target, draft, prompts, policy_configs(cfg or DecodeConfig(), fixed_ks, policies, stops)):
        runs.append(row)
        rounds += rs
    return pd.DataFrame(runs), pd.DataFrame(rounds, columns=["policy", "prompt", "round", "k", "drafted", "accepted"])


def policy_summary(runs: pd.DataFrame) -> pd.DataFrame:
    """Per policy: tokens/s, speedup over the baseline, acceptance rate, tau, mean k per round."""
    g = runs.groupby("policy", sort=False).sum(numeric_only=True).reset_index()
    out = pd.DataFrame({"policy": g.policy, "tokens_per_s": g.new_tokens / g.seconds})
    base = out.tokens_per_s[out.policy == BASELINE]
    out["speedup"] = out.tokens_per_s / (float(base.iloc[0]) if len(base) else float("nan"))
    out["acceptance_rate"] = (g.accepted / g.drafted).where(g.drafted > 0)
    out["tau"] = g.new_tokens / g.rounds
    out["mean_k"] = g.drafted / g.rounds
    return out


def round_ks(rounds: pd.DataFrame) -> pd.DataFrame:
    """The rounds of every prompt one after another per policy: ``step`` counts rounds across prompts."""
    order = pd.Series(pd.factorize(rounds.policy)[0], index=rounds.index)  # policies keep their order
    rounds = rounds.assign(order=order).sort_values(["order", "prompt", "round"], kind="stable").drop(columns="order")
    rounds["step"] = rounds.groupby("policy", sort=False).cumcount()
    return rounds


# -- how long will it take? ----------------------------------------------------------------------------
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
        betas = [b for t in runs for r in t.rounds for b in r.beta if b is not None]
        alpha[name] = min(sum(betas) / len(betas), 1.0) if betas else 0.0
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
