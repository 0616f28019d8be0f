"""The Load lab's charts (``specviz.labs.load``): pure DataFrame -> Figure."""
from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from .compare_plots import METHOD_COLOURS
from .style import INK, layout

MODEL_COLOUR = "#a855f7"


def throughput_by_batch(summary: pd.DataFrame) -> go.Figure:
    """Tokens/s against batch size, both methods, each with its range over the repeats as error bars.

    summary: ``load.summarize``'s columns (batch, spec_tps, spec_min, spec_max, ar_tps, ar_min, ar_max, ...)."""
    fig = go.Figure()
    for method, col in (("speculative", "spec"), ("autoregressive", "ar")):
        mid = summary[f"{col}_tps"]
        fig.add_trace(go.Scatter(
            x=summary.batch, y=mid, mode="lines+markers", name=method, line=dict(color=METHOD_COLOURS[method]),
            error_y=dict(type="data", symmetric=False, array=summary[f"{col}_max"] - mid,
                         arrayminus=mid - summary[f"{col}_min"])))
    fig.update_xaxes(type="log", tickvals=list(summary.batch))
    return layout(fig, "Throughput against batch size (median, range over repeats)", "batch size (requests decoded "
                  "together)", "generated tokens / s (all requests)")


def speedup_by_batch(summary: pd.DataFrame, measured_batch: int | None, model_batch: int | None) -> go.Figure:
    """The measured speedup (median and range) and the model's, against batch size; 1 (break-even) and the
    crossovers marked.

    summary: ``load.summarize``'s columns plus model_speedup; the crossover batches (None: none in range)."""
    fig = go.Figure()
    mid = summary.speedup
    fig.add_trace(go.Scatter(
        x=summary.batch, y=mid, mode="lines+markers", name="measured", line=dict(color=METHOD_COLOURS["speculative"]),
        error_y=dict(type="data", symmetric=False, array=summary.speedup_max - mid, arrayminus=mid - summary.speedup_min)))
    fig.add_trace(go.Scatter(x=summary.batch, y=summary.model_speedup, mode="lines+markers", name="goodput model",
                             line=dict(color=MODEL_COLOUR, dash="dash")))
    fig.add_hline(y=1.0, line=dict(color=INK, dash="dot"), annotation_text="break-even")
    for batch, who, colour in ((measured_batch, "measured", METHOD_COLOURS["speculative"]),
                               (model_batch, "model", MODEL_COLOUR)):
        if batch is not None:
            fig.add_vline(x=batch, line=dict(color=colour, dash="dot"), annotation_text=f"crossover ({who}): {batch}")
    fig.update_xaxes(type="log", tickvals=list(summary.batch))
    return layout(fig, "Speedup against batch size: where speculation stops paying", "batch size",
                  "speculative / autoregressive tokens/s")


def verify_surface(passes: pd.DataFrame) -> go.Figure:
    """The target's pass time, rows per request (1 = a plain step, k + 1 = a verify pass) x batch size, as a
    heatmap of ms over the one-row pass of the same batch.

    passes: ``load.surface``'s columns (model, batch, width, ms, ...)."""
    target = passes[passes.model == "target"]
    ms = target.pivot(index="width", columns="batch", values="ms").sort_index()
    ratio = ms / ms.loc[ms.index.min()]
    fig = go.Figure(go.Heatmap(
        z=ratio.values, x=[str(b) for b in ratio.columns], y=[str(w) for w in ratio.index], colorscale="Viridis",
        colorbar=dict(title="x one row"), text=ms.round(1).values,
        hovertemplate="batch %{x}, %{y} rows a request: %{text} ms (%{z:.2f}x one row)<extra></extra>"))
    return layout(fig, "Verify cost: a pass of B requests x rows, over one row each", "batch size",
                  "rows a request (pending token + drafts)")
