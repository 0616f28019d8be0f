"""The losslessness lab: run the verify step thousands of times on ONE context and check that the
emitted token is distributed as p, the target's distribution (Leviathan et al. 2023, theorem 3.5).

Notation as in ``specviz.sampling``: p target, q draft (both after the same temperature / top-k /
top-p), x ~ q the drafted token, u ~ U(0, 1), accept iff u < min(1, p(x)/q(x)); a rejection draws from
the residual norm(max(0, p - q)). Then
    P(emit v) = min(p(v), q(v)) + (1 - beta) * norm(max(0, p - q))(v) = p(v),   beta = sum min(p, q).
Two mistakes (a tutorial's, switched on to see them fail):
    "wrong: scalar q(x)"     the residual max(0, p - q(x)) built from the drafted token's scalar q(x);
    "wrong: unprocessed q"   the ratio and residual use q from the raw logits (temperature 1, no top-k /
                             top-p) while the draft samples from the processed q.
Everything below the model boundary (``next_token_dists``) is pure tensor math.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from scipy.stats import chisquare

from ..config import LOSSY, RULES, DecodeConfig
from ..decoder import autoregressive_generate
from ..drafts.drafter import Drafter
from ..rules import emit_many, rule_of
from ..runtime.lm import model_device
from ..sampling import align_vocab, beta, logits_to_probs, residual

CORRECT, WRONG_SCALAR, WRONG_RAW = "correct", "wrong: scalar q(x)", "wrong: unprocessed q"
VARIANTS = (CORRECT, WRONG_SCALAR, WRONG_RAW)


@dataclass(frozen=True)
class Dists:
    """The next-token distributions at one context, each (V,) on the target's vocabulary."""

    p: torch.Tensor  # the target's, processed
    q: torch.Tensor  # the draft's, processed: what x is sampled from
    q_raw: torch.Tensor  # the draft's plain softmax (== q for a point mass or a drafter without logits)
    model_free: bool = False  # the draft has no logits of its own (prompt lookup's point mass, an n-gram's counts)


def raw_mistake_note(d: Dists, cfg: DecodeConfig) -> str | None:
    """Why the 'unprocessed q' mistake cannot show at these settings with this draft, or None where it can."""
    if d.model_free:
        return ("This draft has no logits of its own to leave unprocessed (a point mass, or an n-gram's counts "
                "turned into q after the run's transforms), so the 'unprocessed q' mistake cannot happen with it: "
                "pick a model draft to see it.")
    if torch.equal(d.q, d.q_raw) or (cfg.temperature == 1.0 and cfg.top_k == 0 and cfg.top_p == 1.0):
        return (f"At temperature {cfg.temperature:g} with top-k and top-p off, processing leaves the draft's q as it "
                "is, so the 'unprocessed q' step is the correct step here: set another temperature, or turn on "
                "top-k or top-p, to see the mistake.")
    return None


# -- the verify step, N times at once ------------------------------------------------------------------
def verify_many(p: torch.Tensor, q: torch.Tensor, n: int, generator: torch.Generator | None = None,
                q_used: torch.Tensor | None = None, scalar_residual: bool = False) -> torch.Tensor:
    """The token emitted by N independent verify steps at one position: (N,) ids.

    x ~ q (N draws), u ~ U(0, 1), accept where u < min(1, p(x)/q_used(x)); the rejected ones draw from
    norm(max(0, p - q_used)) (or, with ``scalar_residual``, the WRONG norm(max(0, p - q_used(x)))).
    ``q_used`` is what the verifier believes the draft sampled from (default: q, the correct choice).
    """
    q_used = q if q_used is None else q_used
    x = torch.multinomial(q, n, replacement=True, generator=generator)  # (N,)
    u = torch.rand(n, generator=generator, dtype=p.dtype)
    accept = u < torch.clamp(p[x] / q_used[x], max=1.0)
    out = x.clone()
    rejected = (~accept).nonzero().squeeze(1)
    if len(rejected) == 0:
        return out
    if not scalar_residual:  # one residual row for every rejection
        out[rejected] = torch.multinomial(residual(p, q_used), len(rejected), replacement=True, generator=generator)
        return out
    xs, inverse = torch.unique(x[rejected], return_inverse=True)
    rows = residual(p.expand(len(xs), -1), q_used[xs].unsqueeze(1).expand(-1, len(p)))  # (U, V): one per x
    for j in range(len(xs)):  # one multinomial per distinct drafted token
        where = rejected[inverse == j]
        out[where] = torch.multinomial(rows[j], len(where), replacement=True, generator=generator)
    return out


def check_correct_rule(rule: str) -> None:
    """The 'correct' column runs a lossless rule (specviz.rules): a ValueError for a lossy or unknown one."""
    if rule not in RULES:
        raise ValueError(f"unknown rule for the 'correct' column: choose one of {', '.join(sorted(set(RULES) - LOSSY))}")
    if rule in LOSSY:
        raise ValueError(f"{rule} is lossy (it changes the emitted token's law), so it cannot be the 'correct' "
                         f"verify step: choose one of {', '.join(sorted(set(RULES) - LOSSY))}, or compare lossy rules "
                         "in the acceptance rule lab")


def emit(d: Dists, variant: str, n: int, generator: torch.Generator | None = None,
         rule: str = "leviathan") -> torch.Tensor:
    """N emitted tokens under one of VARIANTS; the correct one under ``rule`` (a lossless rule)."""
    if variant == CORRECT and rule != "leviathan":
        check_correct_rule(rule)
        return emit_many(rule_of(DecodeConfig(rule=rule)), d.p, d.q, n, generator)
    if variant == CORRECT:
        return verify_many(d.p, d.q, n, generator)
    if variant == WRONG_SCALAR:
        return verify_many(d.p, d.q, n, generator, scalar_residual=True)
    if variant == WRONG_RAW:
        return verify_many(d.p, d.q, n, generator, q_used=d.q_raw)
    raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")


# -- statistics ----------------------------------------------------------------------------------------
def chi2_pvalue(counts, probs, min_expected: float = 5.0) -> float:
    """Goodness of fit of counts ~ Multinomial(n, probs); cells expected < min_expected are pooled.
    A count where probs is 0 is impossible under probs: p-value 0."""
    counts, probs = np.asarray(counts, float), np.asarray(probs, float)
    probs = probs / probs.sum()
    expected = probs * counts.sum()
    if (counts[probs == 0] > 0).any():
        return 0.0
    big = expected >= min_expected
    obs, exp = np.append(counts[big], counts[~big].sum()), np.append(expected[big], expected[~big].sum())
    if exp[-1] == 0:
        obs, exp = obs[:-1], exp[:-1]
    if len(obs) < 2:
        return 1.0
    return float(chisquare(obs, exp).pvalue)


def total_variation(a, b) -> float:
    """TV = 1/2 sum |a - b| between two distributions."""
    return 0.5 * float(np.abs(np.asarray(a, float) - np.asarray(b, float)).sum())


def decomposition(p: torch.Tensor, q: torch.Tensor) -> pd.DataFrame:
    """Per token: the accept part min(p, q) and the residual part (1 - beta) norm(max(0, p - q)); they sum to p."""
    b = float(beta(p, q))
    accept = torch.minimum(p, q)
    rest = (1 - b) * residual(p, q) if b < 1 else torch.zeros_like(p)
    return pd.DataFrame({"token": np.arange(len(p)), "p": p.numpy(), "q": q.numpy(),
                         "accept": accept.numpy(), "residual": rest.numpy()})


def counts_frame(d: Dists, counts: dict[str, np.ndarray]) -> pd.DataFrame:
    """One row per (variant, token) with p > 0, q > 0 or a count: p, q, count, empirical."""
    p, q = d.p.numpy(), d.q.numpy()
    frames = []
    for variant, c in counts.items():
        keep = (p > 0) | (q > 0) | (c > 0)
        frames.append(pd.DataFrame({"variant": variant, "token": np.flatnonzero(keep), "p": p[keep], "q": q[keep],
                                    "count": c[keep], "empirical": c[keep] / max(c.sum(), 1)}))
    return pd.concat(frames, ignore_index=True)


def fit_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Per variant: draws, TV(empirical, p), TV(empirical, q), chi-square p-value against p."""
    rows = []
    for variant, g in frame.groupby("variant", sort=False):
        rows.append(dict(variant=variant, draws=int(g["count"].sum()), tv_to_p=total_variation(g.empirical, g.p),
                         tv_to_q=total_variation(g.empirical, g.q), chi2_p=chi2_pvalue(g["count"], g.p)))
    return pd.DataFrame(rows)


# -- the lab -------------------------------------------------------------------------------------------
def iter_lossless(d: Dists, draws: int = 4000, batch: int = 500, variants=VARIANTS, seed: int = 0,
                  rule: str = "leviathan"):
    """Yield the cumulative counts frame (see counts_frame) after every batch of draws per variant; the correct
    variant under ``rule`` (lossless rules only)."""
    if draws < 1 or batch < 1:
        raise ValueError(f"draws and batch must be >= 1, got draws={draws}, batch={batch}")
    check_correct_rule(rule)
    gen = torch.Generator().manual_seed(seed)
    counts = {v: np.zeros(len(d.p)) for v in variants}
    done = 0
    while done < draws:
        n = min(batch, draws - done)
        for v in variants:
            counts[v] += np.bincount(emit(d, v, n, gen, rule).numpy(), minlength=len(d.p))
        done += n
        yield counts_frame(d, counts)


def lossless_lab(target, draft, input_ids: torch.Tensor, cfg: DecodeConfig | None = None, draws: int = 4000,
                 extra_tokens: int = 0, variants=VARIANTS, rule: str = "leviathan") -> pd.DataFrame:
    """From a notebook: counts frame after ``draws`` verify steps per variant at the context
    ``input_ids`` (plus ``extra_tokens`` generated by the target), the correct one under ``rule``. ``fit_table``
    summarises it."""
    check_correct_rule(rule)
    d = next_token_dists(target, draft, input_ids, cfg or DecodeConfig(), extra_tokens)
    frame = None
    for frame in iter_lossless(d, draws, batch=draws, variants=variants, seed=(cfg or DecodeConfig()).seed, rule=rule):
        pass
    return frame


# -- the model boundary --------------------------------------------------------------------------------
def context(target, input_ids: torch.Tensor, cfg: DecodeConfig, extra_tokens: int = 0) -> list[int]:
    """The prompt, plus ``extra_tokens`` the target generates with cfg's settings."""
    ids = input_ids[0].tolist()
    if extra_tokens:
        from dataclasses import replace

        ids += autoregressive_generate(target, input_ids, replace(cfg, max_new_tokens=extra_tokens)).new_tokens
    return ids


@torch.no_grad()
def next_token_dists(target, draft, input_ids: torch.Tensor, cfg: DecodeConfig, extra_tokens: int = 0) -> Dists:
    """p, q and the unprocessed q at the context's next position (float64, on the CPU)."""
    if cfg.greedy:
        raise ValueError("the losslessness lab needs sampling: set temperature > 0 (greedy verification is "
                         "deterministic and trivially the target's argmax)")
    ids = context(target, input_ids, cfg, extra_tokens)
    t = dict(temperature=cfg.temperature, top_k=cfg.top_k, top_p=cfg.top_p)
    p_logits = _last_logits(target, ids)
    p, vocab = logits_to_probs(p_logits, **t), p_logits.shape[-1]
    if isinstance(draft, Drafter):  # model-free: q is whatever the drafter proposes from
        draft = draft.fresh()  # this run's own copy (the store shares drafters between visitors)
        draft.start(ids, cfg, vocab, torch.device("cpu"))
        draft.prefill(ids)
        prop = draft.propose(ids, 1, torch.Generator().manual_seed(cfg.seed))
        if len(prop.tokens) == 0:
            raise ValueError(f"{draft.name} proposes nothing at this context (no earlier match of its last "
                             "tokens): pick a context that repeats itself, or a model draft")
        q = prop.q_on(vocab, torch.float64)[0].double()
        return Dists(p, q, q, model_free=True)
    n_embed = draft.get_input_embeddings().weight.shape[0]
    q_logits = align_vocab(_last_logits(draft, [i if i < n_embed else 0 for i in ids]), vocab)
    return Dists(p, logits_to_probs(q_logits, **t), q_logits.softmax(-1))


def _last_logits(model, ids: list[int]) -> torch.Tensor:
    x = torch.tensor([ids], dtype=torch.long, device=model_device(model))
    return model(input_ids=x).logits[0, -1].double().cpu()
