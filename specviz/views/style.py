"""One look for every figure: the timeline's status colours, a palette for series, and ``layout``.

Transparent backgrounds let the page's theme (light or dark) show through; text and grid use a grey that
reads on both."""
from __future__ import annotations

import plotly.graph_objects as go

COLOURS = {  # the timeline's colours, so a status looks the same everywhere
    "accepted": "#16a34a", "rejected": "#dc2626", "discarded": "#9ca3af", "resampled": "#ea580c", "bonus": "#2563eb",
}
PALETTE = ["#2563eb", "#dc2626", "#16a34a", "#a855f7", "#ea580c", "#0891b2", "#be185d", "#4b5563"]
INK = "#8b93a1"  # text, axes and neutral marks: readable on gradio's light and dark themes alike
GRID = "rgba(139, 147, 161, 0.25)"


def colour(i: int) -> str:
    """The i-th series colour (cycling)."""
    return PALETTE[i % len(PALETTE)]


def layout(fig: go.Figure, title: str, x: str, y: str) -> go.Figure:
    """Titles and the shared look, applied to ``fig`` (returned for chaining)."""
    fig.update_layout(title=title, xaxis_title=x, yaxis_title=y, template="plotly_white", height=320,
                      margin=dict(l=50, r=20, t=50, b=45), legend=dict(orientation="h", y=-0.25),
                      paper_bgcolor="rgba(0,0,0,0)", plot_bgcolor="rgba(0,0,0,0)", font=dict(color=INK))
    fig.update_xaxes(gridcolor=GRID, zerolinecolor=GRID, linecolor=GRID)
    fig.update_yaxes(gridcolor=GRID, zerolinecolor=GRID, linecolor=GRID)
    return fig
