"""The Batch tab's figure: a pure function from the batch benchmark's frame to a Plotly figure."""
from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from .plots import _layout

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
    return _layout(fig, "Throughput against batch size", "batch size (prompts decoded together)",
                   "generated tokens / s (all rows)")
