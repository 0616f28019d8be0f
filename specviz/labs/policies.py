"""Fixed k against the adaptive k policies (history, heuristic, confidence stop), on the same prompts,
beside the autoregressive baseline.

Notation as in ``specviz.labs.sweep``: one row per run with additive counts (``run_row``), so every aggregate
is a ratio of sums; tau = tokens per round.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import replace

import pandas as pd

from ..config import DecodeConfig
from ..decoder import speculative_generate
from .sweep import BASELINE, baseline_run, run_row, warm_up


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
        yield run_row(baseline_run(target, ids, first), policy=BASELINE, prompt=i), []
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
