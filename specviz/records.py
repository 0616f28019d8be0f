"""The small records a round carries beside its numbers: a draft's own tokens (a draft with another tokenizer)
and a tree round's nodes, each with what verification made of it."""
from __future__ import annotations

from dataclasses import dataclass

NODE_STATUSES = ("accepted", "rejected", "unvisited")


@dataclass(frozen=True)
class TreeNode:
    """One node of a tree round: a drafted token below its parent (-1: the round's root, the last committed token)."""

    parent: int
    depth: int  # 0 for the root's children
    token: int
    q: float  # q(token) at its parent: the draft's probability of it
    p: float  # p(token) at its parent: the target's (greedy: plain softmax)
    p_adj: float | None  # p'(token) when it was tried: p adjusted by the siblings rejected before it (None: not tried)
    accept_prob: float | None  # min(1, p'/q_i) (greedy: 1.0 for the target's argmax, else 0.0)
    u: float | None  # the uniform draw (None: greedy or not tried)
    status: str  # accepted (on the path), rejected (tried, not taken) or unvisited
    value: float | None = None  # a dynamic tree node's or sibling's estimate, when drafted, that the walk takes it


@dataclass(frozen=True)
class TreeRecord:
    nodes: tuple[TreeNode, ...]
    path: tuple[int, ...]  # the accepted nodes, root's child first
    children: str  # the children rule in force: top, iid or distinct (specviz.TreeConfig)


@dataclass(frozen=True)
class DraftTokens:
    """A round's draft in the draft's own tokenizer: its ids (the draft's vocabulary) and each token's text, in
    order (their concatenation is the text the draft added)."""

    ids: tuple[int, ...]
    texts: tuple[str, ...]

    def __post_init__(self):
        if len(self.ids) != len(self.texts):
            raise ValueError(f"DraftTokens: {len(self.ids)} ids but {len(self.texts)} texts")

    @property
    def text(self) -> str:
        return "".join(self.texts)
