"""A tree round as a figure: every drafted node by fate (the timeline's colours), the accepted path bold, the
token drawn at the stop node at its end; hover gives p, q, p', u and the decision in words.

Token texts come from the trace (an imported trace is untrusted): they are escaped before Plotly sees them.
"""
from __future__ import annotations

import html

import plotly.graph_objects as go

from ..records import TreeNode
from ..texts import shown
from ..trace import Round, Trace
from .style import COLOURS, INK, layout

FATES = {"accepted": ("accepted", COLOURS["accepted"]), "rejected": ("rejected", COLOURS["rejected"]),
         "unvisited": ("not visited", COLOURS["discarded"]), "resampled": ("resampled", COLOURS["resampled"]),
         "bonus": ("bonus", COLOURS["bonus"])}


def node_decision(node: TreeNode, greedy: bool) -> str:
    """What verification made of a node, in words, with its numbers."""
    if node.status == "unvisited":
        return "not tried: its parent was not accepted, or a sibling before it was"
    if greedy:
        return "= the target's argmax: accepted" if node.status == "accepted" else "≠ the target's argmax: rejected"
    a, u = _num(node.accept_prob), _num(node.u)
    if node.status == "accepted":
        return f"u = {u} < min(1, p′/q) = {a}: accepted"
    return f"u = {u} ≥ min(1, p′/q) = {a}: rejected; p′ ← norm(max(0, p′ − q)) for the next sibling"


def esc(x) -> str:
    """Plotly text is SVG, not HTML, but Plotly reads a few tags (<b>, <br>, <a href>) in it: escape <, > and &
    (Plotly turns the entities back into the characters; it does not know &quot;, so quotes stay as they are)."""
    return html.escape(str(x), quote=False)


def _num(x) -> str:
    return "–" if x is None else f"{x:.3g}"


def tree_layout(parents: list[int]) -> tuple[list[float], float]:
    """y of every node (leaves one apart in depth-first order, a parent at the mean of its children) and the
    root's y."""
    children: dict[int, list[int]] = {}
    for i, parent in enumerate(parents):
        children.setdefault(parent, []).append(i)
    y = [0.0] * len(parents)
    root = _assign(children, y, -1, [0.0])
    return y, root


def _assign(children: dict, y: list[float], node: int, leaf: list[float]) -> float:
    kids = children.get(node, [])
    if not kids:
        leaf[0] += 1
        value = leaf[0] - 1
    else:
        value = sum(_assign(children, y, k, leaf) for k in kids) / len(kids)
    if node >= 0:
        y[node] = value
    return value


def tree_figure(trace: Trace, r: Round) -> go.Figure:
    """The round's tree from the root (the last committed token) rightwards, one column per depth."""
    nodes, greedy = r.tree.nodes, trace.config.greedy
    y, root_y = tree_layout([n.parent for n in nodes])
    on_path = set(r.tree.path)
    fig = go.Figure()
    for bold in (False, True):  # thin edges first, the accepted path drawn over them
        xs, ys = [], []
        for i, n in enumerate(nodes):
            if (i in on_path) == bold:
                px, py = (0, root_y) if n.parent == -1 else (nodes[n.parent].depth + 1, y[n.parent])
                xs += [px, n.depth + 1, None]
                ys += [py, y[i], None]
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", hoverinfo="skip", showlegend=False,
                                 line=dict(color=COLOURS["accepted"] if bold else INK, width=4 if bold else 1)))
    stop = r.tree.path[-1] if r.tree.path else -1
    extra = _emitted_point(trace, r, stop, nodes, y, root_y)
    if extra:  # a dashed edge from the stop node to the token drawn there (below its children, never on them)
        sx, sy = (0, root_y) if stop == -1 else (nodes[stop].depth + 1, y[stop])
        fig.add_trace(go.Scatter(x=[sx, extra[0][2]], y=[sy, extra[0][3]], mode="lines", hoverinfo="skip",
                                 showlegend=False, line=dict(color=FATES[extra[0][1]][1], width=2, dash="dot")))
    texts = trace.texts().rounds[r.index]
    points = [(i, n.status, n.depth + 1, y[i], shown(texts.nodes[i]), _hover(texts.nodes[i], n, greedy))
              for i, n in enumerate(nodes)]
    fig.add_trace(go.Scatter(x=[0], y=[root_y], mode="markers+text", text=["root"], textposition="middle left",
                             marker=dict(color=INK, size=10), hovertext=["the last committed token"],
                             hoverinfo="text", showlegend=False))
    for status, (label, colour) in FATES.items():
        pts = [p for p in points + extra if p[1] == status]
        fig.add_trace(go.Scatter(
            x=[p[2] for p in pts], y=[p[3] for p in pts], mode="markers+text", name=label,
            text=[esc(_short(p[4])) for p in pts], textposition="middle right", hovertext=[p[5] for p in pts],
            hoverinfo="text", marker=dict(color=colour, size=12, line=dict(width=1, color="white"))))
    layout(fig, f"Round {r.index + 1}: {len(nodes)} nodes verified in one target pass, {len(r.tree.path)} accepted",
           "depth (drafted tokens after the committed text)", "")
    fig.update_yaxes(visible=False)
    fig.update_xaxes(dtick=1, range=[-0.6, max((n.depth for n in nodes), default=0) + 2.8])
    fig.update_layout(height=max(280, 28 * (len([n for n in nodes if n.parent != -1]) // 2 + 6)))
    return fig


def _emitted_point(trace: Trace, r: Round, stop: int, nodes, y, root_y) -> list:
    """The resampled or bonus token, placed one column right of the node where the walk stopped."""
    token = r.resampled if r.resampled is not None else r.bonus
    if token is None:
        return []
    status = "resampled" if r.resampled is not None else "bonus"
    depth = 0 if stop == -1 else nodes[stop].depth + 1
    why = ("every child of this node was rejected: drawn from the adjusted target p′" if status == "resampled"
           else "the path reached a leaf: a free token from the target's p")
    emitted = trace.texts().rounds[r.index].emitted
    text = emitted[len(r.tree.path)] if len(emitted) > len(r.tree.path) else trace.text(token)
    hover = esc(f"{text!r} — {status}, p = {_num(r.next_p)}") + "<br>" + esc(why)
    return [(None, status, depth + 1, (root_y if stop == -1 else y[stop]) - 0.45, shown(text), hover)]


def _hover(text: str, n: TreeNode, greedy: bool) -> str:
    lines = [f"{text!r} at depth {n.depth + 1}" if text else f"token {n.token} at depth {n.depth + 1} (part of a character)",
             f"q = {_num(n.q)}   p = {_num(n.p)}   p′ = {_num(n.p_adj)}   u = {_num(n.u)}",
             node_decision(n, greedy)]
    if n.value is not None:
        lines.insert(2, f"drafted as {100 * n.value:.0f}% likely to be reached and accepted (from earlier verdicts)")
    return "<br>".join(esc(line) for line in lines)


def _short(text: str, n: int = 12) -> str:
    shown = text.replace("\n", "↵").replace("\t", "→")
    return shown if len(shown) <= n else shown[: n - 1] + "…"

