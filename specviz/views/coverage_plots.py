"""What a pruned draft vocabulary cannot say, as a figure: a pure function of
``specviz.drafts.trained.coverage.coverage_frame``'s table (prompt, position, outside). p is the target's law; at
each position beta = sum min(p, q) <= 1 - outside, so acceptance is bounded by one minus the mean drawn here."""
from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from .style import colour, layout


def coverage_figure(frame: pd.DataFrame) -> go.Figure:
    """The target's mass outside the draft vocabulary at every position, one line per prompt, the mean dotted."""
    if frame.empty:
        raise ValueError("no positions to draw: the coverage table is empty")
    fig = go.Figure()
    for i, (prompt, g) in enumerate(frame.groupby("prompt", sort=True)):
        fig.add_trace(go.Scatter(x=g.position, y=g.outside, mode="lines+markers", name=f"prompt {prompt}",
                                 line=dict(color=colour(i)),
                                 hovertemplate="position %{x}: %{y:.3f} outside<extra>prompt " + f"{prompt}</extra>"))
    mean = float(frame.outside.mean())
    fig.add_hline(y=mean, line=dict(color="#888", dash="dot"))
    fig.update_yaxes(range=[0, max(1e-3, float(frame.outside.max())) * 1.1])
    return layout(fig, f"Target mass outside the draft vocabulary: mean {mean:.3f}, so acceptance <= {1 - mean:.3f}",
                  "position", "p(outside the draft vocabulary)")
