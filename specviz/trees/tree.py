"""Token trees: draft several continuations at once, verify every node in one target pass, walk the tree.

Notation as in ``specviz.sampling``. A tree hangs below the root, the last committed token; node i holds a
drafted token, its parent (ROOT = -1 or an earlier node) and its depth (0 for the root's children). The draft
grows the tree one level per forward pass (all of a level's nodes in one pass: ``Drafter.tree_expand``), and
each node keeps its children as the *candidates* tried in order at verification, each with the q it was
drawn from (None for a deterministic child, a point mass). ``walk`` is the accept step: from the root, try a
node's candidates (greedy: follow the child equal to the target's argmax; sampling: ``verify_candidates``),
move to the accepted child, and at the first node where none is accepted (or at a leaf) emit the residual or
bonus token. Which children a node gets depends on the draft alone, so the emitted tokens have the target's law.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..config import DecodeConfig, TreeConfig
from ..sampling import sample, verify_candidates

ROOT = -1


@dataclass
class DraftTree:
    """A round's drafted tree. ``candidates[n]``: node n's children in the order they are tried, as (child, q_i)
    (i.i.d. children may repeat a child: each draw is tried); ``q_rows[n]``: the draft's q at node n;
    ``draft_ids[i]``: node i's id in the drafter's numbering (a dynamic tree verifies a subset of what it drafted)."""

    tokens: list[int] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)
    depths: list[int] = field(default_factory=list)
    q: list[float] = field(default_factory=list)  # q(token) at its parent
    candidates: dict[int, list[tuple[int, torch.Tensor | None]]] = field(default_factory=dict)
    q_rows: dict[int, torch.Tensor] = field(default_factory=dict)
    draft_ids: list[int] = field(default_factory=list)
    ranks: list[int] = field(default_factory=list)  # each node's rank among the children its parent drafted
    values: dict[int, float] = field(default_factory=dict)  # a dynamic tree's value of each node (its worth)
    chain_drafted: bool = False  # drafted as a chain (``tree_chain``): the drafter keeps its chain state
    positions: list[tuple[str, float, int]] = field(default_factory=list)  # a chain's (source, doubt, alt) per token

    def add(self, token: int, parent: int, q: float, draft_id: int | None = None, rank: int = 0) -> int:
        self.ranks.append(rank)
        self.tokens.append(token)
        self.parents.append(parent)
        self.depths.append(0 if parent == ROOT else self.depths[parent] + 1)
        self.q.append(q)
        self.draft_ids.append(len(self.tokens) - 1 if draft_id is None else draft_id)
        return len(self.tokens) - 1

    def __len__(self) -> int:
        return len(self.tokens)

    def path_tokens(self, path: list[int]) -> list[int]:
        return [self.tokens[n] for n in path]


def choose_children(q: torch.Tensor, m: int, rule: str, generator: torch.Generator | None
                    ) -> list[tuple[int, torch.Tensor | None]]:
    """Up to m children of a node whose draft distribution is q (V,), as (token, q_i) in the order drawn:
    "top" the m most probable tokens of q (q_i None: a point mass), "iid" m draws from q (q_i = q),
    "distinct" m draws without replacement (q_i = q without the earlier draws, renormalised)."""
    if rule == "top":
        top = torch.topk(q, min(m, int((q > 0).sum())))
        return [(int(t), None) for t in top.indices]
    if rule == "iid":
        return [(int(x), q) for x in sample(q.expand(m, -1), generator)]
    out, left = [], q.clone()
    for _ in range(m):
        total = left.sum()
        if total <= 0:
            break
        q_i = left / total
        x = int(sample(q_i, generator))
        out.append((x, q_i))
        left[x] = 0
    return out


def grow(drafter, committed: list[int], tree_cfg: TreeConfig, cfg: DecodeConfig, levels: int,
         generator: torch.Generator | None, value=None) -> DraftTree:
    """The round's tree, at most ``levels`` deep (never more tokens than the run has left). ``value(rank, q)``:
    a dynamic tree's estimate of a child's acceptance (``specviz.trees.value``; None: q itself, as EAGLE-2)."""
    if tree_cfg.choices is not None:
        return _grow_choices(drafter, committed, [c for c in tree_cfg.choices if len(c) <= levels])
    if tree_cfg.dynamic and tree_cfg.children_for(cfg.greedy) == "distinct":
        return _grow_dynamic_drawn(drafter, committed, tree_cfg, min(levels, tree_cfg.depth), value, generator)
    if tree_cfg.dynamic:
        return _grow_dynamic(drafter, committed, tree_cfg, min(levels, tree_cfg.depth), value)
    return _grow_static(drafter, committed, tree_cfg.shape[:levels], tree_cfg.children_for(cfg.greedy), generator)


def _grow_static(drafter, committed, shape, rule, generator) -> DraftTree:
    tree, level = DraftTree(), [ROOT]
    tree.q_rows[ROOT] = drafter.tree_start(committed)
    for d, m in enumerate(shape):
        new = []
        for node, children in zip(level, _children(tree, level, m, rule, generator)):
            made, tree.candidates[node] = {}, []
            for token, q_i, q_x in children:
                if token not in made:
                    made[token] = tree.add(token, node, q_x, rank=len(made))
                    new.append(made[token])
                tree.candidates[node].append((made[token], q_i))
        if new and d + 1 < len(shape):  # the last level's children are never drafted: no q needed there
            rows = drafter.tree_expand(new, [tree.tokens[n] for n in new], [tree.parents[n] for n in new])
            tree.q_rows.update(zip(new, rows))
        level = new
    return tree


def _grow_choices(drafter, committed, choices: list[tuple[int, ...]]) -> DraftTree:
    """A tree of ranks (Medusa's ``medusa_choices``): the node at path (r_0, ..., r_d) holds the r_d-th most probable
    token of q at the node of path (r_0, ..., r_{d-1}); each node's children are tried in rank order, as point masses
    (which child is drafted depends on q alone, so the walk keeps the target's law). A rank past q's support is not
    drafted, nor anything below it."""
    tree, node_of = DraftTree(), {(): ROOT}
    tree.q_rows[ROOT] = drafter.tree_start(committed)
    for depth in range(1, max(map(len, choices), default=0) + 1):
        new = []
        for path in sorted(p for p in choices if len(p) == depth):
            parent = node_of.get(path[:-1])
            q = tree.q_rows.get(parent)
            if q is None or path[-1] >= int((q > 0).sum()):
                continue
            token = int(torch.topk(q, path[-1] + 1).indices[-1])
            node_of[path] = tree.add(token, parent, float(q[token]), rank=path[-1])
            tree.candidates.setdefault(parent, []).append((node_of[path], None))
            new.append(node_of[path])
        grows = [node_of[p] for p in choices if len(p) == depth and p in node_of
                 and any(c[:-1] == p for c in choices if len(c) == depth + 1)]
        if grows:
            rows = drafter.tree_expand(grows, [tree.tokens[n] for n in grows], [tree.parents[n] for n in grows])
            tree.q_rows.update(zip(grows, rows))
        if not new:
            break
    return tree


def _children(tree: DraftTree, level: list[int], m: int, rule: str, generator) -> list[list]:
    """Each level node's children as (token, q_i, q(token)); top children of the whole level in one topk."""
    if rule != "top":
        out = []
        for node in level:
            q = tree.q_rows[node]
            out.append([(t, q_i, float(q[t])) for t, q_i in choose_children(q, m, rule, generator)])
        return out
    rows = torch.stack([tree.q_rows[node] for node in level])
    top = torch.topk(rows, min(m, rows.shape[-1]), dim=-1)
    return [[(t, None, v) for v, t in zip(vs, ts) if v > 0] for vs, ts in zip(top.values.tolist(), top.indices.tolist())]


def _grow_dynamic(drafter, committed, tree_cfg: TreeConfig, depth: int, value=None) -> DraftTree:
    """EAGLE-2's tree: expand the ``width`` most valuable nodes of each level, ``width`` children each, then keep
    the ``budget`` most valuable nodes of all drafted. A node's value is the product along its path of
    ``value(rank, q)`` (q itself without one): the chance the walk reaches and accepts it. A child is never worth
    more than its parent, so the kept nodes form a tree; nodes worth less than ``threshold`` are not drafted on."""
    width, pool = tree_cfg.width, DraftTree()  # every drafted node; the verified tree is a subset
    pool.q_rows[ROOT] = drafter.tree_start(committed)
    worth: list[float] = []
    level, rows, base = [ROOT], pool.q_rows[ROOT][None], [1.0]
    for d in range(depth):
        top = torch.topk(rows, min(width, rows.shape[-1]), dim=-1)  # every expanded node's top children at once
        new = []
        for node, b, qs, ids in zip(level, base, top.values.tolist(), top.indices.tolist()):
            for rank, (q, token) in enumerate(zip(qs, ids)):
                w = _worth(b, rank, q, value)
                if q > 0 and w > 0 and w >= tree_cfg.threshold:
                    new.append(pool.add(token, node, q, rank=rank))
                    worth.append(w)
        if not new or d + 1 == depth:
            break
        level = sorted(new, key=lambda n: -worth[n])[:width]
        rows = drafter.tree_expand(level, [pool.tokens[n] for n in level], [pool.parents[n] for n in level])
        pool.q_rows.update(zip(level, rows))
        base = [worth[n] for n in level]
    keep = sorted(range(len(pool)), key=lambda n: (-worth[n], pool.depths[n]))[: tree_cfg.budget]
    pool.values = dict(enumerate(worth))
    return _subtree(pool, sorted(keep, key=lambda n: (pool.depths[n], n)))


def _worth(parent: float, rank: int, q: float, value) -> float:
    """A child's value: its parent's times its own acceptance estimate ``value(rank, q)`` (q without one)."""
    return parent * (value(rank, q) if value is not None else q)


def _grow_dynamic_drawn(drafter, committed, tree_cfg: TreeConfig, depth: int, value, generator) -> DraftTree:
    """A sampled dynamic tree with children drawn from q without replacement (recursive rejection sampling verifies
    them exactly, in draw order). Which nodes get children, and how many, is fixed from the nodes' own values before
    their children are drawn: each level, the ``width`` most valuable nodes worth at least ``threshold`` draw
    ``width`` children each while the budget lasts, and every drawn child is verified."""
    tree = DraftTree()
    tree.q_rows[ROOT] = drafter.tree_start(committed)
    worth, level = {ROOT: 1.0}, [ROOT]
    for d in range(depth):
        new = []
        for node in level:
            m = min(tree_cfg.width, tree_cfg.budget - len(tree))
            if m <= 0:
                break
            q, tree.candidates[node] = tree.q_rows[node], []
            for rank, (token, q_i) in enumerate(choose_children(q, m, "distinct", generator)):
                q_x = float(q[token])
                child = tree.add(token, node, q_x, rank=rank)
                worth[child] = tree.values[child] = _worth(worth[node], rank, q_x, value)
                tree.candidates[node].append((child, q_i))
                new.append(child)
        level = [n for n in sorted(new, key=lambda n: -worth[n]) if worth[n] >= tree_cfg.threshold][: tree_cfg.width]
        if not level or d + 1 == depth or len(tree) >= tree_cfg.budget:
            break
        rows = drafter.tree_expand(level, [tree.tokens[n] for n in level], [tree.parents[n] for n in level])
        tree.q_rows.update(zip(level, rows))
    return tree


def _subtree(pool: DraftTree, keep: list[int]) -> DraftTree:
    """The nodes ``keep`` of pool (parents before children) as a tree of their own, children tried by q."""
    tree, new_id = DraftTree(), {ROOT: ROOT}
    tree.q_rows[ROOT] = pool.q_rows[ROOT]
    for n in keep:
        new_id[n] = tree.add(pool.tokens[n], new_id[pool.parents[n]], pool.q[n], draft_id=n, rank=pool.ranks[n])
        if n in pool.values:
            tree.values[new_id[n]] = pool.values[n]
        if n in pool.q_rows:
            tree.q_rows[new_id[n]] = pool.q_rows[n]
    for n in range(len(tree)):
        tree.candidates.setdefault(tree.parents[n], []).append((n, None))
    for kids in tree.candidates.values():
        kids.sort(key=lambda c: -tree.q[c[0]])
    return tree


@dataclass(frozen=True)
class Try:
    """One node's verification: p'(x) when tried, min(1, p'(x)/q_i(x)), u (None in greedy)."""

    p_adj: float
    accept_prob: float
    u: float | None


@dataclass(frozen=True)
class TreeVerdict:
    path: tuple[int, ...]  # accepted nodes, root's child first
    next_token: int  # drawn at the node where the walk stopped: residual (a rejection) or bonus (a leaf)
    rejected: bool  # the walk stopped at a node whose every candidate was rejected
    tries: dict[int, Try]  # node -> its (last) try; untried nodes are absent
    residual: torch.Tensor | None  # (V,) what a rejection's token was drawn from


def walk(tree: DraftTree, p: torch.Tensor, logits: torch.Tensor, cfg: DecodeConfig,
         generator: torch.Generator | None) -> TreeVerdict:
    """The accept step of a tree round. p, logits: (1 + len(tree), V), row 0 at the root, row 1 + i at node i."""
    if cfg.greedy:
        return _walk_greedy(tree, p, logits)
    node, path, tries = ROOT, [], {}
    while True:
        kids, row = tree.candidates.get(node, []), node + 1
        if not kids:  # a leaf: every drafted token on the path was accepted, the target's next one is free
            return TreeVerdict(tuple(path), int(sample(p[row], generator)), False, tries, None)
        v = verify_candidates(p[row], [tree.tokens[c] for c, _ in kids], [q for _, q in kids], generator)
        for i in range(len(v.u)):
            tries[kids[i][0]] = Try(v.p_adj[i], v.accept_prob[i], v.u[i])
        if v.accepted is None:
            return TreeVerdict(tuple(path), int(sample(v.residual, generator)), True, tries, v.residual)
        node = kids[v.accepted][0]
        path.append(node)


def _walk_greedy(tree: DraftTree, p: torch.Tensor, logits: torch.Tensor) -> TreeVerdict:
    """Greedy: from the root, follow the child equal to the target's argmax; the argmax where none is (or after a
    leaf) is the next token. Every row's argmax and every node's p in one pass each."""
    best = logits.argmax(-1).tolist()
    rows = torch.tensor(tree.parents, dtype=torch.long, device=p.device) + 1
    p_at = p[rows, torch.tensor(tree.tokens, dtype=torch.long, device=p.device)].tolist() if len(tree) else []
    node, path, tries = ROOT, [], {}
    while True:
        kids, row = tree.candidates.get(node, []), node + 1
        hit = next((c for c, _ in kids if tree.tokens[c] == best[row]), None)
        for c, _ in kids:
            tries[c] = Try(p_at[c], float(c == hit), None)
        if hit is None:  # no child is the argmax (a rejection), or a leaf (every token on the path accepted)
            return TreeVerdict(tuple(path), best[row], bool(kids), tries, None)
        node = hit
        path.append(node)
