"""How likely a tree node is to be accepted, learnt from the run's own verdicts: what a dynamic tree ranks and
prunes its nodes by.

EAGLE-2 ranks a dynamic tree's nodes by their cumulative draft probability (the product of q along the path),
taking a draft's q as a stand-in for its acceptance rate. A draft whose q is not calibrated misleads that ranking:
at greedy, the bundled feature draft's top child is accepted about 83% of the time where its q is below 0.05, and
its second child in about 9% of the rounds that reach its parent whatever its q (measured over held-out prompts:
most of the rounds whose top child fails, but those are few), so a ranking by q keeps
shallow siblings and drops deep nodes that would have been accepted. Here a child's acceptance is estimated per
(rank among its siblings, q bin) from every earlier try of the run, and a node's value is the product of those
estimates along its path: the chance the walk reaches and accepts it. Before any try a top child counts as sure
(so the first trees explore depth) and another child as its q.

The estimate reads earlier rounds only, never the round's own target pass: the emitted tokens keep the target's
law, as with any k policy.
"""
from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field

import torch

from ..sampling import sibling_acceptance

Q_EDGES = (0.02, 0.05, 0.1, 0.2, 0.35, 0.5, 0.7, 0.9)  # q bins: [0, 0.02), [0.02, 0.05), ..., [0.9, 1]
RANKS = 3  # a node's rank among its siblings (0 = the draft's top child); ranks 2 and above share a bin
PRIOR_TRIES = 2.0  # the prior counts as this many tries


@dataclass
class AcceptanceEstimate:
    """P(a child is accepted | the walk tries it) by (rank, q bin), from the tries seen so far and a prior."""

    tries: dict[tuple[int, int], int] = field(default_factory=dict)
    accepted: dict[tuple[int, int], float] = field(default_factory=dict)

    @staticmethod
    def bin(rank: int, q: float) -> tuple[int, int]:
        return min(rank, RANKS - 1), bisect_right(Q_EDGES, q)

    def __call__(self, rank: int, q: float) -> float:
        key, prior = self.bin(rank, q), 1.0 if rank == 0 else q
        return (self.accepted.get(key, 0.0) + PRIOR_TRIES * prior) / (self.tries.get(key, 0) + PRIOR_TRIES)

    def observe(self, rank: int, q: float, accept_prob: float) -> None:
        """One try: accept_prob is the chance the walk accepted it (1 or 0 at greedy, min(1, p'/q_i) sampled),
        which estimates the same mean as the accept/reject outcome with less noise."""
        key = self.bin(rank, q)
        self.tries[key] = self.tries.get(key, 0) + 1
        self.accepted[key] = self.accepted.get(key, 0.0) + accept_prob

    def observe_round(self, tree, tries: dict) -> None:
        """Every try of a tree round (``TreeVerdict.tries``: node -> Try) at its node's rank and q."""
        for node, t in tries.items():
            self.observe(tree.ranks[node], tree.q[node], t.accept_prob)


DOUBT_EDGES = (0.05, 0.2, 0.5, 0.7, 0.875)  # doubt bins: [0, 0.05), [0.05, 0.2), ..., [0.875, 1]


@dataclass
class SiblingEstimate:
    """Where a chain's first rejection falls and what a sibling there wins, learnt from earlier verdicts: what a
    chain with siblings (``specviz.trees.chain``) places its siblings by.

    A chain position has a source (the drafter that drafted it: a hybrid's "lookup", "table" or "model", another
    drafter's "draft") and a doubt: q(alt) / q(x) under the distribution its sibling would come from, alt being
    that distribution's best token other than x (capped at 1: the distribution prefers alt). Per (source, doubt
    bin) it counts the rounds whose walk reached the position, those that rejected x there, and what a sibling
    there won: greedy, whether the target's token was alt (one token more); sampled, the chance a sibling drawn
    from q without x would have been accepted, sum_v min(q_s(v), p'(v)) with p' the residual after x, computed
    from the round's own rows. The bundled draft's q is not calibrated (its tokens mostly carry q < 0.2 and are
    accepted 73% of the time at greedy), but its doubt sorts them: reached model positions in the top doubt
    quartile were rejected 44% of the time and alt was the target's token in 32%, those in the bottom quartile
    10% and 7% (greedy, 64 tokens of 10 prompts, 2026-12-01). Before any round a position counts as the
    two-candidate odds doubt / (1 + doubt), as PRIOR_TRIES rounds. It reads earlier rounds only: the tree is fixed
    before its target pass, so the output keeps the target's law (greedy: its text)."""

    reached: dict[tuple[str, int], int] = field(default_factory=dict)
    rejected: dict[tuple[str, int], int] = field(default_factory=dict)
    hits: dict[tuple[str, int], float] = field(default_factory=dict)

    @staticmethod
    def key(source: str, doubt: float) -> tuple[str, int]:
        return source, bisect_right(DOUBT_EDGES, doubt)

    def reject(self, source: str, doubt: float) -> float:
        """P(x is rejected | the walk reaches its position)."""
        return self._rate(self.rejected, self.key(source, doubt), doubt)

    def hit(self, source: str, doubt: float) -> float:
        """P(x is rejected and a sibling there is accepted | the walk reaches the position)."""
        return self._rate(self.hits, self.key(source, doubt), doubt)

    def rates(self, source: str, doubt: float) -> tuple[float, float]:
        """(reject, hit) at once: a chain position's two rates from one key."""
        key = self.key(source, doubt)
        return self._rate(self.rejected, key, doubt), self._rate(self.hits, key, doubt)

    def _rate(self, counts: dict, key: tuple[str, int], doubt: float) -> float:
        prior = doubt / (1 + doubt)
        return (counts.get(key, 0) + PRIOR_TRIES * prior) / (self.reached.get(key, 0) + PRIOR_TRIES)

    def observe(self, positions: list[tuple[str, float, int]], accepted: int, won: float | None) -> None:
        """One round: positions[i] = (source, doubt, alt) of chain position i; ``accepted`` chain tokens were
        accepted; won: what a sibling at the first rejected position won (greedy 1 or 0, sampled its chance of
        acceptance; None: no position was rejected)."""
        for i, (source, doubt, _) in enumerate(positions[: accepted + 1]):
            key = self.key(source, doubt)
            self.reached[key] = self.reached.get(key, 0) + 1
            if i == accepted and won is not None:
                self.rejected[key] = self.rejected.get(key, 0) + 1
                self.hits[key] = self.hits.get(key, 0.0) + won

    def observe_round(self, tree, verdict, p: torch.Tensor | None = None) -> None:
        """A chain-with-siblings round (``tree.positions`` set by ``grow_chain``) from its ``TreeVerdict``; p: the
        round's target rows (1 + len(tree), V), needed for sampled rounds (None: greedy)."""
        path, n = verdict.path, 0
        while n < len(path) and path[n] == n:  # chain node i is node i
            n += 1
        if n == len(path) and not verdict.rejected:
            won = None  # the walk took every chain token
        elif p is not None:
            won = sibling_acceptance(p[n], tree.q_rows[n - 1].to(p.dtype), tree.tokens[n])
        elif n < len(path):  # greedy, a sibling was taken: x was rejected there and alt was the target's token
            won = 1.0
        else:
            won = float(verdict.next_token == tree.positions[n][2])
        self.observe(tree.positions, n, won)

