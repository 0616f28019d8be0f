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
