"""The conformance card's figure: a pure function from its tests table (``specviz.conformance.read_card`` or
``Card.tests``) to a Plotly figure."""
from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from .style import colour, layout


def pvalue_figure(tests: pd.DataFrame, alpha: float = 0.05) -> go.Figure:
    """-log10 of each tested row's Holm-adjusted p-value per position, one colour per test kind, the flag line at
    alpha; bars above it are flagged. Untested rows (the prefill token, skipped conditionals) are left out."""
    fig = go.Figure()
    rows = tests[tests.tested.astype(bool)]
    for i, (kind, g) in enumerate(rows.groupby("kind", sort=True)):
        x = [f"{r.prompt_id} pos {r.position}" for r in g.itertuples()]
        y = -np.log10(np.clip(g.p_holm.astype(float), 1e-300, 1))
        fig.add_trace(go.Bar(x=x, y=y, name=kind, marker_color=colour(i),
                             hovertemplate="%{x}: -log10 p (Holm) = %{y:.2f}<extra>" + kind + "</extra>"))
    fig.add_hline(y=-np.log10(alpha), line_dash="dash", annotation_text=f"flag above: p (Holm) < {alpha:g}")
    fig.update_layout(barmode="group")
    return layout(fig, "Speculation on against off: one test per position", "position tested",
                  "-log10 p (Holm-adjusted)")
