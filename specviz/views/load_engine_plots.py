"""An engine's runs under load (``specviz.engines.load_doctor.load_frame``): pure DataFrame -> Figure."""
from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .compare_plots import METHOD_COLOURS
from .style import INK, colour, layout

SPECULATION = {"on": "speculative", "off": "autoregressive"}


def load_figure(frame: pd.DataFrame, crossover: tuple[int, int] | None = None) -> go.Figure:
    """Generated tokens/s (left) and mean acceptance length (right) against the load each interval printed, one
    marker per interval, one series per run; ``crossover``: (last load that paid, first that did not), shaded.

    frame: ``load_frame``'s columns (run, speculation, load, load_kind, tokens_per_s, mean_length, ...)."""
    if frame.empty:
        raise ValueError("no interval printed a load: nothing to chart against load")
    fig = make_subplots(rows=1, cols=2, subplot_titles=("generated tokens / s (whole server)",
                                                        "mean acceptance length (bonus included)"))
    for i, (run, rows) in enumerate(frame.sort_values("load").groupby("run", sort=False)):
        on = rows["speculation"].iloc[0]
        line = dict(color=METHOD_COLOURS[SPECULATION[on]] if frame["run"].nunique() <= 2 else colour(i),
                    dash="solid" if on == "on" else "dot")
        name = f"{run} (speculation {on})"
        fig.add_trace(go.Scatter(x=rows["load"], y=rows["tokens_per_s"], mode="markers+lines", name=name,
                                 line=line, legendgroup=name), row=1, col=1)
        if rows["mean_length"].notna().any():
            fig.add_trace(go.Scatter(x=rows["load"], y=rows["mean_length"], mode="markers+lines", name=name,
                                     line=line, legendgroup=name, showlegend=False), row=1, col=2)
    if crossover is not None:
        fig.add_vrect(x0=crossover[0], x1=crossover[1], fillcolor=INK, opacity=0.15, line_width=0, row=1, col=1,
                      annotation_text="stops paying here", annotation_position="top left")
    kind = frame["load_kind"].iloc[0]
    fig.update_xaxes(title_text=kind, type="log")
    return layout(fig, f"Speculation against load ({kind})", kind, "")
