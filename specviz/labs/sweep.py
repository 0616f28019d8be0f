"""Acceptance and speedup against k, measured beside the autoregressive baseline in one run.

For each repeat and prompt, the baseline and every (draft, k) run back to back with the same seed,
so machine noise hits both alike. ``sweep`` returns one row per run; ``summarize`` aggregates per
(draft, k) and puts Leviathan's predictions (from the alpha and cost ratio c measured in the same
run) beside the measurements.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import replace

import pandas as pd
from tqdm.auto import tqdm

from ..config import DecodeConfig
from ..decoder import Decoding, autoregressive_generate, speculative_generate
from ..runtime.lm import baseline_path
from ..theory import expected_speedup, expected_tokens

BASELINE = "autoregressive"  # the label of the autoregressive run in every lab's tables


def baseline_run(target, ids, cfg: DecodeConfig, **names):
    """The autoregressive baseline every speedup divides by, on the fastest one-row forward here
    (``runtime.lm.baseline_path``: the default or llama.cpp's forward, whichever was timed faster here);
    its trace's ``forward`` says which. ``names``: Decoding's target_name."""
    one_row = replace(cfg, tree=None)  # one token a pass: nothing to verify, no tree
    return Decoding(target, None, ids, one_row, forward=baseline_path(target), **names).run()


def run_row(trace, **labels) -> dict:
    """The additive counts of one run (``Trace.counts``) as a table row, so that aggregates are ratios of sums."""
    c = trace.counts()
    return labels | dict(new_tokens=c.new_tokens, rounds=c.rounds, passes=c.target_passes, drafted=c.drafted,
                         accepted=c.accepted, beta_sum=c.beta_sum, beta_n=c.beta_n, seconds=c.total_s,
                         draft_s=c.draft_s, target_s=c.target_s)


def iter_sweep(target, drafts: dict, prompts: list, ks: Iterable[int] = range(1, 9), cfg: DecodeConfig | None = None,
               repeats: int = 1) -> Iterator[tuple[dict, object]]:
    """Every run as (run_row, trace) as soon as it finishes: per repeat and prompt, the baseline
    (draft "", k 0, trace None) then every (draft, k) with a fixed k."""
    cfg, ks = cfg or DecodeConfig(), list(ks)
    warm_up(target, drafts, prompts[0], cfg)
    for rep in range(repeats):
        for i, ids in enumerate(prompts):
            run_cfg = replace(cfg, seed=cfg.seed + rep)
            yield run_row(baseline_run(target, ids, run_cfg), draft="", k=0, prompt=i, repeat=rep), None
            for name, draft in drafts.items():
                for k in ks:
                    trace = speculative_generate(target, draft, ids, replace(run_cfg, k=k, k_policy="fixed"))
                    yield run_row(trace, draft=name, k=k, prompt=i, repeat=rep), trace


def warm_up(target, drafts: dict, ids, cfg: DecodeConfig) -> None:
    """A few untimed tokens through every model first: the first calls of a process allocate and would
    otherwise slow down whichever run comes first (the baseline), inflating every speedup."""
    short = replace(cfg, max_new_tokens=min(4, cfg.max_new_tokens), k=1, k_policy="fixed", record=False)
    autoregressive_generate(target, ids, short)
    baseline_run(target, ids, short)  # the baseline's own forward, where it is another (llama.cpp's)
    for draft in drafts.values():
        speculative_generate(target, draft, ids, short)


def sweep(target, drafts: dict, prompts: list, ks: Iterable[int] = range(1, 9), cfg: DecodeConfig | None = None,
          repeats: int = 1, progress: bool = True) -> pd.DataFrame:
    """One row per run: draft ("" for the baseline), k (0 for the baseline), prompt, repeat and counts."""
    ks = list(ks)
    total = repeats * len(prompts) * (1 + len(drafts) * len(ks))
    runs = iter_sweep(target, drafts, prompts, ks, cfg, repeats)
    return pd.DataFrame([row for row, _ in tqdm(runs, total=total, disable=not progress, desc="sweep")])


def baseline_costs(base: pd.DataFrame) -> tuple[float, float]:
    """From the baseline's run_rows: (its tokens/s, the time of one one-token target forward)."""
    return base.new_tokens.sum() / base.seconds.sum(), base.target_s.sum() / base.passes.sum()


def speedup_spread(runs: pd.DataFrame, base: pd.DataFrame, keys: list[str], pair: list[str]) -> pd.DataFrame:
    """Per group (``keys``): the lowest and highest speedup of one run over the baseline run it was paired with
    (the same ``pair`` columns: prompt, repeat), i.e. how far a single measurement strays from the pooled one."""
    both = runs.merge(base[pair + ["new_tokens", "seconds"]], on=pair, suffixes=("", "_base"))
    both["one"] = (both.new_tokens / both.seconds) / (both.new_tokens_base / both.seconds_base)
    return both.groupby(keys, sort=False)["one"].agg(speedup_min="min", speedup_max="max").reset_index()


def summarize(runs: pd.DataFrame) -> pd.DataFrame:
    """Per (draft, k): acceptance, alpha, tau, tokens/s, measured speedup, c and v (a draft step and a verify
    pass, each over the baseline's one-token forward), and the theory beside them."""
    base = runs[runs.draft == ""]
    base_tps, target_step = baseline_costs(base)
    g = runs[runs.draft != ""].groupby(["draft", "k"], sort=False).sum(numeric_only=True).reset_index()
    out = pd.DataFrame({"draft": g.draft, "k": g.k})
    out["acceptance_rate"] = g.accepted / g.drafted
    out["alpha"] = (g.beta_sum / g.beta_n).where(g.beta_n > 0, 0.0)  # nothing verified (nothing drafted): 0
    out["tau"] = g.new_tokens / g.rounds
    out["tokens_per_s"] = g.new_tokens / g.seconds
    out["baseline_tokens_per_s"] = base_tps
    out["speedup"] = out.tokens_per_s / base_tps
    if {"prompt", "repeat"} <= set(runs.columns):
        spread = speedup_spread(runs[runs.draft != ""], base, ["draft", "k"], ["prompt", "repeat"])
        out = out.merge(spread, on=["draft", "k"], how="left")
    out["c"] = (g.draft_s / g.drafted) / target_step
    out["v"] = (g.target_s / g.passes) / target_step  # a verify pass over one one-token forward
    out["tau_theory"] = [expected_tokens(min(a, 1.0), int(k)) for a, k in zip(out.alpha, out.k)]
    out["speedup_theory"] = [expected_speedup(min(a, 1.0), int(k), c, v)
                             for a, k, c, v in zip(out.alpha, out.k, out.c, out.v)]
    return out


def best_k(summary: pd.DataFrame, column: str = "speedup") -> pd.DataFrame:
    """The row with the highest ``column`` for each draft."""
    return summary.loc[summary.groupby("draft", sort=False)[column].idxmax()].reset_index(drop=True)


# -- per-position acceptance ----------------------------------------------------------------------------
def position_rows(trace, **labels) -> list[dict]:
    """Additive per-position counts of one run: at draft position i (1-based), how many rounds drafted
    a token there and how many of those were accepted (position i needs 1..i-1 accepted too)."""
    depth = max((len(r.drafted) for r in trace.rounds), default=0)
    return [labels | dict(position=i + 1, drafted=sum(len(r.drafted) > i for r in trace.rounds),
                          reached=sum(len(r.drafted) > i and r.n_accepted >= i for r in trace.rounds),
                          accepted=sum(r.n_accepted > i for r in trace.rounds)) for i in range(depth)]


def per_position(positions: pd.DataFrame) -> pd.DataFrame:
    """Per (draft, k, position): drafted, reached (every earlier draft accepted), accepted; the rate accepted /
    drafted (falls with position by construction) and the conditional rate accepted / reached (the draft's quality
    at that depth)."""
    cols = [c for c in ("drafted", "reached", "accepted") if c in positions]
    g = positions.groupby(["draft", "k", "position"], sort=False)[cols].sum().reset_index()
    g["rate"] = g.accepted / g.drafted
    if "reached" in g:
        g["conditional"] = (g.accepted / g.reached).where(g.reached > 0)
    return g
