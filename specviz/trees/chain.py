"""A chain with siblings: the cheapest token tree. The draft drafts the chain the chain decoder would (its own
``propose``: one draft step per token, no tree bookkeeping), and the tree adds leaves beside it, each the draft's
best other token at one of the chain's positions, read from the q the chain was drawn from: no draft pass more.
The target verifies chain and leaves in one pass, as any tree.

Why on a CPU: a verify row costs about as much as a draft step, so a sibling pays only where the walk is likely
to arrive, reject the chain's token and take the sibling instead: a few rows placed well, not a wide tree.

Which positions get a sibling depends on the draft and earlier rounds alone (fixed before the round's target
pass). Position i is worth reach_i * hit_i, the chance the walk arrives (the product of 1 - reject_j over the
positions before it) and takes the sibling, both learnt from the verdicts of every earlier round of the same
drafter, per source and doubt (``tree_value.SiblingEstimate``: the bundled draft's q is not calibrated). Greedy:
the sibling is the best other token of the q the chain token was drawn from or, where that q is a point mass (a
hybrid's prompt lookup), of the drafter's second opinion there (its n-gram table's q). Sampled: the sibling is
drawn from q_i without x_i (renormalised), so recursive rejection sampling (``sampling.verify_candidates``) keeps
the target's law exactly."""
from __future__ import annotations

import torch

from ..config import DecodeConfig, TreeConfig
from ..sampling import sample, without_token
from .tree import DraftTree
from .value import SiblingEstimate


def grow_chain(drafter, committed: list[int], tree_cfg: TreeConfig, cfg: DecodeConfig, depth: int,
               generator: torch.Generator | None, estimate: SiblingEstimate | None = None) -> DraftTree:
    """The chain of at most ``depth`` drafts and at most ``tree_cfg.siblings`` sibling leaves worth at least
    ``tree_cfg.threshold`` (greedy: the expected tokens a sibling wins). Chain node i is node i (its parent i - 1,
    the root for 0); the drafter keeps its own chain state (``chain_drafted``: the round does not call
    ``tree_end``). ``estimate``: the drafter's greedy sibling estimate (None: its priors alone)."""
    proposal = drafter.propose(committed, depth, generator)
    tokens = proposal.tokens.tolist()
    tree = DraftTree(chain_drafted=True)
    if not tokens:
        return tree
    q = proposal.q_on(drafter.vocab_size)  # (m, V): point masses (a lookup's tokens) as onehot rows
    q_x = q[torch.arange(len(tokens)), proposal.tokens].tolist()
    point = proposal.q is None
    tree.q_rows = dict(zip(range(-1, len(tokens) - 1), q.unbind(0)))
    for i, (x, qx) in enumerate(zip(tokens, q_x)):
        tree.add(x, i - 1, qx)
        tree.candidates[i - 1] = [(i, None if cfg.greedy or point else q[i])]
    others = proposal.others or (None,) * len(tokens)  # a point mass's second opinion (greedy): its log q
    worth, q_alt = _worth(tree, proposal.sources, others, q, tokens, q_x, estimate or SiblingEstimate())
    ranked = sorted(range(len(tokens)), key=lambda i: -worth[i])[: tree_cfg.siblings]
    for i in sorted(j for j in ranked if worth[j] > 0 and worth[j] >= tree_cfg.threshold):
        if cfg.greedy:
            s, q_s, q_at = tree.positions[i][2], None, q_alt[i]
        else:
            q_s = without_token(q[i], tokens[i])
            s = int(sample(q_s, generator))
            q_at = float(q[i, s])
        node = tree.add(s, i - 1, q_at, rank=1)
        tree.values[node] = worth[i]
        tree.candidates[i - 1].append((node, q_s))
    return tree


def _worth(tree: DraftTree, sources: tuple[str, ...], others: tuple, q: torch.Tensor, tokens: list[int],
           q_x: list[float], estimate: SiblingEstimate) -> tuple[list[float], list[float]]:
    """Each position's worth reach_i * hit_i and its alternative's q; sets ``tree.positions``. A position's
    alternative is the best token other than x of its q or, where it has one, of its second opinion (log q)."""
    sources = sources or ("draft",) * len(tokens)
    top = q.topk(min(2, q.shape[-1]), dim=-1)  # every position's two best tokens in one pass
    best, at_best, at_x = top.indices.tolist(), top.values.tolist(), list(q_x)
    if point := [i for i, other in enumerate(others) if other is not None]:  # alternatives from second opinions
        log_q = torch.stack([others[i] for i in point])
        second = log_q.topk(min(2, log_q.shape[-1]), dim=-1)
        x_at = log_q[torch.arange(len(point)), torch.tensor([tokens[i] for i in point])].exp().tolist()
        for i, ids, values, qx in zip(point, second.indices.tolist(), second.values.exp().tolist(), x_at):
            best[i], at_best[i], at_x[i] = ids, values, qx
    worth, q_alt, reach = [], [], 1.0
    for i, source in enumerate(sources):
        j = 1 if best[i][0] == tokens[i] else 0  # alt: the best token that is not x
        alt, qa, qx = (best[i][j], at_best[i][j], at_x[i]) if j < len(best[i]) else (tokens[i], 0.0, at_x[i])
        doubt = min(1.0, qa / qx) if qx > 0 else (1.0 if qa > 0 else 0.0)
        tree.positions.append((source, doubt, alt))
        reject, hit = estimate.rates(source, doubt)
        worth.append(reach * hit if qa > 0 else 0.0)
        q_alt.append(qa)
        reach *= 1.0 - reject
    return worth, q_alt
