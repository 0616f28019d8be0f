"""The Compare drafts and Batch tabs' figures: pure functions from ``compare.compare_table`` (one row per draft) or
``compare.disagreement_frame`` (token, text, p, one ``q <name>`` column per draft) to a Plotly figure.
Notation: p target, q draft, tau tokens per round."""
from __future__ import annotations

import math

import pandas as pd
import plotly.graph_objects as go

from .style import PALETTE, colour, layout

TARGET_COLOUR = "#0ea5e9"
DASHES, PATTERNS = ("solid", "dash", "dot", "dashdot"), ("", "/", ".", "x")  # the palette's 2nd, 3rd, 4th time round
SHORT_NAME, ROW_PX = 18, 19  # names two legend entries a row hold in a third of a 1024 px page; a row's height


def series_legend(fig: go.Figure) -> go.Figure:
    """One legend entry per series, in rows under the whole figure (the container's bottom), below the x axis's
    title, never over it or the plot: two a row where every name is short, else one; the figure grows by its rows."""
    names = [t.name or "" for t in fig.data if t.showlegend is not False]
    per_row = 2 if max(map(len, names), default=0) <= SHORT_NAME else 1
    rows = math.ceil(len(names) / per_row)
    fig.update_layout(legend=dict(orientation="h", yref="container", y=0, yanchor="bottom", x=0, xanchor="left",
                                  entrywidth=1 / per_row, entrywidthmode="fraction"),
                      height=320 + rows * ROW_PX, margin=dict(b=60 + rows * ROW_PX))
    return fig


def _turn(i: int) -> int:
    """How many times the palette has come round before series i (0 for the first len(PALETTE))."""
    return (i // len(PALETTE)) % len(DASHES)


def position_columns(table: pd.DataFrame) -> list[str]:
    return sorted((c for c in table.columns if c.startswith("accept@")), key=lambda c: int(c.split("@")[1]))


def acceptance_by_position(table: pd.DataFrame) -> go.Figure:
    """P(draft position i accepted | drafted), one line per draft."""
    cols, fig = position_columns(table), go.Figure()
    for i, (_, row) in enumerate(table.iterrows()):
        fig.add_trace(go.Scatter(x=list(range(1, len(cols) + 1)), y=row[cols].astype(float).tolist(),
                                 mode="lines+markers", name=row.draft,
                                 line=dict(color=colour(i), dash=DASHES[_turn(i)]),
                                 hovertemplate="position %{x}: %{y:.2f} accepted<extra>" + row.draft + "</extra>"))
    fig.update_yaxes(range=[0, 1.05])
    fig.update_xaxes(dtick=1)
    layout(fig, "Acceptance rate per draft position", "draft position", "accepted / drafted")
    return series_legend(fig)


def _bars(table: pd.DataFrame, column: str, title: str, y: str, fmt: str) -> go.Figure:
    fig = go.Figure(go.Bar(x=table.draft, y=table[column], marker_color=[colour(i) for i in range(len(table))],
                           text=[format(v, fmt) for v in table[column]], textposition="auto",
                           hovertemplate="%{x}: %{y:" + fmt + "}<extra></extra>"))
    return layout(fig, title, "draft", y)


def speedup_bars(table: pd.DataFrame) -> go.Figure:
    """Measured speedup per draft over the autoregressive baseline run in the same call; 1 = no gain. Where the table
    has the range of single pairs (``speedup_min``, ``speedup_max``), error bars span it."""
    fig = _bars(table, "speedup", "Speedup over the autoregressive baseline", "× baseline tokens/s", ".2f")
    if {"speedup_min", "speedup_max"} <= set(table.columns):
        fig.update_traces(error_y=dict(type="data", symmetric=False, color="#444",
                                       array=(table.speedup_max - table.speedup).clip(lower=0).tolist(),
                                       arrayminus=(table.speedup - table.speedup_min).clip(lower=0).tolist()))
    fig.add_hline(y=1.0, line=dict(color="#888", dash="dot"), annotation_text="baseline")
    return fig


def tau_bars(table: pd.DataFrame) -> go.Figure:
    """tau, tokens per round (target forwards saved), per draft; 1 = every first draft rejected."""
    fig = _bars(table, "tau", "τ: tokens per round", "tokens / round", ".2f")
    fig.add_hline(y=1.0, line=dict(color="#888", dash="dot"))
    return fig


def disagreement_bars(frame: pd.DataFrame) -> go.Figure:
    """Grouped bars per token: the target's p, then each draft's q."""
    fig = go.Figure(go.Bar(x=frame.text, y=frame.p, name="p (target)", marker_color=TARGET_COLOUR,
                           hovertemplate="%{x}: p = %{y:.3f}<extra></extra>"))
    drafts = [c for c in frame.columns if c.startswith("q ")]
    for i, col in enumerate(drafts):
        fig.add_trace(go.Bar(x=frame.text, y=frame[col], name=col, marker_color=colour(i),
                             marker_pattern_shape=PATTERNS[_turn(i)],
                             hovertemplate="%{x}: %{y:.3f}<extra>" + col + "</extra>"))
    fig.update_layout(barmode="group")
    fig.update_yaxes(range=[0, 1.02])
    layout(fig, "Next-token probabilities: target p against each draft's q", "token", "probability")
    return series_legend(fig)


# -- the Batch tab ---------------------------------------------------------------------------------
METHOD_COLOURS = {"speculative": "#16a34a", "autoregressive": "#6b7280"}


def tokens_per_s_by_batch(frame: pd.DataFrame) -> go.Figure:
    """Tokens/s against batch size, one line per method.

    frame: ``batch_bench.run_batch_bench``'s columns (batch_size, method, tokens_per_s, ...), one row per
    (batch size, method)."""
    fig = go.Figure()
    for method, rows in frame.sort_values("batch_size").groupby("method", sort=False):
        fig.add_trace(go.Scatter(x=rows.batch_size, y=rows.tokens_per_s, mode="lines+markers", name=method,
                                 line=dict(color=METHOD_COLOURS.get(method))))
    fig.update_xaxes(type="log", tickvals=sorted(frame.batch_size.unique()))
    return layout(fig, "Throughput against batch size", "batch size (prompts decoded together)",
                   "generated tokens / s (all rows)")
