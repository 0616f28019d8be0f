"""The least a lab's runs can take, from one price the first request can afford: a target pass.

A run cannot beat its target passes: a baseline token is one pass, and a speculative round is at least one pass
(its verify) buying at most its longest chain of drafts and the bonus, k + 1 tokens (a tree: its levels + 1),
even if every draft were accepted and drafting were free. ``pass_seconds`` times a few one-row passes on the
fastest one-row forward here (``pilot_cache.pass_now``), on the request's own thread, every time it is asked: never a
price from another moment or another thread's priority. The floor takes the low end of that price's range. So a request
whose floor is over the budget is refused in well under two seconds, before any pilot, with the setting to reduce
and the most it could be; a request that clears the floor goes on to its pilot and the full estimate.
"""
from __future__ import annotations

import torch

from ..config import DecodeConfig
from . import pilot_cache
from .estimate import seconds


def pass_seconds(target, ids: torch.Tensor, cfg: DecodeConfig, now_s: float | None = None) -> float:
    """Seconds of one target pass at one row, at the low end of a pass timed now (``now_s``, else timed here:
    ``pilot_cache.pass_now``) divided by its slack: what a floor may assume of every pass."""
    return (pilot_cache.pass_now(target, ids, cfg) if now_s is None else now_s) / pilot_cache.SLACK


def most_tokens(cfg: DecodeConfig) -> int:
    """The most tokens one round of ``cfg`` can commit: its deepest chain of drafts and the bonus."""
    if cfg.tree is not None:
        return cfg.tree.levels + 1
    return (cfg.max_k if cfg.k_policy != "fixed" or cfg.draft_stop else cfg.k) + 1


def sweep_floor(pass_s: float, n: int, n_prompts: int, n_drafts: int, ks: list[int], repeats: int = 1) -> float:
    """The least a k sweep can take: per repeat and prompt, the baseline's n passes and, per draft and k, n / (k + 1)
    rounds of at least a pass."""
    return pass_s * n * n_prompts * repeats * (1 + n_drafts * sum(1 / (k + 1) for k in ks))


def configs_floor(pass_s: float, n: int, n_prompts: int, configs: list[DecodeConfig], repeats: int = 1) -> float:
    """The least a baseline and one run per config (a tree lab, a policy comparison) can take, per prompt and
    repeat."""
    return pass_s * n * n_prompts * repeats * (1 + sum(1 / most_tokens(c) for c in configs))


def refuse_below(floor_s: float, budget_s: float, what: str, reduce: str) -> None:
    """ValueError when even ``floor_s`` is over the budget: ``reduce`` says what to cut, and the most it could be."""
    if floor_s > budget_s:
        raise ValueError(f"{what} would take at least {seconds(floor_s)} s (its target passes alone, every draft "
                         f"accepted, on this machine as loaded now); this server runs at most {seconds(budget_s)} s per "
                         f"request (SPECVIZ_MAX_REQUEST_S): {reduce}")
