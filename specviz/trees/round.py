"""The steps of a tree round that touch caches and records (the tree math is in ``specviz.trees.tree``):
verify (the target scores the pending tokens and every node in ONE forward pass), keep (both caches keep
exactly the committed prefix and the accepted path) and record (a Round whose ``tree`` holds every node)."""
from __future__ import annotations

import contextlib
import weakref

import torch

from ..config import DecodeConfig
from ..records import TreeNode, TreeRecord
from ..runtime.forwards import cache_layers
from ..runtime.lm import CachedLM
from ..sampling import residual_top
from ..trace import Round, drawn
from .tree import ROOT, DraftTree, TreeVerdict

ALIBI = ("bloom", "mpt")  # model types whose attention biases are built from a 2-D padding mask


def tree_refusal(model) -> str | None:
    """Why a transformers model cannot score a token tree in one pass and keep its path, or None where it can:
    ALiBi models build their position biases from a 2-D padding mask (so no tree positions, no 4-D mask), and a
    sliding-window cache cannot gather a tree's accepted path. Read once per model (building the cache it reads
    costs a run a millisecond or two)."""
    try:
        return _REFUSALS[model]
    except (KeyError, TypeError):
        why = _refusal(model)
    with contextlib.suppress(TypeError):  # not weakly referable: asked again next time
        _REFUSALS[model] = why
    return why


_REFUSALS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _refusal(model) -> str | None:
    cfg = getattr(model, "config", None)
    kind = getattr(cfg, "model_type", None) or type(model).__name__
    if kind in ALIBI or getattr(cfg, "alibi", False):
        return f"{kind} builds ALiBi biases from a 2-D padding mask, so it takes no tree positions or 4-D tree mask"
    if other := sorted({type(layer).__name__ for layer in cache_layers(model)} - {"DynamicLayer"}):
        return f"{kind}'s key/value cache has {', '.join(other)} layers, not plain ones a tree's path can be kept in"
    return None


def check_tree_model(model, role: str) -> None:
    """A ValueError, before any pass, where ``model`` (the target or a draft model) cannot decode token trees."""
    if (why := tree_refusal(model)) is not None:
        raise ValueError(f"token trees need a model that scores a whole tree in one pass; the {role} cannot: {why}. "
                         "Draft a chain instead (tree=None).")


def verify_tree(target: CachedLM, committed: list[int], tree: DraftTree) -> torch.Tensor:
    """The target's logits at the root and at every node, (1 + len(tree), V), from one forward pass over the
    committed tokens the cache lacks and all the nodes (each attending to the prefix and its ancestors)."""
    pending = target.sync(committed)
    out = target.tree_forward(pending, tree.tokens, tree.parents)
    if pending:  # the last pending token's row is the root's: a view, no copy
        return out[len(pending) - 1:]
    return torch.cat([target.last_logits[None], out])


def keep_path(target: CachedLM, drafter, tree: DraftTree, path: tuple[int, ...], logits: torch.Tensor) -> None:
    """Both caches drop the tree but its accepted path (gathered in place: no forward pass)."""
    target.keep_path(list(path), logits[path[-1] + 1] if path else None)
    if not tree.chain_drafted:  # a chain's drafter follows the committed text as after any chain round
        drafter.tree_end([tree.draft_ids[n] for n in path])


def record_tree_round(cfg: DecodeConfig, index: int, tree: DraftTree, p: torch.Tensor, verdict: TreeVerdict,
                      emitted: list[int], draft_s: float, target_s: float, wall_s: float, rule: str, *,
                      draft_head_s: float | None = None, target_head_s: float | None = None) -> Round:
    """The Round of a tree round: chain fields along the accepted path (plus the stop node's first rejected
    child), ``tree`` with every node's fate; the heads' shares where the passes' forwards timed them."""
    times = dict(draft_s=draft_s, target_s=target_s, wall_s=wall_s, draft_head_s=draft_head_s,
                 target_head_s=target_head_s)
    path, tries = list(verdict.path), verdict.tries
    stop = path[-1] if path else ROOT
    rejected = [c for c, _ in tree.candidates.get(stop, []) if c in tries and c not in path][:1]
    chain, n = path + rejected, len(path)
    resampled, bonus = drawn(verdict.rejected, verdict.next_token, n, emitted)
    tokens = [tree.tokens[c] for c in chain]
    if not cfg.record:
        return Round.unrecorded(index=index, k=len(tree), drafted=tuple(tokens), n_accepted=n, emitted=tuple(emitted),
                                resampled=resampled, bonus=bonus, **times)
    rows = torch.tensor([parent + 1 for parent in tree.parents], dtype=torch.long)
    p_at = p[rows, torch.tensor(tree.tokens, dtype=torch.long)].tolist() if len(tree) else []
    nodes = tuple(_node(tree, i, p_at[i], tries.get(i), path) for i in range(len(tree)))
    beta = [float(torch.minimum(p[tree.parents[c] + 1], tree.q_rows[tree.parents[c]].to(p.dtype)).sum())
            for c in chain]
    return Round(
        index=index, k=len(tree), drafted=tuple(tokens), q=tuple(tree.q[c] for c in chain),
        p=tuple(p_at[c] for c in chain), accept_prob=tuple(tries[c].accept_prob for c in chain),
        u=tuple(tries[c].u for c in chain), beta=tuple(beta), n_accepted=n, emitted=tuple(emitted),
        resampled=resampled, bonus=bonus, next_p=float(p[stop + 1, verdict.next_token]),
        residual_top=residual_top(verdict.residual, p[stop + 1], tree.q_rows.get(stop)), **times,
        tree=TreeRecord(nodes, tuple(path), rule),
    )


def _node(tree: DraftTree, i: int, p: float, tried, path: list[int]) -> TreeNode:
    status = "accepted" if i in path else ("rejected" if tried is not None else "unvisited")
    return TreeNode(parent=tree.parents[i], depth=tree.depths[i], token=tree.tokens[i], q=tree.q[i], p=p,
                    p_adj=None if tried is None else tried.p_adj, accept_prob=None if tried is None else tried.accept_prob,
                    u=None if tried is None else tried.u, status=status, value=tree.values.get(i))
