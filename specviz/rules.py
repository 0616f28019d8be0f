"""The accept step's rules, as pure tensor math: what an engine does with a drafted token x, each rule named as its
paper or engine names it, with its acceptance probability and the law of the emitted token in closed form.

Notation as in ``specviz.sampling``: p the target's distribution at a position, q the law x was drafted from (a point
mass at x when the draft takes its argmax: ``DecodeConfig.draft_greedy``), u ~ U(0, 1) the position's one draw. Each
rule gives (a) ``decide``: is x accepted, given p, q, x, u; (b) ``residual``: what is emitted when x is rejected;
(c) ``acceptance``: A = P(accept) = E over x ~ q and u; (d) ``law``: the distribution of the token emitted at the
position (x if accepted, else the rejection's token), so TV(law, p) is what the rule costs in truth.
  leviathan    u < min(1, p(x)/q(x)); residual norm(max(0, p - q))           A = sum min(p, q)      law = p
  point_mass   q taken as onehot(x): u < p(x); residual p without x          A = sum q p            law = p
  exact_match  y ~ p (p's CDF inverted at u); accept iff y == x, else emit y  A = sum q p            law = p
  typical      p(x) > thr = min(eps, delta e^-H(p)); else the target's argmax A = sum q [p > thr]
               (Medusa, lossy)                                                law = q [p > thr] + (1 - A) onehot(argmax p)
  optimistic   every x (lossy)                                                A = 1                  law = q
  lenient      u < min(1, p(x) / (l q(x))); residual as Leviathan's (lossy)   A = sum min(q, p / l)
                                                                              law = min(q, p/l) + (1 - A) norm(max(0, p-q))
Greedy runs (temperature 0) take p and q at their argmax: every rule but optimistic is then the greedy match.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from .config import LOSSY, RULES, DecodeConfig
from .sampling import Verdict, first_rejection, invert_cdf, residual, sample, verify_greedy


def onehot_like(p: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """Point masses at ids (...,) on p's vocabulary: (..., V)."""
    return torch.zeros_like(p).scatter_(-1, ids.unsqueeze(-1), 1.0)


def entropy(p: torch.Tensor) -> torch.Tensor:
    """H(p) in nats (0 log 0 = 0), (R, V) -> (R,)."""
    return -(p * torch.log(p.clamp(min=torch.finfo(p.dtype).tiny))).sum(-1)


class Leviathan:
    """Leviathan et al. 2023, Algorithm 1 (``sampling.verify`` is the decoder's own copy); the other rules replace
    some of its steps. p, q: (R, V) rows; x, u: (R, N) drafts and draws at those rows (``decide``, ``accept_prob``),
    or one x per row (``residual``)."""

    name: ClassVar[str] = "leviathan"
    source: ClassVar[str] = "Leviathan et al. 2023, Algorithm 1; Chen et al. 2023"

    @property
    def lossless(self) -> bool:
        return self.name not in LOSSY

    def ratio(self, p, q, x):  # p(x) / q(x), (R, N); 0 where q(x) = 0 (never drafted)
        q_x = q.gather(-1, x)
        return torch.where(q_x > 0, p.gather(-1, x) / q_x.clamp(min=torch.finfo(q.dtype).tiny), 0)

    def accept_prob(self, p, q, x):  # P(accept | x), (R, N)
        return self.ratio(p, q, x).clamp(max=1)

    def decide(self, p, q, x, u):
        return u < self.accept_prob(p, q, x)

    def residual(self, p, q, x):  # the law of the token emitted after rejecting x, (R, V)
        return residual(p, q)

    def reject_token(self, p, r, x: int, u, generator) -> int:  # one position: p, r (V,)
        return int(sample(r, generator))

    def acceptance(self, p, q):  # (R,)
        return torch.minimum(p, q).sum(-1)

    def law(self, p, q):  # (R, V)
        a = self.acceptance(p, q).unsqueeze(-1)
        return torch.minimum(p, q) + (1 - a) * residual(p, q)

    def bonus(self, p):  # the law of the token after all k drafts were accepted, (V,)
        return p


class PointMass(Leviathan):
    """The draft's q not used (vLLM's rejection sampler with draft_probs=None: draft_prob = 1)."""

    name, source = "point_mass", "vllm/v1/sample/rejection_sampler.py (IS_NGRAM: draft_prob = 1)"

    def accept_prob(self, p, q, x):
        return p.gather(-1, x)

    def residual(self, p, q, x):
        return residual(p, onehot_like(p, x))  # p without x, renormalised

    def acceptance(self, p, q):
        return (q * p).sum(-1)

    def law(self, p, q):  # x accepted: q(v) p(v); x != v rejected: sum_x q(x) (1 - p(x)) p(v) / (1 - p(x))
        return q * p + p * (1 - q)


class ExactMatch(PointMass):
    """The target samples its own token y ~ p and keeps x while y == x (llama.cpp, MLX-LM, transformers' assisted
    generation without draft logits): the same law and acceptance as point_mass, another coupling with u."""

    name, source = "exact_match", "llama.cpp common/sampling.cpp common_sampler_sample_and_accept_n"

    def decide(self, p, q, x, u):
        return invert_cdf(p, u) == x

    def reject_token(self, p, r, x, u, generator):
        return int(invert_cdf(p[None], u.reshape(1, 1))[0, 0])  # y itself: the target's draw at this u


@dataclass(frozen=True)
class Typical(Leviathan):
    """Medusa's typical acceptance (Cai et al. 2024; FasterDecoding/Medusa medusa/model/utils.py evaluate_posterior):
    x passes where p(x) > min(epsilon, delta exp(-H(p))); the token after the accepted prefix is the target's argmax
    (generate_candidates, medusa_generate's default fast=True)."""

    epsilon: float = 0.09
    delta: float = 0.3
    name: ClassVar[str] = "typical"
    source: ClassVar[str] = "FasterDecoding/Medusa medusa/model/utils.py evaluate_posterior"

    def threshold(self, p):  # (R, 1)
        return torch.clamp(self.delta * torch.exp(-entropy(p)), max=self.epsilon).unsqueeze(-1)

    def accept_prob(self, p, q, x):
        return (p.gather(-1, x) > self.threshold(p)).to(p.dtype)

    def residual(self, p, q, x):
        return onehot_like(p, p.argmax(-1))

    def acceptance(self, p, q):
        return (q * (p > self.threshold(p))).sum(-1)

    def law(self, p, q):
        a = self.acceptance(p, q).unsqueeze(-1)
        return q * (p > self.threshold(p)) + (1 - a) * onehot_like(p, p.argmax(-1))

    def bonus(self, p):
        return onehot_like(p, p.argmax(-1))


class Optimistic(Leviathan):
    """Every draft accepted: the draft's own text, verified by nobody (the extreme of lossy)."""

    name, source = "optimistic", "the limit of any lenience: accept everything"

    def accept_prob(self, p, q, x):
        return torch.ones_like(x, dtype=p.dtype)

    def acceptance(self, p, q):
        return torch.ones(p.shape[:-1], dtype=p.dtype, device=p.device)

    def law(self, p, q):
        return q.clone()


@dataclass(frozen=True)
class Lenient(Leviathan):
    """A lenience l in (0, 1]: accept with min(1, p(x) / (l q(x))), the residual kept as Leviathan's (after the
    lenience of Leviathan et al. 2023's appendix; with a point-mass q it is SGLang's threshold_acc,
    sgl-kernel speculative_sampling.cuh TreeSpeculativeSamplingTargetOnly). l = 1 is Leviathan's rule."""

    lenience: float = 0.5
    name: ClassVar[str] = "lenient"
    source: ClassVar[str] = "Leviathan et al. 2023 (lenience); SGLang --speculative-accept-threshold-acc"

    @property
    def lossless(self) -> bool:
        return self.lenience == 1.0

    def accept_prob(self, p, q, x):
        return (self.ratio(p, q, x) / self.lenience).clamp(max=1)

    def acceptance(self, p, q):
        return torch.minimum(q, p / self.lenience).sum(-1)

    def law(self, p, q):
        a = self.acceptance(p, q).unsqueeze(-1)
        return torch.minimum(q, p / self.lenience) + (1 - a) * residual(p, q)


Rule = Leviathan  # every rule: Leviathan's with some of its steps replaced
PLAIN = {r.name: r for r in (Leviathan, PointMass, ExactMatch, Optimistic)}
assert set(PLAIN) | {"typical", "lenient"} == set(RULES)


def rule_of(cfg: DecodeConfig) -> Rule:
    """The rule cfg names, with its parameters."""
    if cfg.rule == "typical":
        return Typical(cfg.typical_epsilon, cfg.typical_delta)
    if cfg.rule == "lenient":
        return Lenient(cfg.lenience)
    return PLAIN[cfg.rule]()


def verify_rule(rule: Rule, p: torch.Tensor, q: torch.Tensor, x: torch.Tensor, generator,
                logits: torch.Tensor | None = None) -> Verdict:
    """``sampling.verify`` under ``rule``: p (k+1, V), q (k, V), x (k,); one u per draft, the first rejection
    emits the rule's token, else a bonus from ``rule.bonus``. ``logits`` (k+1, V): a greedy run."""
    k = x.shape[0]
    if logits is not None:
        if rule.name != "optimistic":
            return verify_greedy(logits, x)
        return Verdict(k, int(logits[k].argmax()), torch.ones(k, dtype=logits.dtype, device=logits.device), None, None)
    a = rule.accept_prob(p[:k], q, x[:, None])[:, 0]
    u = torch.rand(k, generator=generator, device=p.device, dtype=p.dtype)
    n = first_rejection(rule.decide(p[:k], q, x[:, None], u[:, None])[:, 0])
    if n == k:
        return Verdict(k, int(sample(rule.bonus(p[k]), generator)), a, u, None)
    r = rule.residual(p[n:n + 1], q[n:n + 1], x[n:n + 1])[0]
    return Verdict(n, rule.reject_token(p[n], r, int(x[n]), u[n], generator), a, u, r)


def emit_many(rule: Rule, p: torch.Tensor, q: torch.Tensor, n: int, generator=None) -> torch.Tensor:
    """The token emitted by N independent accept steps at one position (p, q: (V,)): x ~ q, u ~ U(0, 1); (N,) ids."""
    x = torch.multinomial(q, n, replacement=True, generator=generator)
    u = torch.rand(n, generator=generator, dtype=p.dtype)
    out = x.clone()
    bad = (~rule.decide(p[None], q[None], x[None], u[None])[0]).nonzero().squeeze(1)
    if len(bad) == 0:
        return out
    if isinstance(rule, ExactMatch):
        out[bad] = invert_cdf(p[None], u[bad][None])[0]
    elif isinstance(rule, PointMass):
        out[bad] = draw_excluding(p, x[bad], generator)
    else:  # the residual does not depend on x
        out[bad] = torch.multinomial(rule.residual(p[None], q[None], x[:1])[0], len(bad), replacement=True,
                                     generator=generator)
    return out


def draw_excluding(p: torch.Tensor, x: torch.Tensor, generator=None) -> torch.Tensor:
    """One draw from p without x[i] (renormalised) for each i: draw from p again where the draw hit x[i]."""
    out = torch.multinomial(p, len(x), replacement=True, generator=generator)
    todo = (out == x).nonzero().squeeze(1)
    while len(todo):
        out[todo] = torch.multinomial(p, len(todo), replacement=True, generator=generator)
        todo = todo[out[todo] == x[todo]]
    return out


def total_variation(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """1/2 sum |a - b| per row, (..., V) -> (...,)."""
    return 0.5 * (a - b).abs().sum(-1)


def closed_forms(rule: Rule, p: torch.Tensor, q: torch.Tensor, greedy: bool) -> tuple[list, list]:
    """(acceptance, TV(law, p)) at each of a round's verified positions (p, q: (m, V)); greedy runs take both at
    their argmax. The TV list is empty for a lossless rule (0 by the closed form)."""
    if greedy:
        p, q = onehot_like(p, p.argmax(-1)), onehot_like(q, q.argmax(-1))
    tv = [] if rule.lossless else total_variation(rule.law(p, q), p).tolist()
    return rule.acceptance(p, q).tolist(), tv


def run_closed_forms(rounds) -> tuple[float | None, float | None]:
    """(mean closed-form acceptance, mean TV from p) over the verified positions of rounds that recorded them
    (``Round.rule_accept`` / ``rule_tv``); None where none did (Leviathan's rule: its acceptance is beta)."""
    accepts = [a for r in rounds for a in getattr(r, "rule_accept", ()) if a is not None]
    tvs = [t for r in rounds for t in getattr(r, "rule_tv", ()) if t is not None]
    return (sum(accepts) / len(accepts) if accepts else None), (sum(tvs) / len(tvs) if tvs else None)
