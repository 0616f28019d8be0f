"""A chain with siblings: the cheapest token tree. The draft drafts the chain the chain decoder would (its own
``propose``: one draft step per token, no tree bookkeeping), and the tree adds leaves beside it, each the draft's
best other token at one of the chain's positions, read from the q the chain was drawn from: no draft pass more.
The target verifies chain and leaves in one pass, as any tree.

Why on a CPU: a verify row costs about as much as a draft step, and at greedy the first rejection of the bundled
pair's chain falls on the draft's second choice about as often as not; a sibling where the draft doubts its
token pays for its row, a wide tree drafted level by level does not (the tree lab, README).

Which positions get a sibling depends on the draft alone: position i is worth reach_i = prod_{j<i} q_j(x_j) (the
draft's own odds that the walk arrives) times, greedy, q_i(second) (it takes the second choice) or, sampled,
1 - q_i(x_i) (it rejects x_i), fixed before any sibling is drawn. (Ranking by the run's learnt acceptance rates,
as the dynamic trees do, placed them worse: 109 rounds against 105 over the lab's 640 greedy tokens.) The sibling
is drawn from q_i without x_i (renormalised), so recursive rejection sampling (``sampling.verify_candidates``)
keeps the target's law exactly."""
from __future__ import annotations

import torch

from .config import DecodeConfig, TreeConfig
from .sampling import sample
from .tree import DraftTree


def grow_chain(drafter, committed: list[int], tree_cfg: TreeConfig, cfg: DecodeConfig, depth: int,
               generator: torch.Generator | None) -> DraftTree:
    """The chain of at most ``depth`` drafts and at most ``tree_cfg.siblings`` sibling leaves worth at least
    ``tree_cfg.threshold``. Chain node i is node i (its parent i - 1, the root for 0); the drafter keeps its own
    chain state (``chain_drafted``: the round does not call ``tree_end``)."""
    proposal = drafter.propose(committed, depth, generator)
    tokens = proposal.tokens.tolist()
    tree = DraftTree(chain_drafted=True)
    if not tokens:
        return tree
    q = proposal.q_on(drafter.vocab_size)  # (m, V): point masses (a lookup's tokens) as onehot rows
    q_x = q[torch.arange(len(tokens)), proposal.tokens].tolist()
    second = q.topk(min(2, q.shape[-1]), dim=-1).values[:, -1].tolist() if cfg.greedy else None  # one topk a round
    point = proposal.q is None
    worth, reach = [], 1.0
    for i, (x, qx) in enumerate(zip(tokens, q_x)):
        tree.q_rows[i - 1] = q[i]
        tree.add(x, i - 1, qx)
        tree.candidates[i - 1] = [(i, None if cfg.greedy or point else q[i])]
        # greedy: the walk arrives and takes the second choice; sampled: it arrives and rejects x_i
        other = (second[i] if cfg.greedy else 1.0 - qx) if qx < 1 else 0.0
        worth.append(reach * other)
        reach *= qx
    ranked = sorted(range(len(tokens)), key=lambda i: -worth[i])[: tree_cfg.siblings]
    for i in sorted(j for j in ranked if worth[j] > 0 and worth[j] >= tree_cfg.threshold):
        left = q[i].clone()
        left[tokens[i]] = 0
        if cfg.greedy:
            s, q_s = int(left.argmax()), None
        else:
            q_s = left / left.sum()
            s = int(sample(q_s, generator))
        node = tree.add(s, i - 1, float(q[i, s]), rank=1)
        tree.values[node] = worth[i]
        tree.candidates[i - 1].append((node, q_s))
    return tree
