"""The acceptance-rule lab: the same prompts, k and seed decoded under every rule engines use (``specviz.rules``),
what each costs in acceptance and what it costs in truth. One row per rule (a ``+argmax`` suffix: the draft takes its
argmax while the target samples, ``DecodeConfig.draft_greedy``) and temperature. Columns:
  acceptance       accepted / drafted, the decoder's own count replaying the rule
  alpha            accepted / verified drafts: how often a verified draft passed
  alpha_closed     the rule's closed-form P(accept) averaged over those same positions (their recorded p and q rows)
  tau, tau_closed  tokens per round, measured and (1 - a^(k+1)) / (1 - a) at alpha_closed
  tv_closed        mean TV(law, p) over those positions: what the rule changes per token (0 for lossless rules)
  mc_*             the losslessness lab's harness at one fixed context (the first prompt's next token): ``draws``
                   accept steps; mc_tv = TV(emitted, p) beside mc_tv_closed = TV(law, p) and mc_tv_noise =
                   TV(emitted, law), the sampling floor (large where p is flat over a large vocabulary); chi-square
                   p-values against p (mc_p_vs_p: lossless rules pass, lossy ones fail by mc_tv_closed) and against
                   the closed-form law (mc_p_vs_law: every rule passes)
  forwards_per_token, speedup, speedup_closed   target passes per token (host-independent); tau / (k c + v) and
                   Leviathan's prediction at alpha_closed, with c and v measured once over all the lab's runs against
                   the baselines (a round costs the same whatever the rule decides; columns c and v)
  text, target_text   the first prompt's continuation under the rule, and the target's own sample (same seed)
"""
from __future__ import annotations

import argparse
from dataclasses import replace

import numpy as np
import pandas as pd
import torch

from .. import theory
from ..config import DecodeConfig
from ..decoder import autoregressive_generate, speculative_generate
from ..rules import emit_many, onehot_like, rule_of, run_closed_forms, total_variation
from ..trace import Counts
from .lossless import chi2_pvalue, next_token_dists

VARIANTS = ("leviathan", "leviathan+argmax", "point_mass", "exact_match", "exact_match+argmax", "typical",
            "optimistic", "lenient")
TEMPERATURES = (0.0, 0.3, 0.7, 1.0, 1.5)
COLUMNS = ["rule", "lossless", "drafting", "temperature", "acceptance", "alpha", "alpha_closed", "tau", "tau_closed",
           "tv_closed", "mc_tv", "mc_tv_closed", "mc_tv_noise", "mc_p_vs_p", "mc_p_vs_law", "forwards_per_token",
           "speedup", "speedup_closed", "c", "v", "text", "target_text"]
MC_COLUMNS = ["mc_tv", "mc_tv_closed", "mc_tv_noise", "mc_p_vs_p", "mc_p_vs_law"]
MIN_DRAWS, MAX_DRAWS = 100, 100_000  # the fixed-context check's accept steps: 10^5 take about a second on 2 cores


def checked_draws(draws) -> int:
    """The fixed-context check's number of accept steps, a whole number in [MIN_DRAWS, MAX_DRAWS]."""
    if isinstance(draws, bool) or not isinstance(draws, (int, np.integer)) or not MIN_DRAWS <= draws <= MAX_DRAWS:
        raise ValueError(f"draws (accept steps of the fixed-context check) must be a whole number from {MIN_DRAWS} "
                         f"to {MAX_DRAWS:,}, got {draws!r}")
    return int(draws)


def variant_config(cfg: DecodeConfig, variant: str) -> DecodeConfig:
    """cfg under a VARIANTS name: "rule" or "rule+argmax" (ValueError naming the variants otherwise)."""
    rule, plus, drafting = variant.partition("+")
    if plus and drafting != "argmax":
        raise ValueError(f"a rule variant is a rule name or rule+argmax (one of {', '.join(VARIANTS)}), got {variant!r}")
    return replace(cfg, rule=rule, draft_greedy=bool(plus))


def fixed_context_check(d, cfg: DecodeConfig, draws: int) -> dict:
    """The Monte Carlo check at one context (``lossless.Dists`` d): ``draws`` accept steps under cfg's rule."""
    rule = rule_of(cfg)
    q = onehot_like(d.q, d.q.argmax()) if cfg.draft_greedy else d.q
    out = emit_many(rule, d.p, q, draws, torch.Generator().manual_seed(cfg.seed))
    counts = np.bincount(out.numpy(), minlength=len(d.p))
    law, empirical = rule.law(d.p[None], q[None])[0], torch.from_numpy(counts / draws)
    return dict(mc_tv=float(total_variation(empirical, d.p)), mc_tv_closed=float(total_variation(law, d.p)),
                mc_tv_noise=float(total_variation(empirical, law)), mc_p_vs_p=chi2_pvalue(counts, d.p.numpy()),
                mc_p_vs_law=chi2_pvalue(counts, law.numpy()))


def rule_row(traces: list, decode) -> tuple[dict, Counts]:
    """One row's host-independent numbers from a rule's runs (one per prompt), and their summed Counts."""
    counts, rounds = sum((t.counts() for t in traces), Counts()), [r for t in traces for r in t.rounds]
    alpha_closed, tv = run_closed_forms(rounds)
    alpha_closed = min(counts.alpha if alpha_closed is None else alpha_closed, 1.0)
    row = dict(acceptance=counts.acceptance_rate, alpha=counts.accepted / counts.beta_n if counts.beta_n else 0.0,
               alpha_closed=alpha_closed, tau=counts.tau, tau_closed=theory.expected_tokens(alpha_closed,
                                                                                          theory.mean_k(counts)),
               tv_closed=tv or 0.0, forwards_per_token=counts.target_forwards_per_token, text=decode(traces[0].new_tokens))
    return row, counts


def add_speedups(rows: list[dict], counts: list[Counts], bases: Counts) -> None:
    """speedup = tau / (k c + v) and Leviathan's prediction at alpha_closed, per row, with one c and v measured over
    every run (``theory.cost_ratio`` and ``verify_cost`` against the baselines' one-token forward)."""
    spec = sum(counts, Counts())
    c, v = theory.cost_ratio(spec, bases), theory.verify_cost(spec, bases)
    for row, n in zip(rows, counts):
        k = theory.mean_k(n)
        row.update(c=c, v=v, speedup=row["tau"] / (k * c + v),
                   speedup_closed=theory.expected_speedup(row["alpha_closed"], k, c, v))


def rules_lab(target, draft, prompts: list, temperatures=TEMPERATURES, cfg: DecodeConfig | None = None,
              variants=VARIANTS, draws: int = 4000, tokenizer=None, check=None) -> pd.DataFrame:
    """One row per rule variant and temperature (COLUMNS), every run from the same prompts (ids (1, n) each), k and
    seed; ``check()`` before each run (a request's budget). ``tokenizer`` decodes the texts (else token ids)."""
    cfg, draws = cfg or DecodeConfig(k=4, max_new_tokens=32), checked_draws(draws)  # before any model work
    decode = (lambda ids: tokenizer.decode(ids)) if tokenizer is not None else (lambda ids: " ".join(map(str, ids)))
    configs = [variant_config(cfg, v) for v in variants]  # bad names fail before any model work
    _run(None, speculative_generate, target, draft, prompts[0], replace(configs[0], max_new_tokens=4))  # warm up
    rows, counts, bases = [], [], Counts()
    for t in temperatures:
        at_t = replace(cfg, temperature=float(t))
        runs = [_run(check, autoregressive_generate, target, ids, at_t) for ids in prompts]
        bases += sum((b.counts() for b in runs), Counts())
        d = None if at_t.greedy else next_token_dists(target, draft, prompts[0], at_t)
        for variant, vcfg in zip(variants, configs):
            run_cfg = replace(vcfg, temperature=float(t))
            row, n = rule_row([_run(check, speculative_generate, target, draft, ids, run_cfg) for ids in prompts],
                              decode)
            mc = fixed_context_check(d, run_cfg, draws) if d is not None else dict.fromkeys(MC_COLUMNS, np.nan)
            rows.append(dict(rule=variant, lossless=rule_of(run_cfg).lossless, temperature=float(t),
                             drafting="argmax" if run_cfg.draft_greedy or run_cfg.greedy else "sampled",
                             **row, **mc, target_text=decode(runs[0].new_tokens)))
            counts.append(n)
    add_speedups(rows, counts, bases)
    return pd.DataFrame(rows, columns=COLUMNS)


def _run(check, fn, *args):
    if check is not None:
        check()
    return fn(*args)


def main(argv=None) -> None:
    from ..config import EXAMPLE_PROMPTS
    from ..models import DEFAULT_MODEL_DRAFT, DEFAULT_TARGET, load_pair

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default=DEFAULT_TARGET)
    ap.add_argument("--draft", default=DEFAULT_MODEL_DRAFT)
    ap.add_argument("--temperatures", default="0,0.3,0.7,1.0,1.5", help="comma-separated")
    ap.add_argument("--rules", default=",".join(VARIANTS), help="comma-separated: a rule or rule+argmax")
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--prompts", type=int, default=3, help="how many of the example prompts")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--draws", type=int, default=4000, help="accept steps of the fixed-context check")
    args = ap.parse_args(argv)
    target, draft, tok = load_pair(args.target, args.draft)
    prompts = [tok(p, return_tensors="pt").input_ids for p in EXAMPLE_PROMPTS[: args.prompts]]
    cfg = DecodeConfig(k=args.k, max_new_tokens=args.max_new_tokens, seed=args.seed)
    df = rules_lab(target, draft, prompts, [float(t) for t in args.temperatures.split(",") if t], cfg,
                   [v for v in args.rules.split(",") if v], args.draws, tok)
    print(f"target={args.target} draft={args.draft} k={args.k} max_new_tokens={args.max_new_tokens} "
          f"prompts={len(prompts)} seed={args.seed}")
    with pd.option_context("display.width", 250, "display.max_columns", 30):
        print(df.drop(columns=["text", "target_text"]).to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    for t, g in df.groupby("temperature"):
        print(f"\nT = {t:g}, the target's own sample: {g.target_text.iloc[0]!r}")
        for _, row in g.iterrows():
            print(f"  {row.rule:>20}: {row.text!r}")


if __name__ == "__main__":
    main()
