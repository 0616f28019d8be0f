"""The goodput model: what speculation buys when one step serves many requests, and where it stops paying.

Notation as in ``specviz.theory``: k = drafts per round, alpha = P(a draft is accepted | the drafts before it
were), tau = tokens a round emits (accepted drafts plus the resample or bonus). New here: B = requests decoded
together (the batch), L = tokens of context each request attends (its KV cache), n = tokens one target pass
processes (B (k + 1) for a chain of k drafts, B (nodes + 1) for a tree).

A pass:            T(n, L) = fixed + per_token * n + per_kv * n * L                              (``StepCost``)
  fixed: what a pass costs whatever it carries (reading the weights, calling the layers); per_token: each processed
  token's own arithmetic; per_kv: each token's read of one cached position (attention, growing with the context).
A speculative round for B requests:  T(B (k + 1), L) + draft(B, k, L) + B * overhead;  it emits B * tau.
An autoregressive step:              T(B, L) + B * overhead;                           it emits B tokens.
goodput = tokens per second; speedup = speculative goodput / autoregressive goodput. At B = 1 with fixed
dominating, a verify pass of k + 1 tokens costs about one forward and speculation pays tau / (1 + k c); as B grows
the pass turns from fixed-cost into per-token-cost, the k wasted rows of every request are paid in full, and the
speedup falls below 1 at the crossover batch.

The draft's cost per round, by kind (``DraftCost``): "sequential" (a draft model: k passes, each over the B
requests' newest token, on its own StepCost), "block" (one draft pass proposing all k at once: B k tokens),
"ngram" (a lookup per drafted token per request, no pass: B k * seconds_each).

Assumptions (the model holds where these do):
  1. acceptance does not change with the batch or the context: each request accepts with the same per-position
     rates at every load;
  2. rounds are synchronous: every request drafts the same k, all advance together, none joins or leaves mid-round;
  3. a pass's time is linear in the tokens it processes and in their KV reads (fit it over the range you predict:
     a machine whose compute saturates changes slope there);
  4. the per-request bookkeeping of a step (sampling, acceptance, cache upkeep: ``overhead``) is the same for
     both methods.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.optimize import nnls

from .theory import expected_tokens, expected_tree_tokens

ASSUMPTIONS = (
    "acceptance is the same at every batch size and context (each request keeps its per-position rates)",
    "rounds are synchronous: every request drafts the same k and all advance together",
    "a pass's time is linear in the tokens it processes and in their KV reads (fitted on the measured range)",
    "per-request bookkeeping of a step (sampling, acceptance, cache upkeep) is the same for both methods",
)
DRAFT_KINDS = ("sequential", "block", "ngram")


@dataclass(frozen=True)
class StepCost:
    """Seconds of one pass: fixed + per_token * tokens + per_kv * tokens * context."""

    fixed: float
    per_token: float
    per_kv: float = 0.0

    def __post_init__(self):
        values = (self.fixed, self.per_token, self.per_kv)
        if any(not isinstance(x, (int, float)) or not math.isfinite(x) or x < 0 for x in values):
            raise ValueError(f"a step cost's terms must be finite and >= 0, got fixed={self.fixed!r}, "
                             f"per_token={self.per_token!r}, per_kv={self.per_kv!r}")
        if self.fixed + self.per_token <= 0:
            raise ValueError("a step cost needs fixed > 0 or per_token > 0: a pass that costs nothing predicts nothing")

    def seconds(self, tokens: float, context: float = 0.0) -> float:
        if tokens < 0 or context < 0:
            raise ValueError(f"need tokens >= 0 and context >= 0, got {tokens}, {context}")
        return self.fixed + self.per_token * tokens + self.per_kv * tokens * context

    def v(self, rows: int, context: float = 0.0) -> float:
        """A pass of ``rows`` tokens over a one-token pass (``engines.CostModel``'s v(n)) at this context."""
        return self.seconds(rows, context) / self.seconds(1, context)


@dataclass(frozen=True)
class DraftCost:
    """The draft's seconds per round: kind "sequential" or "block" runs ``step`` (its own StepCost); "ngram"
    costs ``seconds_each`` per drafted token per request."""

    kind: str
    step: StepCost | None = None
    seconds_each: float = 0.0

    def __post_init__(self):
        if self.kind not in DRAFT_KINDS:
            raise ValueError(f"draft kind must be one of {', '.join(DRAFT_KINDS)}, got {self.kind!r}")
        if self.kind != "ngram" and self.step is None:
            raise ValueError(f"a {self.kind} draft needs its pass's StepCost (step=...)")
        if not math.isfinite(self.seconds_each) or self.seconds_each < 0:
            raise ValueError(f"seconds_each must be finite and >= 0, got {self.seconds_each!r}")

    def seconds(self, batch: int, k: int, context: float = 0.0) -> float:
        """One round's drafting for ``batch`` requests of ``k`` drafts each (0 when k = 0)."""
        if k == 0:
            return 0.0
        if self.kind == "sequential":  # pass i reads the requests' newest token: B tokens, k times
            return sum(self.step.seconds(batch, context + i) for i in range(k))
        if self.kind == "block":
            return self.step.seconds(batch * k, context)
        return batch * k * self.seconds_each


def chain_tokens(rates) -> float:
    """Expected tokens of a chain round from per-position rates (rates[i] = P(draft i + 1 accepted | the drafts
    before it were)): 1 + the sum over positions of the product of the rates up to it. Equal rates alpha give
    ``theory.expected_tokens(alpha, k)``."""
    total, reach = 1.0, 1.0
    for rate in rates:
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"acceptance rates must lie in [0, 1], got {rate}")
        reach *= rate
        total += reach
    return total


def rates_of(acceptance, k: int) -> list[float]:
    """k per-position rates from one alpha (every position alike) or a list (the last repeated past its end)."""
    if isinstance(acceptance, (int, float)):
        expected_tokens(float(acceptance), k)  # checks alpha in [0, 1] and k >= 0
        return [float(acceptance)] * k
    rates = list(acceptance)
    if not rates:
        raise ValueError("give at least one acceptance rate")
    return (rates + [rates[-1]] * k)[:k]


def autoregressive_goodput(batch: int, context: float, target: StepCost, overhead: float = 0.0) -> float:
    """Tokens per second of B requests each emitting one token per target pass."""
    _check_load(batch, context)
    return batch / (target.seconds(batch, context) + batch * overhead)


def goodput(batch: int, context: float, k: int, acceptance, target: StepCost, draft: DraftCost,
            overhead: float = 0.0) -> float:
    """Tokens per second of B requests speculating k drafts a round (k = 0: autoregressive); ``acceptance``: one
    alpha or per-position rates."""
    _check_load(batch, context)
    if k == 0:
        return autoregressive_goodput(batch, context, target, overhead)
    tau = chain_tokens(rates_of(acceptance, k))
    round_s = target.seconds(batch * (k + 1), context) + draft.seconds(batch, k, context) + batch * overhead
    return batch * tau / round_s


def speedup(batch: int, context: float, k: int, acceptance, target: StepCost, draft: DraftCost,
            overhead: float = 0.0) -> float:
    """Speculative goodput over autoregressive goodput at the same load."""
    return goodput(batch, context, k, acceptance, target, draft, overhead) / autoregressive_goodput(
        batch, context, target, overhead)


def tree_speedup(batch: int, context: float, parents, depths, rates: dict, target: StepCost, draft: DraftCost,
                 overhead: float = 0.0) -> float:
    """A token tree's speedup: the target verifies B (nodes + 1) tokens; a sequential draft runs one pass per
    depth over the B requests' nodes at the depth above (the pending token for depth 0), a block draft one pass
    over B nodes, an n-gram draft a lookup per node; tau from ``theory.expected_tree_tokens`` (rates: (depth,
    rank) -> (accepted, reached))."""
    _check_load(batch, context)
    nodes, tau = len(parents), expected_tree_tokens(parents, depths, rates)
    if draft.kind == "sequential":
        widths = [1] + [sum(d == level for d in depths) for level in range(max(depths, default=-1))]
        draft_s = sum(draft.step.seconds(batch * w, context + i) for i, w in enumerate(widths)) if nodes else 0.0
    elif draft.kind == "block":
        draft_s = draft.step.seconds(batch * nodes, context) if nodes else 0.0
    else:
        draft_s = batch * nodes * draft.seconds_each
    round_s = target.seconds(batch * (nodes + 1), context) + draft_s + batch * overhead
    return batch * tau / round_s / autoregressive_goodput(batch, context, target, overhead)


@dataclass(frozen=True)
class Crossover:
    """Where speculation stops paying along a list of batch sizes. ``batch``: the first batch size whose speedup
    is below 1 after one at or above it (None when there is no such change in range); ``verdict``: "crosses",
    "never pays" (below 1 at every batch), "pays throughout" (at or above 1 at every batch) or "pays only at larger
    batches" (below 1 first, then at or above it)."""

    batch: int | None
    verdict: str
    last_paying: int | None  # the largest batch before the crossover that paid (None: none did)


def crossover(batches, speedups) -> Crossover:
    """The crossover along ``batches`` (increasing) with their ``speedups`` (measured or modelled)."""
    batches, speedups = list(batches), list(speedups)
    if not batches or len(batches) != len(speedups) or batches != sorted(set(batches)):
        raise ValueError(f"need increasing batch sizes, one speedup each, got {batches} and {len(speedups)} speedups")
    paying = [s >= 1.0 for s in speedups]
    down = next((i for i in range(1, len(batches)) if paying[i - 1] and not paying[i]), None)
    if down is not None:
        return Crossover(batches[down], "crosses", batches[down - 1])
    if not any(paying):
        return Crossover(None, "never pays", None)
    return Crossover(None, "pays throughout" if all(paying) else "pays only at larger batches", batches[-1])


def best_k(batch: int, context: float, ks, acceptance, target: StepCost, draft: DraftCost,
           overhead: float = 0.0) -> int:
    """The k (0 = no speculation) with the most goodput at this load; the smaller k on a tie."""
    ks = sorted({0, *ks})
    rates = [goodput(batch, context, k, acceptance, target, draft, overhead) for k in ks]
    return ks[int(np.argmax(rates))]


def best_k_ranges(batches, context: float, ks, acceptance, target: StepCost, draft: DraftCost,
                  overhead: float = 0.0) -> list[tuple[int, int, int]]:
    """(first batch, last batch, best k) for each run of consecutive batch sizes sharing a best k."""
    ranges: list[tuple[int, int, int]] = []
    for batch in batches:
        k = best_k(batch, context, ks, acceptance, target, draft, overhead)
        if ranges and ranges[-1][2] == k:
            ranges[-1] = (ranges[-1][0], batch, k)
        else:
            ranges.append((batch, batch, k))
    return ranges


def fit_step_cost(samples) -> StepCost:
    """A StepCost from measured passes, (tokens, context, seconds) each, by least squares on the RELATIVE error with
    every term >= 0: each pass weighs as 1 / its seconds, so a one-token pass's millisecond counts as much as a large
    pass's ten (a speedup is a ratio of passes; an absolute fit lets the largest passes set the small ones' cost).
    With one context only, the KV term cannot be told from the per-token one: per_kv = 0 and per_token carries
    both (valid at that context)."""
    data = np.asarray(list(samples), dtype=float)
    if data.ndim != 2 or data.shape[1] != 3 or len(data) < 2:
        raise ValueError("fit a step cost from at least 2 passes, each (tokens, context, seconds)")
    if not np.isfinite(data).all() or (data < 0).any() or (data[:, 2] <= 0).any():
        raise ValueError("passes need finite tokens >= 0, context >= 0 and seconds > 0")
    tokens, context, seconds = data.T
    if len(set(tokens)) < 2:
        raise ValueError(f"fit a step cost from passes of at least 2 sizes, got only {int(tokens[0])} tokens")
    columns = [np.ones_like(tokens), tokens] + ([tokens * context] if len(set(context)) > 1 else [])
    design = np.stack(columns, axis=1) / seconds[:, None]  # row i over seconds_i: the residuals are relative
    scale = design.max(axis=0)  # columns of like size: nnls's tolerance is absolute
    terms, _ = nnls(design / scale, np.ones_like(seconds))
    terms = terms / scale
    fixed, per_token = float(terms[0]), float(terms[1])
    return StepCost(fixed, per_token, float(terms[2]) if len(terms) > 2 else 0.0)


def passes_from_throughput(batches, tokens_per_s, context: float = 0.0) -> list[tuple[int, float, float]]:
    """An engine's autoregressive throughput at several batch sizes as passes for ``fit_step_cost``: at batch B,
    one step of B tokens takes B / (tokens per second) seconds (its bookkeeping included)."""
    batches, rates = list(batches), list(tokens_per_s)
    if len(batches) != len(rates) or any(b < 1 for b in batches) or any(r <= 0 for r in rates):
        raise ValueError("need one throughput > 0 per batch size >= 1")
    return [(b, context, b / r) for b, r in zip(batches, rates)]


def _check_load(batch: int, context: float) -> None:
    if batch < 1 or context < 0:
        raise ValueError(f"need a batch of at least 1 request and a context >= 0, got batch {batch}, context {context}")
