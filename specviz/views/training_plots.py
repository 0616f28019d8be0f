"""A trainer's per-position accuracy beside serving's acceptance, as a figure: a pure function of
``specviz.drafts.trained.training.beside``'s table (kind, position, training, serving, n, noise). One colour per kind
of trained rate (full_acc, cond_acc, a per-position accuracy); the trainer's dashed, the run's solid with two
standard errors."""
from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from .style import colour, layout

NAMES = {"full": "full_acc (all of steps 1..i right)", "cond": "cond_acc (step i right, given 1..i-1)",
         "step": "per-position accuracy"}
SERVING = {"full": "accepted / drafted", "cond": "accepted / reached", "step": "accepted / reached"}


def training_vs_serving_figure(frame: pd.DataFrame) -> go.Figure:
    """Per draft position, each kind of trained rate (dashed) beside the run's matching rate (solid, with error
    bars of two standard errors)."""
    if frame.empty:
        raise ValueError("nothing to draw: no draft position in common between the trainer's metrics and the run")
    fig = go.Figure()
    for i, (kind, g) in enumerate(frame.groupby("kind", sort=True)):
        g = g.sort_values("position")
        fig.add_trace(go.Scatter(x=g.position, y=g.training, mode="lines+markers", name=f"training: {NAMES[kind]}",
                                 line=dict(color=colour(i), dash="dash"),
                                 hovertemplate="position %{x}: %{y:.3f} in training<extra></extra>"))
        fig.add_trace(go.Scatter(x=g.position, y=g.serving, mode="lines+markers", name=f"serving: {SERVING[kind]}",
                                 line=dict(color=colour(i)), customdata=g.n,
                                 error_y=dict(type="data", array=g.noise, visible=True),
                                 hovertemplate="position %{x}: %{y:.3f} of %{customdata} in this run<extra></extra>"))
    fig.update_xaxes(dtick=1)
    fig.update_yaxes(range=[0, 1.05])
    return layout(fig, "Training's accuracy beside serving's acceptance, per draft position", "draft position", "rate")
