"""Several drafts against one target, side by side: the same prompts, settings and seed for every draft,
and the autoregressive baseline run in the same call (per prompt: the baseline, then each draft), so every
speedup has the same denominator and machine noise hits all runs alike.

Notation (``specviz.sampling``): p target, q draft, beta = sum min(p, q), alpha = E[beta], tau = tokens
per round, c = cost ratio, one draft step over one one-token target forward (as ``sweep.summarize``).
Aggregates over prompts are ratios of sums (``sweep.run_row``).

``compare`` gives the table; ``iter_compare`` yields each run as it finishes (for streaming);
``disagreement`` shows, at one position of a run, each draft's q beside the target's p; and
``divergence_frame`` says where each draft's first rejection happened.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pandas as pd
import torch

from ..config import DecodeConfig
from ..decoder import Decoding
from ..drafts.drafter import Drafter, as_drafter
from ..drafts.eagle import extra_parameters
from ..drafts.early_exit import own_parameters
from ..drafts.hybrid import HybridDrafter
from ..drafts.ngram import NGramDrafter
from ..drafts.self_drafts import FeatureDrafter
from ..runtime.lm import CachedLM
from ..sampling import logits_to_probs
from ..trace import Trace
from .sweep import BASELINE, baseline_costs, baseline_run, position_rows, run_row, speedup_spread, warm_up


@dataclass(frozen=True)
class Run:
    draft: str  # BASELINE for the autoregressive run
    prompt: int  # index into the prompts
    trace: Trace


def iter_compare(target, drafts: dict, prompts, cfg: DecodeConfig | None = None, target_name: str | None = None
                 ) -> Iterator[Run]:
    """Per prompt: the autoregressive baseline, then every draft with the same settings and seed; traces carry
    ``target_name`` (default: the model's own) and each draft's name as given."""
    cfg, prompts = cfg or DecodeConfig(), _prompt_list(prompts)
    if not drafts:
        raise ValueError("give at least one draft to compare")
    if BASELINE in drafts:
        raise ValueError(f"{BASELINE!r} names the baseline: call the draft something else")
    warm_up(target, drafts, prompts[0], cfg)
    for i, ids in enumerate(prompts):
        yield Run(BASELINE, i, baseline_run(target, ids, cfg, target_name=target_name))
        for name, draft in drafts.items():
            yield Run(name, i, Decoding(target, draft, ids, cfg, target_name=target_name, draft_name=name).run())


def compare(target, drafts: dict, prompts, cfg: DecodeConfig | None = None) -> pd.DataFrame:
    """One row per draft (in the order given): see ``compare_table``."""
    return compare_table(list(iter_compare(target, drafts, prompts, cfg)),
                         {name: draft_facts(d) for name, d in drafts.items()})


def compare_table(runs: list[Run], sizes: dict | None = None) -> pd.DataFrame:
    """Per draft: size, tokenizer and extra memory (``sizes``: name -> DraftFacts, or just its size), acceptance
    rate, alpha, tau, tokens/s, speedup over the baseline runs, c, and the acceptance rate at each draft position
    (accept@i: accepted / drafted there; NaN if never drafted).
    Drafts whose runs have not all finished count only what has; the baseline must have run."""
    base = pd.DataFrame([run_row(r.trace) for r in runs if r.draft == BASELINE])
    if base.empty:
        raise ValueError("no baseline run: the table needs the autoregressive run to measure speedup")
    base_tps, target_step = baseline_costs(base)
    rows = [run_row(r.trace, draft=r.draft, prompt=r.prompt) for r in runs if r.draft != BASELINE]
    frame = pd.DataFrame(rows, columns=["draft", "prompt"] + list(run_row(runs[0].trace)))
    g = frame.drop(columns="prompt").groupby("draft", sort=False).sum()
    facts = [_facts((sizes or {}).get(d)) for d in g.index]
    out = pd.DataFrame({"draft": g.index, "size": [f.size for f in facts], "tokenizer": [f.tokenizer for f in facts],
                        "extra_mib": [f.extra_mib for f in facts]})
    out["new_tokens"], out["rounds"] = g.new_tokens.to_numpy(), g.rounds.to_numpy()
    out["acceptance_rate"] = (g.accepted / g.drafted).to_numpy()
    out["alpha"] = (g.beta_sum / g.beta_n).where(g.beta_n > 0, 0.0).to_numpy()  # nothing verified: 0
    out["tau"] = (g.new_tokens / g.rounds).to_numpy()
    out["target_passes_per_token"] = (g.rounds / g.new_tokens).to_numpy()  # hardware-free: a round is one pass
    out["tokens_per_s"] = (g.new_tokens / g.seconds).to_numpy()
    out["baseline_tokens_per_s"] = base_tps
    out["speedup"] = out.tokens_per_s / base_tps
    base = base.assign(prompt=[r.prompt for r in runs if r.draft == BASELINE])
    out = out.merge(speedup_spread(frame, base, ["draft"], ["prompt"]), on="draft", how="left")
    out["c"] = ((g.draft_s / g.drafted) / target_step).to_numpy()
    return out.join(_positions(runs), on="draft")


def _positions(runs: list[Run]) -> pd.DataFrame:
    rows = [row for r in runs if r.draft != BASELINE for row in position_rows(r.trace, draft=r.draft)]
    if not rows:
        return pd.DataFrame(index=pd.Index([], name="draft"))
    g = pd.DataFrame(rows).groupby(["draft", "position"], sort=False)[["drafted", "accepted"]].sum()
    rate = (g.accepted / g.drafted).unstack("position")
    rate.columns = [f"accept@{i}" for i in rate.columns]
    return rate


@dataclass(frozen=True)
class DraftFacts:
    """What a draft is, for the comparison table: ``size`` (parameters, or stored n-grams), ``tokenizer`` ("same",
    or "other" with the share of the target's vocabulary it holds) and ``extra_mib``: the memory it adds beside
    the target (its weights or tables; 0 for an early exit, which shares the target's, and for model-free rules)."""

    size: float = float("nan")
    tokenizer: str = ""
    extra_mib: float = float("nan")


def _facts(value) -> DraftFacts:
    return value if isinstance(value, DraftFacts) else DraftFacts(float("nan") if value is None else value)


def draft_facts(draft) -> DraftFacts:
    overlap = getattr(draft, "overlap", None)  # a draft with its own tokenizer (specviz.drafts.cross)
    tokenizer = "same" if overlap is None else f"other ({overlap:.0%} shared)"
    return DraftFacts(draft_size(draft), tokenizer, draft_bytes(draft) / 2**20)


def draft_bytes(draft) -> int:
    """Bytes the draft holds beside the target: an LM's parameters as loaded, an n-gram's tables (a hybrid: both);
    an early exit's adapter only; 0 for model-free rules."""
    if isinstance(draft, NGramDrafter):
        return _table_bytes(draft.model)
    table = _table_bytes(draft.table) if isinstance(draft, HybridDrafter) else 0
    return table + int(sum(p.numel() * p.element_size() for p in _parameters(draft)))


def _table_bytes(ngram) -> int:
    tensors = [*ngram.keys, *ngram.counts, ngram.unigram]
    return int(sum(t.numel() * t.element_size() for t in tensors))


def _parameters(draft) -> list:
    """The parameters a draft holds beside the target: its LM's (a hybrid's model part, a model or cross-tokenizer
    drafter's LM), an early exit's adapter's, none for rules."""
    if isinstance(draft, HybridDrafter):
        draft = draft.model_draft
    if isinstance(draft, FeatureDrafter):
        return extra_parameters(draft.head)
    if isinstance(draft, Drafter):
        draft = getattr(draft, "model", None)
    own = own_parameters(draft)
    if own is not None:
        return own
    return list(draft.parameters()) if isinstance(draft, torch.nn.Module) else []


def draft_size(draft) -> int:
    """Parameters of a draft LM (of a hybrid's model; of an early exit, its adapter's only: the rest is the
    target's); stored n-grams (every order) of an n-gram draft; 0 for model-free rules."""
    if isinstance(draft, NGramDrafter):
        return int(sum(len(k) for k in draft.model.keys))
    return int(sum(p.numel() for p in _parameters(draft)))


# -- where they diverge and disagree --------------------------------------------------------------------
def first_rejection(trace: Trace) -> int | None:
    """Index into the generated tokens where the run's first rejected draft stood (None: none rejected)."""
    done = 0
    for r in trace.rounds:
        if r.rejected:
            return done + r.n_accepted
        done += len(r.emitted)
    return None


def divergence_frame(runs: list[Run]) -> pd.DataFrame:
    """Per draft run: where its first rejection happened, what it drafted there and what the target put."""
    rows = []
    for run in (r for r in runs if r.draft != BASELINE):
        t, at = run.trace, first_rejection(run.trace)
        r = next((r for r in t.rounds if r.rejected), None)
        rows.append(dict(draft=run.draft, prompt=run.prompt, position=at,
                         drafted=repr(t.text(r.drafted[r.n_accepted])) if r else None,
                         target_put=repr(t.text(r.emitted[r.n_accepted])) if r and len(r.emitted) > r.n_accepted
                         else None))
    frame = pd.DataFrame(rows, columns=["draft", "prompt", "position", "drafted", "target_put"])
    return frame.astype({"position": "Int64"})


def context_at(trace: Trace, position: int) -> list[int]:
    """The ids before generated token ``position`` of a run: the prompt and the tokens generated before it."""
    n = len(trace.new_tokens)
    if not 0 <= position < max(n, 1):
        raise ValueError(f"position must lie in [0, {max(n - 1, 0)}] (the run generated {n} tokens), got {position}")
    return list(trace.prompt_ids) + trace.new_tokens[:position]


@torch.inference_mode()
def distributions_at(target, drafts: dict, context: list[int], cfg: DecodeConfig) -> tuple[torch.Tensor, dict]:
    """p (V,) of the target after ``context`` and each draft's q (V,), processed by cfg's transforms (greedy:
    plain softmax). A model-free draft's q is a point mass on its proposal, all zeros if it proposes nothing."""
    p = logits_to_probs(CachedLM(target).feed(context)[-1], cfg.temperature, cfg.top_k, cfg.top_p)
    qs = {}
    for name, draft in drafts.items():
        drafter = as_drafter(draft).fresh()
        target_lm = CachedLM(target)  # as the decoder's prefill: attach, the target's pass, then start
        drafter.attach(target_lm)  # a self-draft (a feature draft, an exit) reads the target's own pass
        target_lm.feed(context)
        drafter.start(context, cfg, p.shape[-1], p.device)
        drafter.prefill(context)
        proposal = drafter.propose(context, 1, torch.Generator(device=p.device).manual_seed(cfg.seed))
        q = proposal.q_on(p.shape[-1], p.dtype)
        qs[name] = q[0].to(p.dtype) if len(q) else torch.zeros_like(p)
    return p, qs


def disagreement_frame(p: torch.Tensor, qs: dict, top: int = 5, text: Callable[[int], str] = str) -> pd.DataFrame:
    """The top ``top`` tokens of p and of every q, by p descending: token, text, p, then one ``q <name>``
    column per draft (the probability that draft gave the token)."""
    tokens = set(torch.topk(p, min(top, len(p))).indices.tolist())
    for q in qs.values():
        tokens |= {int(t) for t in torch.topk(q, min(top, len(q))).indices if q[t] > 0}
    ids = sorted(tokens, key=lambda t: (-float(p[t]), t))
    frame = pd.DataFrame({"token": ids, "text": [repr(text(t)) for t in ids], "p": [float(p[t]) for t in ids]})
    for name, q in qs.items():
        frame[f"q {name}"] = [float(q[t]) for t in ids]
    return frame


def disagreement(target, drafts: dict, trace: Trace, position: int, cfg: DecodeConfig | None = None, top: int = 5,
                 text: Callable[[int], str] | None = None) -> pd.DataFrame:
    """At generated token ``position`` of ``trace`` (e.g. the target's own greedy run): each draft's top
    tokens and q beside the target's p (``disagreement_frame``), with cfg's settings (default: the run's)."""
    p, qs = distributions_at(target, drafts, context_at(trace, position), cfg or trace.config)
    return disagreement_frame(p, qs, top, text or trace.text)


def _prompt_list(prompts) -> list[torch.Tensor]:
    prompts = [prompts] if isinstance(prompts, torch.Tensor) else list(prompts)
    if not prompts:
        raise ValueError("give at least one prompt")
    return prompts
