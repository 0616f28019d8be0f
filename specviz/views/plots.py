"""Figures: pure functions from a DataFrame (``Trace.to_frame()`` or ``rounds_frame``) to a Plotly figure.

Notation: p target probability, q draft probability, u uniform draw, min(1, p/q) the acceptance
probability of a draft (Leviathan et al. 2023).
"""
from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from ..theory import expected_speedup, expected_tokens
from .style import COLOURS, INK, layout

ROUND_COLUMNS = ["round", "k", "drafted", "n_accepted", "emitted", "draft_s", "target_s", "wall_s", "draft_head_s",
                 "target_head_s"]


def rounds_frame(trace) -> pd.DataFrame:
    """One row per round: k requested, tokens drafted, accepted and emitted, and its timings (the LM heads' shares
    NaN where the forward could not time its head apart)."""
    nan = float("nan")
    rows = [[r.index, r.k, len(r.drafted), r.n_accepted, len(r.emitted), r.draft_s, r.target_s, r.wall_s,
             nan if r.draft_head_s is None else r.draft_head_s, nan if r.target_head_s is None else r.target_head_s]
            for r in trace.rounds]
    return pd.DataFrame(rows, columns=ROUND_COLUMNS)



def acceptance_by_position(tokens: pd.DataFrame) -> go.Figure:
    """Per draft position i, both ways: accepted / drafted (every draft at i counts, so it falls with i by
    construction: position i needs 1..i-1 accepted too) and accepted / reached (only drafts whose earlier ones were
    all accepted, i.e. verified: the draft's own quality at depth i). Chain rounds only (tree nodes have their own
    figure)."""
    drafted = tokens[tokens["drafted"]]
    if "node" in drafted:
        drafted = drafted[drafted["node"].isna()]
    reached = drafted[drafted["status"].isin(["accepted", "rejected"])]
    fig = go.Figure()
    for frame, name, colour, what in ((drafted, "accepted / drafted", COLOURS["accepted"], "drafts"),
                                      (reached, "accepted / reached (1..i−1 accepted)", COLOURS["bonus"], "reached")):
        rate = frame.groupby("position")["status"].apply(lambda s: (s == "accepted").mean())
        count = frame.groupby("position").size()
        fig.add_trace(go.Bar(x=[int(i) + 1 for i in rate.index], y=rate.to_numpy(dtype=float), name=name,
                             marker_color=colour, customdata=count.to_numpy(),
                             hovertemplate=f"position %{{x}}: %{{y:.2f}} of %{{customdata}} {what} accepted<extra></extra>"))
    fig.update_layout(barmode="group")
    fig.update_yaxes(range=[0, 1])
    return layout(fig, "Acceptance per draft position, both ways", "draft position", "rate")


def tokens_per_round(rounds: pd.DataFrame) -> go.Figure:
    """Histogram of tokens emitted per round (1 = the first draft was rejected; k+1 = all accepted)."""
    counts = rounds["emitted"].value_counts().sort_index()
    fig = go.Figure(go.Bar(x=counts.index.to_numpy(), y=counts.to_numpy(), marker_color=COLOURS["bonus"],
                           hovertemplate="%{y} rounds emitted %{x} tokens<extra></extra>"))
    fig.update_xaxes(dtick=1)
    return layout(fig, "Tokens emitted per round", "tokens emitted", "rounds")


def p_vs_q(tokens: pd.DataFrame) -> go.Figure:
    """Each drafted token at (q, p), coloured by its fate; above the diagonal p > q: always accepted."""
    drafted = tokens[tokens["drafted"]]
    fig = go.Figure(go.Scatter(x=[0, 1], y=[0, 1], mode="lines", name="p = q",
                               line=dict(color="#888", dash="dot"), hoverinfo="skip"))
    for status in ("accepted", "rejected", "discarded"):
        part = drafted[drafted["status"] == status]
        fig.add_trace(go.Scatter(
            x=part["q"], y=part["p"], mode="markers", name=status, marker=dict(color=COLOURS[status], size=8),
            text=part["text"].map(repr), customdata=part["round"] + 1,  # rounds counted from 1, as the timeline
            hovertemplate="%{text}<br>q = %{x:.3f}, p = %{y:.3f}<br>round %{customdata}<extra>" + status + "</extra>"))
    fig.update_xaxes(range=[0, 1.02])
    fig.update_yaxes(range=[0, 1.02])
    return layout(fig, "p against q, per drafted token", "q (draft)", "p (target)")


def round_times(rounds: pd.DataFrame) -> go.Figure:
    """Stacked bars: time per round spent drafting and verifying (one target forward), each split into its layers
    and its LM head where the forward timed the head apart (columns draft_head_s, target_head_s; NaN: not split)."""
    fig, split = go.Figure(), False
    for part, colour, head_colour in (("draft", "#a855f7", "#d8b4fe"), ("target", "#0ea5e9", "#7dd3fc")):
        total = rounds[f"{part}_s"]
        head = rounds[f"{part}_head_s"] if f"{part}_head_s" in rounds else total * float("nan")
        bars = [(total, part, colour)]
        if head.notna().any():
            bars, split = [(total.where(head.isna(), total - head), f"{part} layers", colour),
                           (head, f"{part} LM head", head_colour)], True
        for y, name, c in bars:
            fig.add_trace(go.Bar(x=rounds["round"] + 1, y=y * 1e3, name=name, marker_color=c,
                                 hovertemplate="round %{x}: %{y:.2f} ms<extra>" + name + "</extra>"))
    fig.update_layout(barmode="stack")
    return layout(fig, "Time per round: draft vs target" + (", layers vs LM head" if split else ""), "round", "ms")


def accept_line(round_tokens: pd.DataFrame, block: bool = False) -> go.Figure:
    """One round: min(1, p/q) per draft position (bars) and the uniform draw u (markers).
    Sampling accepts a draft when u < min(1, p/q): markers inside their bar were accepted. ``block``: a
    block-verified round's bars are h_i (block verification keeps the longest prefix i with u_i < h_i)."""
    d = round_tokens[round_tokens["drafted"]]
    x = d["position"].to_numpy() + 1
    colours = [COLOURS[s] for s in d["status"]]
    name = "h (block)" if block else "min(1, p/q)"
    fig = go.Figure(go.Bar(x=x, y=d["accept_prob"], name=name, marker_color=colours, opacity=0.55,
                           hovertemplate="position %{x}: " + name + " = %{y:.3f}<extra></extra>"))
    fig.add_trace(go.Scatter(x=x, y=d["u"], mode="markers", name="u", marker=dict(symbol="x", size=13, color="#111827",
                             line=dict(width=1.5, color="#f9fafb")),
                             hovertemplate="position %{x}: u = %{y:.3f}<extra></extra>"))
    fig.update_yaxes(range=[0, 1.05])
    fig.update_xaxes(dtick=1)
    title = ("Block verification: u against h, the longest prefix with u < h kept" if block
             else "Accept line: u against min(1, p/q)")
    return layout(fig, title, "draft position", "probability")


def residual_bars(residual: pd.DataFrame) -> go.Figure:
    """Top tokens of the residual norm(max(0, p - q)) at a rejection, beside their p and q.
    Columns: text, residual, p, q. An empty frame (no rejection) gives an annotated empty figure."""
    fig = go.Figure()
    for col, name, colour in (("residual", "residual", COLOURS["resampled"]), ("p", "p (target)", "#0ea5e9"),
                              ("q", "q (draft)", "#a855f7")):
        fig.add_trace(go.Bar(x=residual["text"], y=residual[col], name=name, marker_color=colour,
                             hovertemplate="%{x}: %{y:.3f}<extra>" + name + "</extra>"))
    fig.update_layout(barmode="group")
    fig = layout(fig, "Residual at the rejection: top tokens", "token", "probability")
    if residual.empty:  # a note, not an empty pair of axes
        fig.add_annotation(text="No rejection this round: every draft passed, nothing was resampled (the bonus "
                                "token came from p).", showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")
        fig.update_xaxes(visible=False).update_yaxes(visible=False).update_layout(showlegend=False)
    return fig


def residual_frame(trace, index: int) -> pd.DataFrame:
    """Round ``index``'s recorded residual top: token, text, residual, p, q."""
    r = trace.rounds[index]
    rows = [[t, repr(trace.text(t)), res, p, q] for t, res, p, q in r.residual_top]
    return pd.DataFrame(rows, columns=["token", "text", "residual", "p", "q"])


def theory_curves(alpha: float, k: int, c: float, v: float, run: tuple[float, float] | None = None) -> go.Figure:
    """Leviathan's expected tokens per round and speedup against k for the given alpha, c and v (the chosen k
    marked), with a run's measured (k, speedup) point if given: from what a run did to what would happen if."""
    ks = list(range(1, 17))
    tau = [expected_tokens(alpha, j) for j in ks]
    speed = [expected_speedup(alpha, j, c, v) for j in ks]
    fig = go.Figure([
        go.Scatter(x=ks, y=tau, mode="lines", name="E[τ] tokens per round", line=dict(color=COLOURS["bonus"]),
                   hovertemplate="k=%{x}: %{y:.2f} tokens per round<extra></extra>"),
        go.Scatter(x=ks, y=speed, mode="lines", name="speedup", line=dict(color=COLOURS["accepted"], width=3),
                   hovertemplate="k=%{x}: %{y:.2f}×<extra></extra>"),
        go.Scatter(x=[k], y=[expected_speedup(alpha, k, c, v)], mode="markers", name=f"k = {k}",
                   marker=dict(color=COLOURS["accepted"], size=12, symbol="diamond")),
    ])
    if run is not None:
        fig.add_trace(go.Scatter(x=[run[0]], y=[run[1]], mode="markers", name="this run, measured",
                                 marker=dict(color=COLOURS["resampled"], size=13, symbol="x")))
    fig.add_hline(y=1.0, line=dict(color=INK, dash="dot"))
    fig.update_xaxes(dtick=1)
    return layout(fig, f"What if: α = {alpha:.2f}, c = {c:.2f}, v = {v:.2f}", "k (drafts per round)",
                  "tokens per round · speedup")
