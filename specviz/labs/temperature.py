"""The temperature lab: how acceptance changes with temperature, measured by the decoder beside alpha computed
exactly from the two models' distributions.

Notation: p target, q draft, both processed by the same temperature (and top-k / top-p); beta = sum_v min(p, q).
At T -> 0 both are point masses on their argmax, so beta is 1 where the argmaxes agree and 0 elsewhere; as T grows
both flatten, and as T -> infinity both tend to the uniform law and beta to 1. In between beta can go either way: a
context where the argmaxes differ gains overlap as both flatten, one where they agree can lose it, so a pair's curve
over 0-2 is what its runs measure, not what the limit says. Columns:
  acceptance     accepted / drafted in speculative decoding at that temperature (the decoder's own count)
  drafted        the drafts that count is over: its noise is about sqrt(a (1 - a) / drafted)
  alpha_visited  mean beta over the positions the decoder verified (exact at each; the contexts it happened to meet)
  alpha_fixed    mean beta over one fixed set of contexts (the target's greedy continuations of the prompts), the
                 same for every temperature: how the overlap of p and q alone changes with T
"""
from __future__ import annotations

from dataclasses import replace

import pandas as pd
import torch

from ..config import DecodeConfig
from ..decoder import autoregressive_generate, speculative_generate
from ..drafts.drafter import Drafter, draft_q
from ..sampling import logits_to_probs

COLUMNS = ["temperature", "acceptance", "drafted", "alpha_visited", "alpha_fixed", "tau", "tokens_per_s"]


@torch.inference_mode()
def fixed_logits(target, draft, prompts: list, tokens: int) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(target logits, draft logits) at every position of the target's greedy continuation of each prompt,
    (n, V) each: one forward per model per prompt. None for a model-free draft (no logits to compare)."""
    if isinstance(draft, Drafter):
        return None
    p_rows, q_rows = [], []
    for ids in prompts:
        cont = autoregressive_generate(target, ids, DecodeConfig(temperature=0, max_new_tokens=tokens)).new_tokens
        seq = torch.cat([ids[0], torch.tensor(cont, dtype=torch.long)])[None].to(ids.device)
        start = ids.shape[1] - 1
        p_rows.append(target(seq).logits[0, start:-1])
        q_rows.append(draft(seq).logits[0, start:-1])
    return torch.cat(p_rows), torch.cat(q_rows)


def overlap(logits: tuple[torch.Tensor, torch.Tensor], cfg: DecodeConfig) -> float:
    """Mean sum_v min(p, q) over the fixed contexts at cfg's temperature (greedy: argmax agreement)."""
    p_logits, q_logits = logits
    if cfg.greedy:
        return float((p_logits.argmax(-1) == q_logits[..., : p_logits.shape[-1]].argmax(-1)).double().mean())
    p = logits_to_probs(p_logits, cfg.temperature, cfg.top_k, cfg.top_p)
    q = draft_q(q_logits, cfg, p.shape[-1])
    return float(torch.minimum(p, q.to(p.dtype)).sum(-1).mean())


def temperature_lab(target, draft, prompts: list, temperatures: list[float], cfg: DecodeConfig | None = None,
                    check=None) -> pd.DataFrame:
    """One row per temperature (COLUMNS), every run with the same prompts, k and seed; ``check()`` before each
    run (a request's budget)."""
    cfg = cfg or DecodeConfig(k=4, max_new_tokens=32)
    logits = fixed_logits(target, draft, prompts, cfg.max_new_tokens)
    rows = []
    for t in temperatures:
        run_cfg = replace(cfg, temperature=float(t))
        counts = None
        for ids in prompts:
            if check is not None:
                check()
            c = speculative_generate(target, draft, ids, run_cfg).counts()
            counts = c if counts is None else counts + c
        rows.append(dict(temperature=float(t), acceptance=counts.acceptance_rate, drafted=counts.drafted,
                         alpha_visited=counts.alpha,
                         alpha_fixed=overlap(logits, run_cfg) if logits is not None else float("nan"),
                         tau=counts.tau, tokens_per_s=counts.tokens_per_s))
    return pd.DataFrame(rows, columns=COLUMNS)
