"""The tree lab: chains and token trees of one draft side by side, tokens per target pass and speed measured,
with the positional acceptance model beside the measurement.

    python -m specviz.labs.trees [--draft target+eagle+ngram-target] [--temperature 0] [--chains 4,6,8]
                                 [--trees 3,2,2,1 2,1,1,1,1,1 dynamic:10,8,3] [--repeats 2] [--threads 1]

Per prompt and repeat the autoregressive baseline and every setting run in turn (the order rotating), so that
machine noise falls on all alike; speedups are ratios of totals from the same run. "vs best chain" is each
setting's tokens/s over the fastest chain's, with a 90% interval from resampling the (prompt, repeat) cells in
pairs: a cell's two runs are seconds apart, so a slow phase of the machine falls on both. "tau predicted" is
``theory.expected_tree_tokens`` of the setting's trees from the per-(depth, rank) acceptance rates measured in
the same runs: exact in expectation for chains, and for trees as good as the independence it assumes.
"""
from __future__ import annotations

import argparse
import time
from dataclasses import replace

import numpy as np
import pandas as pd
import torch

from .. import theory
from ..config import DecodeConfig, TreeConfig
from ..decoder import speculative_generate
from ..models import DEFAULT_DRAFT, drafter_for
from ..trace import Counts
from .bench import common_args, target_and_prompts
from .sweep import baseline_run


def settings(chains: list[int], trees: list[TreeConfig], cfg: DecodeConfig) -> dict[str, DecodeConfig]:
    """name -> the run's config: "chain k=K" for each k, the tree's label for each tree."""
    out = {f"chain k={k}": replace(cfg, k=k, tree=None) for k in chains}
    return out | {f"tree {t.label}": replace(cfg, tree=t) for t in trees}


@torch.inference_mode()
def tree_lab(target, draft, prompts: list, chains: list[int], trees: list[TreeConfig], cfg: DecodeConfig,
             repeats: int = 1, check=None) -> pd.DataFrame:
    """One row per setting (and the baseline): nodes verified per round, tau measured and predicted, target
    passes per token, tokens/s and the speedup over the baseline. ``check()``, if given, runs before every run
    (a request's budget: it raises to stop)."""
    runs = {"autoregressive": None} | settings(chains, trees, cfg)
    counts = {name: Counts() for name in runs}
    seconds, traces, cells = dict.fromkeys(runs, 0.0), {name: [] for name in runs}, {name: [] for name in runs}
    for name, run_cfg in runs.items():  # warm-up: first calls allocate
        _run(target, draft, prompts[0], replace(run_cfg or cfg, max_new_tokens=4))
    for rep in range(repeats):
        for i, ids in enumerate(prompts):
            names = list(runs)
            shift = (rep + i) % len(names)
            for name in names[shift:] + names[:shift]:
                if check is not None:
                    check()
                t0 = time.perf_counter()
                trace = _run(target, draft, ids, replace(runs[name] or cfg, seed=cfg.seed + rep), auto=runs[name] is None)
                took = time.perf_counter() - t0
                seconds[name] += took
                run_counts = trace.counts()
                counts[name] += run_counts
                traces[name].append(trace)
                cells[name].append((run_counts.new_tokens, took))
    base = counts["autoregressive"].new_tokens / seconds["autoregressive"]
    df = pd.DataFrame([_row(name, counts[name], seconds[name], traces[name], base) for name in runs])
    chain_names = [n for n in runs if n.startswith("chain k=")]
    if not chain_names:
        return df
    best = max(chain_names, key=lambda n: counts[n].new_tokens / seconds[n])  # the fastest chain, as tokens/s says
    df = df.join(_versus_best_chain(df, cells, best))
    return _row_economics(df, best, [r for name in runs if runs[name] is not None for t in traces[name] for r in t.rounds])


def _row_economics(df: pd.DataFrame, best_name: str, rounds: list) -> pd.DataFrame:
    """What a verified row costs and what each setting's rows win: a least-squares line through every speculative
    round's target pass (seconds against rows: its nodes and the one pending token), kept as ``df.attrs["rows"]``
    (ms per row, ms at zero rows, rounds fitted, and the break-even: the tokens a row must win to pay for itself at
    the best chain's tokens/s), and per setting "tokens per extra row" against the best chain: (tau - its tau) /
    (nodes per round - its nodes per round)."""
    if len({r.proposed for r in rounds}) < 2:
        return df
    slope, intercept = np.polyfit([r.proposed + 1 for r in rounds], [r.target_s for r in rounds], 1)
    best = df.loc[df["setting"] == best_name].iloc[0]
    extra = df["nodes per round"] - best["nodes per round"]
    df["tokens per extra row"] = ((df["tau"] - best["tau"]) / extra).where(extra.abs() > 0.05)
    df.loc[df["setting"] == "autoregressive", "tokens per extra row"] = np.nan
    df.attrs["rows"] = {"ms per row": 1e3 * slope, "ms at zero rows": 1e3 * intercept, "rounds": len(rounds),
                        "break-even tokens per row": slope * best["tokens/s"], "best chain": best["setting"]}
    return df


def _versus_best_chain(df: pd.DataFrame, cells: dict[str, list[tuple[int, float]]], best: str) -> pd.DataFrame:
    """Each setting's tokens/s over the best chain's (ratios of totals, as the speedup column), with a bootstrap
    90% interval: 2000 resamples of the (prompt, repeat) cells, each cell's two runs kept together (seeded: the
    same cells give the same interval)."""
    def ratio(run: torch.Tensor, base: torch.Tensor) -> torch.Tensor:  # (..., cells, 2): tokens, seconds
        return run[..., 0].sum(-1) / run[..., 1].sum(-1) / (base[..., 0].sum(-1) / base[..., 1].sum(-1))

    base = torch.tensor(cells[best], dtype=torch.float64)
    picks = torch.randint(len(base), (2000, len(base)), generator=torch.Generator().manual_seed(0))
    rows = []
    for name in df["setting"]:
        run = torch.tensor(cells[name], dtype=torch.float64)
        lo, hi = torch.quantile(ratio(run[picks], base[picks]), torch.tensor([0.05, 0.95], dtype=torch.float64))
        rows.append({"vs best chain": float(ratio(run, base)), "vs best, 90% low": float(lo),
                     "vs best, 90% high": float(hi)})
    return pd.DataFrame(rows, index=df.index)


def _run(target, draft, ids, cfg, auto: bool = False):
    return baseline_run(target, ids, cfg) if auto else speculative_generate(target, draft, ids, cfg)


def _row(name: str, c: Counts, seconds: float, traces, base_tokens_per_s: float) -> dict:
    rounds = [r for t in traces for r in t.rounds]
    tokens_per_s = c.new_tokens / seconds if seconds else 0.0
    return {"setting": name, "nodes per round": c.drafted / c.rounds if c.rounds else 0.0, "tau": c.tau,
            "tau predicted": theory.predicted_tau(rounds) if c.drafted else None,
            "target passes per token": c.target_forwards_per_token,
            "tokens/s": tokens_per_s, "speedup": tokens_per_s / base_tokens_per_s if base_tokens_per_s else 0.0,
            **round_times(rounds)}


def round_times(rounds: list) -> dict[str, float]:
    """Where a round's time goes, in ms a round: drafting (a tree's sibling placement included), the target's
    verify pass (a tree's mask included) and the rest of the round (accept or walk, commit, keep, record)."""
    n = len(rounds) or 1
    draft, verify = sum(r.draft_s for r in rounds), sum(r.target_s for r in rounds)
    rest = sum(r.wall_s for r in rounds) - draft - verify
    return {"draft ms": 1e3 * draft / n, "verify ms": 1e3 * verify / n, "rest ms": 1e3 * rest / n}


def sibling_table(drafter) -> pd.DataFrame:
    """What the drafter's greedy chains with siblings have learnt (``Drafter.sibling_estimate``, from every such run
    so far): per source and doubt bin, the chain positions the walk reached, how many it rejected, and at how many
    of those the target's token was the draft's other choice (what a sibling there would have won)."""
    from ..trees.value import DOUBT_EDGES

    est, edges = drafter.sibling_estimate(), (0.0, *DOUBT_EDGES, 1.0)
    rows = []
    for key in sorted(est.reached):
        source, b = key
        reached, rejected, hits = est.reached[key], est.rejected.get(key, 0), round(est.hits.get(key, 0))
        rows.append({"source": source, "doubt": f"[{edges[b]:g}, {edges[b + 1]:g}{']' if b + 1 == len(edges) - 1 else ')'}",
                     "reached": reached, "rejected": rejected, "other choice right": hits,
                     "P(reject | reached)": rejected / reached, "P(right | rejected)": hits / rejected if rejected else None})
    return pd.DataFrame(rows)


@torch.inference_mode()
def keep_costs(target, context: int = 128, path: int = 4, nodes: int = 16, reps: int = 50) -> dict[str, float]:
    """Milliseconds to keep a tree's accepted path in the target's cache, both ways: gathering the path's cached
    keys and values in place (what the decoder does) and cropping to the prefix, then feeding the path again."""
    from ..runtime.lm import CachedLM

    lm = CachedLM(target, trees=True)
    ids = [i % lm.vocab_size for i in range(1, context + 1)]
    parents = [-1] + list(range(path - 1)) + [-1] * (nodes - path)
    times = {"gather": [], "crop and re-feed": []}
    for _ in range(reps):
        for way, out in times.items():
            lm.rollback(0)
            lm.feed(ids)
            lm.tree_forward([], list(range(nodes)), parents)
            t0 = time.perf_counter()
            if way == "gather":
                lm.keep_path(list(range(path)), None)
            else:
                lm.drop_tree()
                lm.feed(list(range(path)))
            out.append(time.perf_counter() - t0)
    return {way: 1e3 * sorted(t)[len(t) // 2] for way, t in times.items()}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    common_args(ap, max_new_tokens=64, repeats=2, threads=1)
    ap.add_argument("--draft", default=DEFAULT_DRAFT)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--chains", default="4,6,8", help="chain k values, comma-separated")
    ap.add_argument("--trees", nargs="+", default=["3,2,2,1", "2,1,1,1,1,1", "dynamic:10,8,3", "dynamic:12,10,2,0.3"],
                    help='static shapes ("3,2,2,1"), dynamic trees ("dynamic:BUDGET,DEPTH,WIDTH[,THRESHOLD]") or chains '
                         'with siblings ("chain:DEPTH,SIBLINGS[,THRESHOLD]")')
    args = ap.parse_args(argv)
    target, _, prompts = target_and_prompts(args)
    cfg = DecodeConfig(temperature=args.temperature, max_new_tokens=args.max_new_tokens)
    chains = [int(k) for k in args.chains.split(",") if k]
    trees = [TreeConfig.parse(t) for t in args.trees]
    print(f"target={args.target} draft={args.draft} temperature={args.temperature} max_new_tokens="
          f"{args.max_new_tokens} repeats={args.repeats} prompts={len(prompts)} threads={torch.get_num_threads()}")
    drafter = drafter_for(target, args.target, args.draft, args.device)
    df = tree_lab(target, drafter, prompts, chains, trees, cfg, args.repeats)
    print(df.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    if rows := df.attrs.get("rows"):
        print(f"a verified row costs {rows['ms per row']:.2f} ms (least squares over {rows['rounds']} rounds: a target "
              f"pass = {rows['ms at zero rows']:.1f} ms + rows x {rows['ms per row']:.2f} ms); at {rows['best chain']}'s "
              f"tokens/s a row pays where it wins more than {rows['break-even tokens per row']:.3f} tokens")
    if cfg.greedy and any(t.chained for t in trees) and not (sib := sibling_table(drafter)).empty:
        print("where the greedy chains' tokens were rejected, and how often the draft's other choice was the target's "
              "(every chain-with-siblings round above):")
        print(sib.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    costs = keep_costs(target)
    print("keeping a 4-node path of a 16-node tree in the target's cache (median ms): "
          + ", ".join(f"{way} {ms:.3f}" for way, ms in costs.items()))


if __name__ == "__main__":
    main()
