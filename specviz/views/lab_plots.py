"""Figures for the labs: pure functions from a DataFrame to a Plotly figure.

Inputs: ``specviz.summarize`` (k sweep), ``labs.per_position``, ``labs.policy_summary`` / ``labs.round_ks``,
``lossless.counts_frame`` / ``lossless.decomposition``, and the distillation lab's points.
Notation: p target, q draft, alpha acceptance, tau tokens per round.
"""
from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .style import COLOURS, INK, colour, layout


# -- k sweep -------------------------------------------------------------------------------------------
def against_k(summary: pd.DataFrame, column: str, title: str, y: str, theory: str | None = None,
              mark_best: bool = False) -> go.Figure:
    """``column`` against k, one line per draft; ``theory`` dashed beside it; optionally a star at the
    best k measured and a diamond at the best k predicted."""
    fig = go.Figure()
    for i, (draft, g) in enumerate(summary.groupby("draft", sort=False)):
        ink = colour(i)
        fig.add_trace(go.Scatter(x=g.k, y=g[column], mode="lines+markers", name=f"{draft} measured",
                                 line=dict(color=ink), hovertemplate="k=%{x}: %{y:.3f}<extra>" + draft + "</extra>"))
        if theory:
            fig.add_trace(go.Scatter(x=g.k, y=g[theory], mode="lines", name=f"{draft} theory",
                                     line=dict(color=ink, dash="dash"),
                                     hovertemplate="k=%{x}: %{y:.3f} predicted<extra>" + draft + "</extra>"))
        if mark_best:
            for col, symbol, label in ((column, "star", "best k measured"), (theory, "diamond", "best k predicted")):
                if col:
                    best = g.loc[g[col].idxmax()]
                    fig.add_trace(go.Scatter(x=[best.k], y=[best[col]], mode="markers", name=f"{draft} {label}",
                                             marker=dict(symbol=symbol, size=16, color=ink,
                                                         line=dict(width=1, color=INK))))
    fig.update_xaxes(dtick=1)
    return layout(fig, title, "k (drafts per round)", y)


def acceptance_vs_k(summary: pd.DataFrame) -> go.Figure:
    return against_k(summary, "acceptance_rate", "Acceptance rate against k (dashed: alpha = mean beta)",
                     "accepted / drafted", theory="alpha")


def tau_vs_k(summary: pd.DataFrame) -> go.Figure:
    return against_k(summary, "tau", "Tokens per round tau: measured and (1 - a^(k+1)) / (1 - a)", "tokens / round",
                     theory="tau_theory")


def speedup_vs_k(summary: pd.DataFrame) -> go.Figure:
    fig = against_k(summary, "speedup", "Speedup over autoregressive: measured and predicted", "speedup",
                    theory="speedup_theory", mark_best=True)
    fig.add_hline(y=1.0, line=dict(color="#888", dash="dot"))
    return fig


def position_heatmap(positions: pd.DataFrame, draft: str | None = None, value: str = "rate") -> go.Figure:
    """Acceptance at draft position (rows) for each k (columns), for one draft (default: the first): ``value``
    "rate" (accepted / drafted) or "conditional" (accepted / reached: given every earlier draft accepted)."""
    draft = draft if draft is not None else (positions.draft.iloc[0] if len(positions) else "")
    g = positions[positions.draft == draft]
    grid = g.pivot(index="position", columns="k", values=value).sort_index().sort_index(axis=1)
    fig = go.Figure(go.Heatmap(z=grid.to_numpy(), x=grid.columns.to_numpy(), y=grid.index.to_numpy(), zmin=0, zmax=1,
                               colorscale="Greens", colorbar=dict(title="rate"),
                               hovertemplate="k=%{x}, position %{y}: %{z:.2f}<extra></extra>"))
    fig.update_xaxes(dtick=1)
    fig.update_yaxes(dtick=1, autorange="reversed")
    what = "accepted / drafted" if value == "rate" else "accepted / reached (earlier ones accepted)"
    return layout(fig, f"Per draft position, {what} ({draft})", "k", "draft position")


def position_heatmaps(positions: pd.DataFrame, draft: str | None = None) -> go.Figure:
    """Both ways side by side: accepted / drafted (left; falls with position by construction) and accepted /
    reached (right; given every earlier draft accepted: the draft's quality at that depth)."""
    draft = draft if draft is not None else (positions.draft.iloc[0] if len(positions) else "")
    g = positions[positions.draft == draft]
    fig = make_subplots(rows=1, cols=2, subplot_titles=("accepted / drafted", "accepted / reached"))
    for col, value in ((1, "rate"), (2, "conditional")):
        if value not in g:
            continue
        grid = g.pivot(index="position", columns="k", values=value).sort_index().sort_index(axis=1)
        fig.add_trace(go.Heatmap(z=grid.to_numpy(), x=grid.columns.to_numpy(), y=grid.index.to_numpy(), zmin=0, zmax=1,
                                 colorscale="Greens", showscale=col == 2, colorbar=dict(title="rate"),
                                 hovertemplate="k=%{x}, position %{y}: %{z:.2f}<extra>" + value + "</extra>"), 1, col)
    fig.update_xaxes(dtick=1)
    fig.update_yaxes(dtick=1, autorange="reversed")
    return layout(fig, f"Acceptance per draft position, both ways ({draft})", "k", "draft position")


# -- k policies ----------------------------------------------------------------------------------------
def policy_bars(summary: pd.DataFrame) -> go.Figure:
    """tokens/s (left) and acceptance rate (right) per policy."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=("tokens / s", "acceptance rate"))
    fig.add_trace(go.Bar(x=summary.policy, y=summary.tokens_per_s, marker_color=COLOURS["bonus"], name="tokens/s"), 1, 1)
    fig.add_trace(go.Bar(x=summary.policy, y=summary.acceptance_rate, marker_color=COLOURS["accepted"],
                         name="acceptance"), 1, 2)
    fig.update_yaxes(range=[0, 1], row=1, col=2)
    return layout(fig, "Fixed k against adaptive k policies", "", "")


def k_per_round(rounds: pd.DataFrame) -> go.Figure:
    """The tokens each round drafted, per policy (``labs.round_ks``: rounds of all prompts in order): the
    policy's k, or fewer where a confidence stop or the token budget cut the round short."""
    fig = go.Figure()
    for i, (policy, g) in enumerate(rounds.groupby("policy", sort=False)):
        fig.add_trace(go.Scatter(x=g.step, y=g.drafted, customdata=g.k, mode="lines", name=policy,
                                 line=dict(shape="hv", color=colour(i)),
                                 hovertemplate="round %{x}: %{y} drafted (k=%{customdata})<extra>" + policy + "</extra>"))
    return layout(fig, "Drafts each round made (prompts one after another)", "round", "drafted")


# -- losslessness --------------------------------------------------------------------------------------
def _top(frame: pd.DataFrame, top: int) -> pd.DataFrame:
    cols = [c for c in ("p", "q", "empirical") if c in frame]
    return frame.assign(key=frame[cols].max(axis=1)).nlargest(top, "key").sort_values("p", ascending=False)


def emitted_bars(counts: pd.DataFrame, title: str, labels: dict | None = None, top: int = 20) -> go.Figure:
    """One variant's emitted-token frequencies beside p and q for the top tokens (``lossless.counts_frame``)."""
    g = _top(counts, top)
    x = [labels.get(t, str(t)) if labels is not None else str(t) for t in g.token]
    fig = go.Figure()
    for col, name, fill in (("empirical", "emitted (empirical)", COLOURS["resampled"]),
                              ("p", "p (target)", "#0ea5e9"), ("q", "q (draft)", "#a855f7")):
        fig.add_trace(go.Bar(x=x, y=g[col], name=name, marker_color=fill,
                             hovertemplate="%{x}: %{y:.4f}<extra>" + name + "</extra>"))
    fig.update_layout(barmode="group")
    return layout(fig, title, "token", "probability")


def decomposition_bars(decomp: pd.DataFrame, labels: dict | None = None, top: int = 20) -> go.Figure:
    """Stacked: min(p, q) (accepted) + (1 - beta) norm(max(0, p - q)) (resampled) = p, with p as a marker."""
    g = _top(decomp, top)
    x = [labels.get(t, str(t)) if labels is not None else str(t) for t in g.token]
    fig = go.Figure([go.Bar(x=x, y=g.accept, name="min(p, q): drafted and accepted", marker_color=COLOURS["accepted"]),
                     go.Bar(x=x, y=g.residual, name="(1 - beta) residual: resampled", marker_color=COLOURS["resampled"]),
                     go.Scatter(x=x, y=g.p, mode="markers", name="p (target)",
                                marker=dict(symbol="line-ew", size=22, line=dict(width=3, color=INK)))])
    fig.update_layout(barmode="stack")
    return layout(fig, "Why it is exact: accepted part + resampled part = p", "token", "probability")


# -- distillation --------------------------------------------------------------------------------------
def training_loss(points: pd.DataFrame) -> go.Figure:
    """Training loss per step for each method (KL for distillation, cross-entropy for the baseline)."""
    fig = go.Figure()
    for i, (method, g) in enumerate(points[points.loss.notna()].groupby("method", sort=False)):
        fig.add_trace(go.Scatter(x=g.step, y=g.loss, mode="lines", name=method, line=dict(color=colour(i))))
    return layout(fig, "Training loss", "step", "loss")


def checkpoints_chart(points: pd.DataFrame) -> go.Figure:
    """At each checkpoint, against the optimiser step (every method's checkpoints at the same steps): alpha, the
    expected acceptance rate against the target (solid; smoother than the counted rate on a few tokens), and
    held-out KL(p || q) (dotted)."""
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    evals = points[points.heldout_kl.notna()]
    for i, (method, g) in enumerate(evals.groupby("method", sort=False)):
        ink = colour(i)
        fig.add_trace(go.Scatter(x=g.step, y=g.alpha, mode="lines+markers", name=f"{method}: acceptance α",
                                 line=dict(color=ink)), secondary_y=False)
        fig.add_trace(go.Scatter(x=g.step, y=g.heldout_kl, mode="lines+markers", name=f"{method}: held-out KL",
                                 line=dict(color=ink, dash="dot")), secondary_y=True)
    fig.update_yaxes(title_text="acceptance α", range=[0, 1], secondary_y=False)
    fig.update_yaxes(title_text="KL(p || q)", secondary_y=True)
    return layout(fig, "Acceptance α and held-out KL at each checkpoint", "optimiser step", "")


# -- tree lab ------------------------------------------------------------------------------------------
def tree_tokens_per_pass(lab: pd.DataFrame) -> go.Figure:
    """Tokens per target pass per setting (``labs.trees.tree_lab``), measured beside the positional model."""
    runs = lab[lab["setting"] != "autoregressive"]
    fig = go.Figure([
        go.Bar(x=runs["setting"], y=runs["tau"], name="measured", marker_color=colour(0),
               hovertemplate="%{x}: %{y:.2f} tokens per target pass<extra>measured</extra>"),
        go.Bar(x=runs["setting"], y=runs["tau predicted"], name="positional model", marker_color=colour(0),
               opacity=0.45, hovertemplate="%{x}: %{y:.2f} predicted<extra>positional model</extra>"),
    ])
    fig.update_layout(barmode="group")
    return layout(fig, "Tokens per target pass: trees against chains", "", "tokens per target pass")


def tree_speedup(lab: pd.DataFrame) -> go.Figure:
    """Measured speedup per setting, nodes verified per round in the hover: what a bigger tree costs."""
    runs = lab[lab["setting"] != "autoregressive"]
    kinds = [COLOURS["bonus"] if s.startswith("tree") else INK for s in runs["setting"]]
    fig = go.Figure(go.Bar(x=runs["setting"], y=runs["speedup"], marker_color=kinds, customdata=runs["nodes per round"],
                           hovertemplate="%{x}: %{y:.2f}× with %{customdata:.1f} nodes verified per round<extra></extra>"))
    fig.add_hline(y=1.0, line=dict(color=INK, dash="dot"))
    return layout(fig, "Speedup on this machine (blue: trees)", "", "× autoregressive tokens/s")


# -- temperature lab -----------------------------------------------------------------------------------
def temperature_curves(lab: pd.DataFrame) -> go.Figure:
    """Acceptance and alpha against temperature (``labs.temperature.temperature_lab``)."""
    fig = go.Figure()
    for column, name, ink, dash in (("acceptance", "acceptance (measured)", COLOURS["accepted"], None),
                                    ("alpha_visited", "α at the visited contexts (exact)", colour(0), "dash"),
                                    ("alpha_fixed", "α at fixed contexts (exact)", colour(3), "dot")):
        if lab[column].notna().any():
            fig.add_trace(go.Scatter(x=lab.temperature, y=lab[column], mode="lines+markers", name=name,
                                     line=dict(color=ink, dash=dash),
                                     hovertemplate="T=%{x}: %{y:.3f}<extra>" + name + "</extra>"))
    fig.update_yaxes(range=[0, 1.02])
    return layout(fig, "Acceptance against temperature", "temperature (0 = greedy)", "rate")
