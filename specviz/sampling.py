"""The sampling math of speculative decoding, as pure tensor functions.

Notation (Leviathan et al. 2023, kept everywhere in specviz):
    p      the TARGET model's next-token distribution (after temperature / top-k / top-p)
    q      the DRAFT's next-token distribution, processed by exactly the same transforms
    x_i    the i-th drafted token, x_i ~ q_i
    u_i    a uniform draw; x_i is accepted iff u_i < min(1, p_i(x_i) / q_i(x_i))
    beta   sum_v min(p(v), q(v)): the probability that a position is accepted
    alpha  E[beta], the acceptance rate;  tau  tokens emitted per round
At the first rejection n the emitted token is drawn from the residual
norm(max(0, p_n - q_n)) over the FULL vocabulary; if all k drafts are accepted a bonus
token is drawn from p_{k+1}. A model-free drafter is a point mass q = onehot(x), for
which the same formulas accept with probability p(x) and resample from p without x.

No models and no globals here: everything is testable with hand-built tensors.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


def process_logits(logits: torch.Tensor, temperature: float, top_k: int = 0, top_p: float = 1.0) -> torch.Tensor:
    """Temperature, then top-k, then top-p, as transformers' warpers do; removed entries become -inf.

    logits: (..., V). temperature must be > 0 (greedy never calls this).
    """
    logits = _as_float(logits) / temperature
    if top_k > 0 and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=False)
        cumulative = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
        remove_sorted = cumulative <= (1 - top_p)
        remove_sorted[..., -1:] = False  # always keep the most likely token
        remove = remove_sorted.scatter(-1, order, remove_sorted)
        logits = logits.masked_fill(remove, float("-inf"))
    return logits


def logits_to_probs(logits: torch.Tensor, temperature: float, top_k: int = 0, top_p: float = 1.0) -> torch.Tensor:
    """The distribution generation samples from. Greedy (temperature 0) reports the plain softmax,
    which is what the timeline shows as the model's confidence; the greedy decision uses argmax."""
    if temperature == 0:
        return _as_float(logits).softmax(dim=-1)
    return process_logits(logits, temperature, top_k, top_p).softmax(dim=-1)


def align_vocab(logits: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Make draft logits cover exactly the target's vocabulary (padded embedding tables differ in size).

    Extra draft rows are cut (the draft can never propose a token the target cannot score); missing rows
    get -inf (probability 0). q is then defined on the target's vocabulary and sampled from as defined.
    """
    extra = vocab_size - logits.shape[-1]
    if extra < 0:
        return logits[..., :vocab_size]
    if extra > 0:
        pad = logits.new_full((*logits.shape[:-1], extra), float("-inf"))
        return torch.cat([logits, pad], dim=-1)
    return logits


def sample(probs: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """One token id per row of probs (..., V), by inverting the CDF at one uniform draw per row: the first id
    whose cumulative probability exceeds u * total (an id of probability 0 is never chosen). One draw per
    row and a cumulative sum in float64; on a CPU about 15x faster than torch.multinomial for one sample."""
    flat = probs.reshape(-1, probs.shape[-1])
    u = torch.rand(flat.shape[0], 1, generator=generator, device=flat.device, dtype=torch.float64)
    return invert_cdf(flat, u).reshape(probs.shape[:-1])


def invert_cdf(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """The token of each row of probs (R, V) at each draw u (R, N) in [0, 1): the first id whose cumulative
    probability exceeds u * total, summed in float64. (R, N) ids."""
    cdf = probs.double().cumsum(dim=-1)  # (R, V)
    ids = torch.searchsorted(cdf, (u.double() * cdf[:, -1:]).contiguous(), right=True)
    return ids.clamp_(max=probs.shape[-1] - 1)


RESIDUAL_TOP = 8  # how many residual tokens a round records for the replay


def residual_top(residual: torch.Tensor | None, p: torch.Tensor, q: torch.Tensor | None) -> tuple:
    """The residual's top tokens with their p and q at that position (p, q: (V,); q None: 0), as
    (token, residual, p, q) for those with residual > 0: one gather and one copy to Python for all of them."""
    if residual is None:
        return ()
    top = torch.topk(residual, min(RESIDUAL_TOP, residual.shape[-1]))
    q_top = q[top.indices] if q is not None else torch.zeros_like(top.values)
    values = torch.stack([top.values.double(), p[top.indices].double(), q_top.double()]).tolist()
    return tuple((t, r, pt, qt) for t, r, pt, qt in zip(top.indices.tolist(), *values) if r > 0)


def beta(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Per-position acceptance probability sum_v min(p, q). p, q: (k, V) -> (k,)."""
    return torch.minimum(p, q).sum(dim=-1)


def residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """norm(max(0, p - q)) over the full vocabulary; where p == q (no residual mass) it is p itself."""
    r = torch.clamp(p - q, min=0)
    total = r.sum(dim=-1, keepdim=True)
    return torch.where(total > 0, r / total.clamp(min=torch.finfo(r.dtype).tiny), p)


def without_token(q: torch.Tensor, x: int) -> torch.Tensor | None:
    """q (V,) without token x, renormalised: what a sibling drawn without replacement is drawn from (None: q had
    no mass outside x)."""
    left = q.clone()
    left[x] = 0
    total = float(left.sum())
    return left / total if total > 0 else None


def sibling_acceptance(p: torch.Tensor, q: torch.Tensor, x: int) -> float:
    """The chance a sibling drawn from q without x (``without_token``) is accepted once x was rejected:
    sum_v min(q_s(v), p'(v)), p' = norm(max(0, p - q)) (recursive rejection sampling's residual); 0 where either
    is empty."""
    r, q_s = torch.clamp(p - q, min=0), without_token(q, x)
    total = float(r.sum())
    return float(torch.minimum(r / total, q_s).sum()) if total > 0 and q_s is not None else 0.0


def point_mass(tokens: torch.Tensor, vocab_size: int, dtype=torch.float32) -> torch.Tensor:
    """q for a model-free drafter: onehot rows, (k,) -> (k, V)."""
    q = torch.zeros(len(tokens), vocab_size, dtype=dtype, device=tokens.device)
    return q.scatter_(1, tokens.view(-1, 1), 1.0)


@dataclass(frozen=True)
class Verdict:
    """The outcome of verifying one round's k drafts against the target."""

    n_accepted: int  # drafts 0..n_accepted-1 accepted; draft n_accepted (if < k) rejected
    next_token: int  # the residual resample (if a rejection happened) or the bonus token
    accept_prob: torch.Tensor  # (k,) min(1, p/q) at each drafted token (greedy: 1.0 or 0.0)
    u: torch.Tensor | None  # (k,) the uniform draws (None in greedy)
    residual: torch.Tensor | None  # (V,) norm(max(0, p_n - q_n)) at the rejected position, else None

    @property
    def rejected(self) -> bool:
        return self.n_accepted < len(self.accept_prob)


def verify(p: torch.Tensor, q: torch.Tensor, drafted: torch.Tensor, generator: torch.Generator | None) -> Verdict:
    """Speculative sampling (Leviathan et al. 2023, Algorithm 1; Chen et al. 2023).

    p: (k+1, V) target distributions at the k drafted positions plus the one after them.
    q: (k, V) draft distributions the k drafts were sampled from.  drafted: (k,) token ids.
    """
    k = drafted.shape[0]
    idx = torch.arange(k, device=drafted.device)
    p_x, q_x = p[idx, drafted], q[idx, drafted]
    accept_prob = torch.clamp(p_x / q_x, max=1.0)  # q_x > 0: x was sampled from q
    u = torch.rand(k, generator=generator, device=p.device, dtype=p.dtype)
    n = first_rejection(u < accept_prob)
    if n == k:  # all accepted: a free token from the target's last distribution
        return Verdict(n, int(sample(p[k], generator)), accept_prob, u, None)
    r = residual(p[n], q[n])
    return Verdict(n, int(sample(r, generator)), accept_prob, u, r)


def block_weights(p_x: torch.Tensor, q_x: torch.Tensor) -> list[float]:
    """Block verification's weights P_0..P_k (Sun et al. 2024, Algorithm 2), in double: P_0 = 1 and
    P_i = min(1, P_{i-1} p_i(x_i) / q_i(x_i)) over the drafts' p and q (k,)."""
    weights = [1.0]
    for a, b in zip(p_x.tolist(), q_x.tolist()):
        weights.append(min(1.0, weights[-1] * a / b))  # b > 0: x_i was drawn from q_i
    return weights


def block_stop(weight: float, residual_mass: float) -> float:
    """h_i = R_i / (R_i + 1 - P_i): the chance block verification keeps the first i drafts, given it keeps none
    after them, where R_i = sum_v max(0, P_i p_{i+1}(v) - q_{i+1}(v)); 1 where both vanish (p = q there, P_i = 1)."""
    rest = residual_mass + 1.0 - weight
    return residual_mass / rest if rest > 0 else 1.0


def block_residual(p: torch.Tensor, q: torch.Tensor, weight: float) -> torch.Tensor:
    """norm(max(0, P p - q)) over the full vocabulary: what block verification draws from after keeping i drafts
    (P = P_i; P_0 = 1 gives Leviathan's residual); where it has no mass, p itself."""
    if weight >= 1.0:
        return residual(p, q)
    r = torch.clamp(p * weight - q, min=0)
    total = r.sum(dim=-1, keepdim=True)
    return torch.where(total > 0, r / total.clamp(min=torch.finfo(r.dtype).tiny), p)


def verify_block(p: torch.Tensor, q: torch.Tensor, drafted: torch.Tensor, generator: torch.Generator | None) -> Verdict:
    """Block verification (Sun et al. 2024, "Block Verification Accelerates Speculative Decoding", Algorithm 2):
    the same k uniforms as ``verify``; the drafts kept are the longest prefix i with u_i < h_i (h_k = P_k; none: 0),
    then a token from ``block_residual`` at i, or the bonus from p_k where all k are kept. Exact, as Leviathan's
    rule, and never keeps fewer drafts in expectation. p: (k+1, V), q: (k, V), drafted: (k,); the verdict's
    accept_prob holds h_1..h_k."""
    k = drafted.shape[0]
    idx = torch.arange(k, device=drafted.device)
    weights = block_weights(p[idx, drafted], q[idx, drafted])
    u = torch.rand(k, generator=generator, device=p.device, dtype=p.dtype)
    h = [block_stop(weights[i], float((weights[i] * p[i].double() - q[i].double()).clamp(min=0).sum()))
         for i in range(1, k)] + [weights[k]]
    n = next((i for i in range(k, 0, -1) if float(u[i - 1]) < h[i - 1]), 0)
    stop = torch.tensor(h, dtype=p.dtype, device=p.device)
    if n == k:
        return Verdict(n, int(sample(p[k], generator)), stop, u, None)
    r = block_residual(p[n], q[n], weights[n])
    return Verdict(n, int(sample(r, generator)), stop, u, r)


def first_rejection(accepted: torch.Tensor) -> int:
    """The accept step's outcome: the index of the first draft not accepted (k when all were), accepted: (k,) bool.
    Drafts after it are discarded whatever their own verdict."""
    rejected = (~accepted).nonzero()
    return int(rejected[0]) if len(rejected) else accepted.shape[0]


@dataclass(frozen=True)
class CandidateVerdict:
    """The outcome of trying one tree node's children in turn (``verify_candidates``)."""

    accepted: int | None  # index of the accepted candidate; None: every candidate rejected
    p_adj: tuple[float, ...]  # p'(x_i) when candidate i was tried (p itself for the first)
    accept_prob: tuple[float, ...]  # min(1, p'(x_i) / q_i(x_i))
    u: tuple[float, ...]
    residual: torch.Tensor | None  # (V,) p' after the last rejection: what the emitted token is drawn from


def verify_candidates(p: torch.Tensor, candidates: list[int], qs: list, generator: torch.Generator | None
                      ) -> CandidateVerdict:
    """Multi-candidate speculative sampling at one tree node (SpecInfer, Miao et al. 2024, Algorithm 2;
    recursive rejection sampling, Jeon et al. 2024): candidate x_i, drawn from q_i, is accepted with
    probability min(1, p'(x_i) / q_i(x_i)); on rejection p' <- norm(max(0, p' - q_i)) and the next is tried.
    The emitted token has law p whenever each x_i ~ q_i given the ones before: q_i = q for children drawn
    i.i.d., q without the earlier candidates (renormalised) for children drawn without replacement, and a point
    mass (None) for deterministic children, which makes the rule accept x_i with probability p'(x_i).

    p: (V,) the target's distribution at the node.  candidates: the child tokens in the order drawn."""
    p_adj, tried = p, []
    for i, (x, q) in enumerate(zip(candidates, qs)):
        px = float(p_adj[x])
        a = min(1.0, px) if q is None else min(1.0, px / float(q[x]))
        u = float(torch.rand((), generator=generator, device=p.device, dtype=torch.float64))
        tried.append((px, a, u))
        if u < a:
            return CandidateVerdict(i, *map(tuple, zip(*tried)), None)
        p_adj = residual(p_adj, point_mass(torch.tensor([x], device=p.device), p.shape[-1], p.dtype)[0]
                         if q is None else q)
    return CandidateVerdict(None, *(map(tuple, zip(*tried)) if tried else ((), (), ())), p_adj)


def verify_greedy(target_logits: torch.Tensor, drafted: torch.Tensor) -> Verdict:
    """Greedy: accept while the draft equals the target's argmax, then append the target's argmax.

    target_logits: (k+1, V). The output equals the target's own greedy decode token for token.
    """
    k = drafted.shape[0]
    best = target_logits.argmax(dim=-1)  # (k+1,)
    match = (best[:k] == drafted).to(target_logits.dtype)
    mismatches = (match == 0).nonzero()
    n = int(mismatches[0]) if len(mismatches) else k
    return Verdict(n, int(best[n]), match, None, None)


def _as_float(logits: torch.Tensor) -> torch.Tensor:
    # half-precision logits are upcast; float64 (used by exactness tests) is kept
    return logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits
