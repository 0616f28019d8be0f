"""How long will a sweep take? A short timed pilot, then tau(alpha, k) rounds per run, with a stated range.

Notation: alpha = E[beta] (mean acceptance probability), tau = tokens per round (``specviz.theory``).
The pilot runs after an untimed warm-up (first calls allocate and pack weights), times every run from outside
(set-up and prefill included, as a sweep's runs are), and keeps the spread of its rounds' times: the range
prices the same work at the pilot's slow rounds and at alpha's interval, so a busy machine states a wider one.
A pair's pilot is measured once (per prompt and sampling settings) and remembered (``pilot_cache``): later estimates,
and the budget gate built on them, price the same costs scaled by a few target passes timed now (its own passes
over those timed beside the pilot), at once and without a pilot;
the tree lab refreshes its entry with what its real runs measured.
"""
from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, field, replace

import torch

from ..config import DecodeConfig
from ..decoder import autoregressive_generate, speculative_generate
from ..theory import expected_tokens
from . import pilot_cache
from .sweep import warm_up

JITTER_S = 0.25  # either end's allowance for a scheduler's stalls (in the pilot or the run): no closer than this
SLOW_QUANTILE = 0.9  # the range's slow end prices every round at this quantile of the pilot's round times


@dataclass(frozen=True)
class Estimate:
    """Seconds: the likely duration and the range it should fall in on the load the pilot saw."""

    likely: float
    low: float
    high: float

    def __str__(self) -> str:
        return f"≈ {seconds(self.likely)} s ({seconds(self.low)}–{seconds(self.high)} s)"


def seconds(x: float) -> str:
    """Seconds to the precision that matters: 0.42, 4.2, 42."""
    return f"{x:.2f}" if x < 1 else f"{x:.1f}" if x < 10 else f"{x:.0f}"


@dataclass(frozen=True)
class Costs:
    """From a short pilot run: seconds per baseline token, and per draft the seconds of a round at the
    smallest and largest k and the acceptance (alpha) it showed; ``run_s``: one run's set-up and prefill;
    ``spread``: the pilot's slow rounds over its typical ones (1.0 on a steady machine); ``alpha_se``: alpha's
    standard error per draft (from the drafts the pilot verified); ``slack``: how far either way a remembered
    price, scaled to the load now, may be off (1.0 for a pilot just run)."""

    token_s: float
    k_lo: int
    k_hi: int
    round_s: dict  # draft name -> (seconds per round at k_lo, at k_hi)
    alpha: dict  # draft name -> alpha in the pilot
    run_s: float = 0.0
    spread: float = 1.0
    alpha_se: dict = field(default_factory=dict)
    slack: float = 1.0

    def round(self, name: str, k: int) -> float:
        """Seconds of one round with k drafts, interpolated between the two pilot runs."""
        lo, hi = self.round_s[name]
        return lo + (hi - lo) * (k - self.k_lo) / max(self.k_hi - self.k_lo, 1)


def measure_costs(target, drafts: dict, ids: torch.Tensor, ks: list[int], cfg: DecodeConfig,
                  tokens: int = 12, now_s: float | None = None) -> Costs:
    """A pilot at ``ids``, after an untimed warm-up: ``tokens`` autoregressive tokens, and per draft a run at the
    smallest and the largest k (everything the real runs do, timed as they are). A pilot of the same pair, prompt,
    sampling and ks measured before is not run again: its costs are scaled by ``now_s`` (a target pass timed now,
    ``pilot_cache.pass_now``; timed here if not given) over the pass timed beside them."""
    key = ("sweep", pilot_cache.identity(target), tuple((n, pilot_cache.identity(d)) for n, d in drafts.items()),
           pilot_cache.prompt_key(ids), _sampling(cfg), min(ks), max(ks), tokens, torch.get_num_threads())
    now_s = pilot_cache.pass_now(target, ids, cfg) if now_s is None else now_s
    if (hit := pilot_cache.get(key, (target, *drafts.values()), now_s)) is not None:
        costs, scale = hit
        return replace(costs, token_s=costs.token_s * scale, run_s=costs.run_s * scale, slack=pilot_cache.slack(scale),
                       round_s={n: (lo * scale, hi * scale) for n, (lo, hi) in costs.round_s.items()})
    costs = _pilot(target, drafts, ids, ks, replace(cfg, max_new_tokens=tokens, k_policy="fixed"))
    pilot_cache.put(key, costs, (target, *drafts.values()), _beside(now_s, target, ids, cfg))
    return costs


def _beside(before_s: float, target, ids: torch.Tensor, cfg: DecodeConfig) -> float:
    """The pass price a pilot is remembered with: the mean of passes timed just before it and just after it, so a
    load that moved while it ran falls on both sides."""
    return (before_s + pilot_cache.pass_now(target, ids, cfg)) / 2


def _sampling(cfg: DecodeConfig) -> tuple:
    return cfg.temperature, cfg.top_k, cfg.top_p, cfg.seed, cfg.rule, cfg.tree


def _pilot(target, drafts: dict, ids: torch.Tensor, ks: list[int], pilot: DecodeConfig) -> Costs:
    warm_up(target, drafts, ids, pilot)
    base, base_wall = _timed(autoregressive_generate, target, ids, pilot)
    overheads, ratios = [base_wall - sum(r.wall_s for r in base.rounds)], _ratios(base)
    round_s, alpha, alpha_se = {}, {}, {}
    for name, draft in drafts.items():
        runs = [_timed(speculative_generate, target, draft, ids, replace(pilot, k=k)) for k in (min(ks), max(ks))]
        round_s[name] = tuple(statistics.median([r.wall_s for r in t.rounds] or [0.0]) for t, _ in runs)
        overheads += [wall - sum(r.wall_s for r in t.rounds) for t, wall in runs]
        ratios += [x for t, _ in runs for x in _ratios(t)]
        counts = sum(t.counts() for t, _ in runs)
        alpha[name] = min(counts.alpha, 1.0)
        alpha_se[name] = math.sqrt(alpha[name] * (1 - alpha[name]) / max(counts.drafted, 1))
    spread = statistics.quantiles(ratios, n=10)[int(SLOW_QUANTILE * 10) - 1] if len(ratios) >= 2 else 1.0
    token_s = statistics.median([r.wall_s for r in base.rounds[1:]] or [base.total_s / max(len(base.new_tokens), 1)])
    return Costs(token_s, min(ks), max(ks), round_s, alpha, statistics.median(overheads), max(spread, 1.0), alpha_se)


def _timed(fn, *args):
    start = time.perf_counter()
    trace = fn(*args)
    return trace, time.perf_counter() - start


def _ratios(trace) -> list[float]:
    """Each round's wall time over the run's median round (the first round, the prefill's, left out)."""
    walls = [r.wall_s for r in trace.rounds[1:]]
    mid = statistics.median(walls) if walls else 0.0
    return [w / mid for w in walls] if mid > 0 else []


def estimate_seconds(costs: Costs, n_prompts: int, ks: list[int], max_new_tokens: int, alpha: float | None = None,
                     repeats: int = 1, slow: float = 1.0) -> float:
    """Predicted wall time of a sweep: per prompt, the baseline plus, per (draft, k), n / tau(alpha, k) rounds
    and each run's set-up. ``alpha`` None uses each draft's pilot alpha; a float sets every draft's; a dict, per
    draft. ``slow`` scales every round's time (the range's slow end)."""
    n = max_new_tokens
    total = n * costs.token_s * slow + costs.run_s
    for name in costs.round_s:
        a = alpha.get(name, costs.alpha[name]) if isinstance(alpha, dict) else costs.alpha[name] if alpha is None \
            else alpha
        total += sum(n / expected_tokens(a, k) * costs.round(name, k) * slow + costs.run_s for k in ks)
    return total * n_prompts * repeats


def sweep_estimate(costs: Costs, n_prompts: int, ks: list[int], max_new_tokens: int, repeats: int = 1) -> Estimate:
    """The likely duration of a sweep and its range: fast at alpha's upper bound (2 standard errors) and the
    pilot's typical rounds, slow at alpha's lower bound and the pilot's slow rounds (``Costs.spread``)."""
    shift = {name: 2 * costs.alpha_se.get(name, 0.0) for name in costs.alpha}
    fast = {name: min(a + shift[name], 1.0) for name, a in costs.alpha.items()}
    slow = {name: max(a - shift[name], 0.0) for name, a in costs.alpha.items()}
    args = (n_prompts, ks, max_new_tokens)
    warm = (1 + len(costs.round_s)) * (costs.run_s + 4 * costs.token_s)  # iter_sweep's warm-up: 4 tokens a model
    return Estimate(warm + estimate_seconds(costs, *args, None, repeats),
                    max(0.0, (warm + estimate_seconds(costs, *args, fast, repeats)) / costs.slack - JITTER_S),
                    (warm * costs.spread + estimate_seconds(costs, *args, slow, repeats, slow=costs.spread)) * costs.slack
                    + JITTER_S)


def fitting(estimate_of, value: int, lowest: int, budget_s: float) -> int | None:
    """The largest setting in [lowest, value] whose estimate (``estimate_of(setting)``: seconds) fits the budget,
    None if even the lowest does not: what a refusal tells the user to reduce a setting to."""
    if estimate_of(lowest) > budget_s:
        return None
    lo, hi = lowest, value
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if estimate_of(mid) <= budget_s else (lo, mid - 1)
    return lo


def estimate_policy_seconds(costs: Costs, name: str, n_prompts: int, configs: dict, max_new_tokens: int,
                            alpha: float | None = None, slow: float = 1.0) -> float:
    """Predicted wall time of the k-policy comparison with draft ``name``: per prompt, the baseline plus one run
    per config (an adaptive policy priced at its starting k, a confidence stop at its largest k: upper bounds)."""
    n, a = max_new_tokens, costs.alpha[name] if alpha is None else alpha
    total = n * costs.token_s * slow + costs.run_s
    for cfg in configs.values():
        k = cfg.max_k if cfg.draft_stop else cfg.k
        total += n / expected_tokens(a, k) * max(costs.round(name, k), 0.0) * slow + costs.run_s
    return total * n_prompts


def policy_estimate(costs: Costs, name: str, n_prompts: int, configs: dict, max_new_tokens: int) -> Estimate:
    """``sweep_estimate``'s range for the k-policy comparison."""
    a, shift = costs.alpha[name], 2 * costs.alpha_se.get(name, 0.0)
    args = (name, n_prompts, configs, max_new_tokens)
    return Estimate(estimate_policy_seconds(costs, *args),
                    max(0.0, estimate_policy_seconds(costs, *args, min(a + shift, 1.0)) / costs.slack - JITTER_S),
                    estimate_policy_seconds(costs, *args, max(a - shift, 0.0), slow=costs.spread) * costs.slack
                    + JITTER_S)


def sweep_runs(n_prompts: int, n_drafts: int, ks: list[int], repeats: int = 1) -> int:
    """The runs a sweep makes: per repeat and prompt, the baseline and every (draft, k)."""
    return n_prompts * repeats * (1 + n_drafts * len(ks))


def policy_runs(n_prompts: int, n_configs: int) -> int:
    """The runs a k-policy comparison makes: per prompt, the baseline and every config."""
    return n_prompts * (1 + n_configs)


# -- the tree lab: rounds priced by the rows they verify and the draft passes they make -------------------------
@dataclass(frozen=True)
class TreeCosts:
    """From a short pilot: seconds of a baseline token (the mean of two baseline pilots, one before and one after
    the speculative one, so a drift in the load falls on both sides) and, per token, the speculative pilot's time
    over the baseline's (``ratio``: the setting with the most rows, the costliest per round on a CPU); a run's
    set-up and prefill; the pilot's slow rounds over its typical ones; ``slack`` as ``Costs.slack``."""

    token_s: float
    ratio: float
    run_s: float
    spread: float = 1.0
    slack: float = 1.0


def most_rows(configs: list[DecodeConfig]) -> DecodeConfig:
    """The setting whose rounds verify the most rows (a chain's k drafts and the pending token, a tree's nodes and it)."""
    return max(configs, key=lambda c: (c.tree.nodes if c.tree is not None else c.k) + 1)


def measure_tree_costs(target, draft, ids: torch.Tensor, configs: list[DecodeConfig], tokens: int = 6,
                       now_s: float | None = None) -> TreeCosts:
    """A pilot at ``ids`` after an untimed warm-up: ``tokens`` baseline tokens, the same of the setting with the most
    rows, and the baseline again, each run timed whole as the lab times it. Measured once per pair, prompt and
    settings: after that (and after ``remember_tree_run``) scaled by ``now_s``, a target pass timed now (timed here
    if not given), over the pass timed beside it, at once (``pilot_cache``)."""
    key, cfg = tree_key(target, draft, ids, configs), most_rows(configs)
    now_s = pilot_cache.pass_now(target, ids, cfg) if now_s is None else now_s
    if (hit := pilot_cache.get(key, (target, draft), now_s)) is not None:
        costs, scale = hit
        return replace(costs, token_s=costs.token_s * scale, run_s=costs.run_s * scale, slack=pilot_cache.slack(scale))
    costs = _tree_pilot(target, draft, ids, replace(cfg, max_new_tokens=tokens, k_policy="fixed"))
    pilot_cache.put(key, costs, (target, draft), _beside(now_s, target, ids, cfg))
    return costs


def tree_key(target, draft, ids: torch.Tensor, configs: list[DecodeConfig]) -> tuple:
    """The tree lab's pilot key: the pair, the prompt, the sampling settings and the setting with the most rows."""
    costliest = most_rows(configs)
    return ("tree", pilot_cache.identity(target), pilot_cache.identity(draft), pilot_cache.prompt_key(ids),
            _sampling(replace(costliest, tree=None)), costliest.k, costliest.tree, torch.get_num_threads())


def remember_tree_run(target, draft, ids: torch.Tensor, configs: list[DecodeConfig], lab, costs: TreeCosts) -> None:
    """Refreshes the lab's pilot entry with what its real runs measured (``lab``: the tree lab's table): a baseline
    token at the baseline's tokens/s (its set-up included), the ratio at the settings' mean time per token over it,
    beside a pass timed now (as the lab's runs ran)."""
    speeds = dict(zip(lab["setting"], lab["tokens/s"]))
    base = speeds.pop("autoregressive", 0.0)
    if base > 0 and speeds and min(speeds.values()) > 0:
        ratio = statistics.fmean(base / v for v in speeds.values())
        pilot_cache.put(tree_key(target, draft, ids, configs), replace(costs, token_s=1 / base, ratio=ratio, slack=1.0),
                        (target, draft), pilot_cache.pass_now(target, ids, most_rows(configs)))


def _tree_pilot(target, draft, ids: torch.Tensor, pilot: DecodeConfig) -> TreeCosts:
    speculative_generate(target, draft, ids, replace(pilot, max_new_tokens=2, record=False))
    first, spec, last = (_timed(autoregressive_generate, target, ids, replace(pilot, tree=None)),
                         _timed(speculative_generate, target, draft, ids, pilot),
                         _timed(autoregressive_generate, target, ids, replace(pilot, tree=None)))
    per_token = [(w - _overhead(t, w)) / max(len(t.new_tokens), 1) for t, w in (first, spec, last)]
    token_s = (per_token[0] + per_token[2]) / 2
    ratios = [x for t, _ in (first, spec, last) for x in _ratios(t)]
    spread = statistics.quantiles(ratios, n=10)[int(SLOW_QUANTILE * 10) - 1] if len(ratios) >= 2 else 1.0
    return TreeCosts(token_s, per_token[1] / token_s if token_s else 1.0,
                     max(statistics.median(_overhead(t, w) for t, w in (first, spec, last)), 0.0), max(spread, 1.0))


def _overhead(trace, wall: float) -> float:
    """A run's seconds outside its rounds: set-up, and the prefill before the first round's clock."""
    return wall - sum(r.wall_s for r in trace.rounds)


def tree_estimate(costs: TreeCosts, n_settings: int, n_prompts: int, max_new_tokens: int, repeats: int = 1) -> Estimate:
    """The tree lab's likely duration and its range: per prompt and repeat the baseline and every setting, each
    setting's tokens at the pilot's ratio to a baseline token, after the lab's warm-up (4 tokens a setting). The
    fast end prices the settings as the baseline (on a CPU the lab's settings run at 0.9-1.4x its speed) where the
    pilot was slower, the slow end at the pilot's ratio and its slow rounds."""
    def total(ratio: float, slow: float) -> float:
        one = (max_new_tokens * costs.token_s * (1 + n_settings * ratio)) * slow + (1 + n_settings) * costs.run_s
        warm = (min(4, max_new_tokens) * costs.token_s * (1 + n_settings * ratio)) + (1 + n_settings) * costs.run_s
        return warm + one * n_prompts * repeats

    return Estimate(total(costs.ratio, 1.0), total(min(costs.ratio, 1.0), 1.0) / costs.slack,
                    total(max(costs.ratio, 1.0), costs.spread) * costs.slack)
