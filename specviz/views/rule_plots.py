"""The rule lab's figures: pure functions from ``labs.rules.rules_lab``'s table to Plotly figures.
Notation: p target, q draft; alpha the chance a verified draft is accepted; TV the total variation of the emitted
token's law from p (0 for lossless rules)."""
from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from .style import colour, layout
from .tables import rule_name


def _label(row_rule: str, lossless: bool) -> str:
    name = rule_name(row_rule)
    return name if lossless or name.endswith("(lossy)") else f"{name} (lossy)"


def acceptance_vs_temperature(lab: pd.DataFrame) -> go.Figure:
    """Measured alpha (accepted / verified) per rule against T, the closed form dashed beside it."""
    fig = go.Figure()
    for i, (rule, g) in enumerate(lab.groupby("rule", sort=False)):
        name, ink = _label(rule, bool(g.lossless.iloc[0])), colour(i)
        fig.add_trace(go.Scatter(x=g.temperature, y=g.alpha, mode="lines+markers", name=name, line=dict(color=ink),
                                 hovertemplate="T=%{x}: %{y:.3f} measured<extra>" + name + "</extra>"))
        fig.add_trace(go.Scatter(x=g.temperature, y=g.alpha_closed, mode="lines", line=dict(color=ink, dash="dash"),
                                 name=f"{name} closed form", showlegend=False,
                                 hovertemplate="T=%{x}: %{y:.3f} closed form<extra>" + name + "</extra>"))
    fig.update_yaxes(range=[0, 1.05])
    return layout(fig, "Acceptance against temperature per rule (dashed: closed form)", "temperature",
                  "accepted / verified")


def tv_vs_temperature(lab: pd.DataFrame) -> go.Figure:
    """Lossy rules: TV(law, p) per token over the visited contexts, and the fixed-context Monte Carlo (markers)."""
    fig = go.Figure()
    lossy = lab[~lab.lossless.astype(bool)]
    for i, (rule, g) in enumerate(lossy.groupby("rule", sort=False)):
        ink, rule = colour(i + 4), rule_name(rule)
        fig.add_trace(go.Scatter(x=g.temperature, y=g.tv_closed, mode="lines+markers", name=f"{rule} (visited)",
                                 line=dict(color=ink), hovertemplate="T=%{x}: TV %{y:.3f}<extra>" + rule + "</extra>"))
        fig.add_trace(go.Scatter(x=g.temperature, y=g.mc_tv, mode="markers", name=f"{rule} (one context, sampled)",
                                 marker=dict(color=ink, symbol="x", size=10),
                                 hovertemplate="T=%{x}: TV %{y:.3f} Monte Carlo<extra>" + rule + "</extra>"))
    return layout(fig, "What lossy rules cost in truth: TV of the emitted token's law from p", "temperature",
                  "total variation")


def speedup_by_rule(lab: pd.DataFrame) -> go.Figure:
    """tau / (k c + v) per rule, one bar per temperature (c and v measured on this machine)."""
    fig = go.Figure()
    for i, (t, g) in enumerate(lab.groupby("temperature", sort=True)):
        names = [_label(r, bool(ok)) for r, ok in zip(g.rule, g.lossless)]
        fig.add_trace(go.Bar(x=names, y=g.speedup, name=f"T = {t:g}", marker_color=colour(i),
                             hovertemplate="%{x}: %{y:.2f}x<extra>T = " + f"{t:g}" + "</extra>"))
    fig.add_hline(y=1.0, line=dict(color="#888", dash="dot"))
    fig.update_layout(barmode="group")
    return layout(fig, "Expected speedup per rule: tau / (k c + v), c and v measured", "rule", "speedup")
