"""Figures for an engine's run and this machine's costs: frames built from EngineRuns (``*_frame``), then pure
DataFrame -> Figure functions.

Notation as in ``specviz.theory``: alpha the chance a draft is accepted, k drafts per step, c a draft step and
v(n) a target pass of n rows, both over a one-row pass. Under Leviathan's i.i.d. model position i (1-based) is
accepted in a share alpha^i of all steps (the marginal rate) and with chance alpha once reached (the conditional).
"""
from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..engines import EngineRun, fit_alpha, positions
from ..engines.fit import truncated_geometric
from ..theory import expected_tokens
from .style import COLOURS, INK, colour, layout

POSITION_COLUMNS = ["run", "position", "reached", "accepted", "marginal", "conditional", "iid_marginal",
                    "iid_conditional", "alpha"]


def message_figure(message: str) -> go.Figure:
    """An empty figure whose title says why there is nothing to draw."""
    fig = layout(go.Figure(), message, "", "")
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return fig


# -- this machine's costs ---------------------------------------------------------------------------------
def speedup_frame(table: pd.DataFrame, alpha: float, c: float) -> pd.DataFrame:
    """Per k (a pass of k + 1 rows in the table): Leviathan's expected tokens, the speedup at the measured
    v(k + 1), and the theorem's, which prices every pass like one row."""
    v = dict(zip(table.rows, table.v))
    ks = [int(n) - 1 for n in table.rows if n > 1]
    tokens = [expected_tokens(alpha, k) for k in ks]
    return pd.DataFrame(dict(k=ks, tokens=tokens, speedup=[t / (k * c + v[k + 1]) for t, k in zip(tokens, ks)],
                             speedup_flat=[t / (k * c + 1) for t, k in zip(tokens, ks)]))


def verify_cost_chart(table: pd.DataFrame, alpha: float, c: float) -> go.Figure:
    """Left: v(n), median with its min-max over repeats, against the theorem's flat 1. Right: the speedup each
    k implies at ``alpha`` with the measured v, beside the theorem's."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=("v(n): a pass of n rows / one row",
                                                        f"speedup at alpha = {alpha:.2f}, c = {c:.3g}"))
    fig.add_trace(go.Scatter(x=table.rows, y=table.v, mode="lines+markers", name="v(n) measured",
                             line=dict(color=colour(0)), error_y=dict(type="data", symmetric=False,
                                                                     array=table.v_max - table.v,
                                                                     arrayminus=table.v - table.v_min),
                             hovertemplate="n=%{x}: v=%{y:.3f}<extra></extra>"), row=1, col=1)
    fig.add_hline(y=1.0, line=dict(color=INK, dash="dot"), row=1, col=1)
    s = speedup_frame(table, alpha, c)
    fig.add_trace(go.Scatter(x=s.k, y=s.speedup, mode="lines+markers", name="with the measured v",
                             line=dict(color=colour(1))), row=1, col=2)
    fig.add_trace(go.Scatter(x=s.k, y=s.speedup_flat, mode="lines", name="the theorem (v = 1)",
                             line=dict(color=colour(1), dash="dash")), row=1, col=2)
    if len(s):
        best = s.loc[s.speedup.idxmax()]
        fig.add_trace(go.Scatter(x=[best.k], y=[best.speedup], mode="markers", name=f"best k = {int(best.k)}",
                                 marker=dict(symbol="star", size=15, color=colour(1), line=dict(width=1, color=INK))),
                      row=1, col=2)
    fig.update_xaxes(title_text="rows n", row=1, col=1)
    fig.update_xaxes(title_text="k (drafts per step)", row=1, col=2)
    return layout(fig, "What a verify pass costs here", "", "")


# -- an engine's run ---------------------------------------------------------------------------------------
def positions_frame(runs: dict[str, EngineRun]) -> pd.DataFrame:
    """One row per (run, position) that has per-position counts (or a histogram): both rates and the i.i.d.
    model's at the run's fitted alpha."""
    rows = []
    for label, run in runs.items():
        pos, fit = positions(run), fit_alpha(run)
        if pos is None or fit is None:
            continue
        for i, (r, a, m, cond) in enumerate(zip(pos.reached, pos.accepted, pos.marginal, pos.conditional), 1):
            rows.append(dict(run=label, position=i, reached=r, accepted=a, marginal=m, conditional=cond,
                             iid_marginal=fit.alpha ** i, iid_conditional=fit.alpha, alpha=fit.alpha))
    return pd.DataFrame(rows, columns=POSITION_COLUMNS)


def positions_chart(frame: pd.DataFrame) -> go.Figure:
    """Per position, accepted / steps (left) and accepted / reached (right), each run solid beside Leviathan's
    curve at its fitted alpha (dashed: alpha^i and alpha)."""
    if frame.empty:
        return message_figure("No per-position counts in this run")
    fig = make_subplots(rows=1, cols=2, subplot_titles=("marginal: accepted at i / steps",
                                                        "conditional: accepted at i / reached i"))
    for i, (label, g) in enumerate(frame.groupby("run", sort=False)):
        label = plain(label)
        ink = colour(i)
        for col, measured, model in ((1, "marginal", "iid_marginal"), (2, "conditional", "iid_conditional")):
            fig.add_trace(go.Scatter(x=g.position, y=g[measured], mode="lines+markers", name=label,
                                     legendgroup=label, showlegend=col == 1, line=dict(color=ink),
                                     customdata=g[["accepted", "reached"]],
                                     hovertemplate="position %{x}: %{y:.3f} (%{customdata[0]} of %{customdata[1]} "
                                                   "reached)<extra>" + label + "</extra>"), row=1, col=col)
            fig.add_trace(go.Scatter(x=g.position, y=g[model], mode="lines", legendgroup=label,
                                     name=f"Leviathan at alpha = {g.alpha.iloc[0]:.2f}", showlegend=col == 1,
                                     line=dict(color=ink, dash="dash")), row=1, col=col)
    fig.update_xaxes(dtick=1, title_text="draft position i")
    fig.update_yaxes(range=[0, 1.02])
    return layout(fig, "Acceptance per position, beside the i.i.d. model", "", "")


def histogram_frame(runs: dict[str, EngineRun]) -> pd.DataFrame:
    """One row per (run, j): the share of steps that accepted exactly j drafts, and the i.i.d. model's."""
    rows = []
    for label, run in runs.items():
        fit = fit_alpha(run)
        if not run.histogram or not sum(run.histogram) or fit is None:
            continue
        steps, k = sum(run.histogram), len(run.histogram) - 1
        model = truncated_geometric(fit.alpha, k) if k else [1.0]
        rows += [dict(run=label, accepted=j, steps=n, share=n / steps, iid_share=float(model[j]))
                 for j, n in enumerate(run.histogram)]
    return pd.DataFrame(rows, columns=["run", "accepted", "steps", "share", "iid_share"])


def histogram_chart(frame: pd.DataFrame) -> go.Figure:
    if frame.empty:
        return message_figure("No acceptance-length histogram in this run")
    fig = go.Figure()
    for i, (label, g) in enumerate(frame.groupby("run", sort=False)):
        label = plain(label)
        fig.add_trace(go.Bar(x=g.accepted, y=g.share, name=label, marker_color=colour(i), customdata=g.steps,
                             hovertemplate="%{x} accepted: %{y:.3f} (%{customdata} steps)<extra>" + label + "</extra>"))
        fig.add_trace(go.Scatter(x=g.accepted, y=g.iid_share, mode="markers", name=f"{label}: i.i.d. model",
                                 marker=dict(symbol="diamond-open", size=11, color=colour(i))))
    fig.update_xaxes(dtick=1)
    return layout(fig, "Steps by drafts accepted (diamonds: Leviathan's truncated geometric)",
                  "drafts accepted in a step", "share of steps")


def series_frame(runs: dict[str, EngineRun]) -> pd.DataFrame:
    """One row per (run, interval) of a run's series (log lines, scrape deltas, requests), in order, with the
    producer (engine, DP rank, server process) that printed it where the line names one."""
    rows = [dict(run=label, interval=i, producer=r.producer, drafted=r.drafted, accepted=r.accepted,
                 rate=r.accepted / r.drafted if r.drafted else None,
                 length=1 + r.accepted / r.steps if r.steps else None)
            for label, run in runs.items() for i, r in enumerate(run.series, 1)]
    return pd.DataFrame(rows, columns=["run", "interval", "producer", "drafted", "accepted", "rate", "length"])


def series_chart(frame: pd.DataFrame) -> go.Figure:
    """Each run's intervals in log order; where a run's lines come from several concurrent producers, one line per
    producer (its own intervals joined), never one producer's interval joined to another's."""
    if frame.empty:
        return message_figure("No time series in this run (one interval)")
    fig = make_subplots(rows=1, cols=2, subplot_titles=("acceptance rate per interval",
                                                        "mean acceptance length per interval"))
    for i, (label, g) in enumerate(_series_lines(frame)):
        for col, column in ((1, "rate"), (2, "length")):
            fig.add_trace(go.Scatter(x=g.interval, y=g[column], mode="lines+markers", name=label, legendgroup=label,
                                     showlegend=col == 1, line=dict(color=colour(i)),
                                     hovertemplate="interval %{x}: %{y:.3f}<extra>" + label + "</extra>"),
                          row=1, col=col)
    fig.update_xaxes(title_text="interval, in log order")
    return layout(fig, "Over the run", "", "")


def _series_lines(frame: pd.DataFrame):
    """(legend label, rows) per run, or per (run, producer) where a run has several producers."""
    for run, g in frame.groupby("run", sort=False):
        producers = g.producer.dropna().unique() if "producer" in g else []
        if len(producers) < 2:
            yield plain(run), g
            continue
        for producer, part in g.groupby(g.producer.fillna("(unnamed)"), sort=False):
            yield f"{plain(run)} · {plain(producer)}", part


def advice_chart(table: pd.DataFrame, label: str = "") -> go.Figure:
    """The advice's speedup per k: the i.i.d. fit's with alpha's interval as a band, the measured curve's
    markers, plain decoding's 1 dotted."""
    fig = go.Figure()
    band = pd.concat([table.speedup_iid_high, table.speedup_iid_low[::-1]])
    fig.add_trace(go.Scatter(x=pd.concat([table.k, table.k[::-1]]), y=band, fill="toself", line=dict(width=0),
                             fillcolor="rgba(37, 99, 235, 0.15)", name="alpha's interval", hoverinfo="skip"))
    fig.add_trace(go.Scatter(x=table.k, y=table.speedup_iid, mode="lines+markers", name="i.i.d. fit",
                             line=dict(color=colour(0))))
    measured = table.dropna(subset=["speedup_measured"])
    fig.add_trace(go.Scatter(x=measured.k, y=measured.speedup_measured, mode="markers", name="measured curve",
                             marker=dict(symbol="x", size=10, color=COLOURS["resampled"])))
    fig.add_hline(y=1.0, line=dict(color=INK, dash="dot"))
    fig.update_xaxes(dtick=1)
    return layout(fig, "Expected speedup per k" + (f" ({plain(label)})" if label else ""), "k (drafts per step)",
                  "speedup")


def comparison_chart(frame: pd.DataFrame) -> go.Figure:
    """Two runs position by position (``engines.compare_runs``' frame): left, each run's conditional rate with its
    interval; right, the change with its interval, filled where it moved (the interval excludes 0)."""
    if frame.empty:
        return message_figure("No position both runs reached")
    a, b = plain(frame.run_a.iloc[0]), plain(frame.run_b.iloc[0])
    fig = make_subplots(rows=1, cols=2, subplot_titles=("conditional rate: accepted at i / reached i",
                                                        f"change, {b} - {a}"))
    for i, (side, label) in enumerate((("a", a), ("b", b))):
        rate = frame[f"rate_{side}"]
        fig.add_trace(go.Scatter(x=frame.position, y=rate, mode="lines+markers", name=label, line=dict(color=colour(i)),
                                 error_y=dict(type="data", symmetric=False, array=frame[f"high_{side}"] - rate,
                                              arrayminus=rate - frame[f"low_{side}"]),
                                 customdata=frame[[f"accepted_{side}", f"reached_{side}"]],
                                 hovertemplate="position %{x}: %{y:.3f} (%{customdata[0]} of %{customdata[1]})"
                                               "<extra>" + label + "</extra>"), row=1, col=1)
    moved = frame.moved != "no"
    fig.add_trace(go.Scatter(x=frame.position, y=frame.change, mode="markers", name="change (filled: moved)",
                             marker=dict(size=10, color=INK, symbol=["circle" if m else "circle-open" for m in moved]),
                             error_y=dict(type="data", symmetric=False, array=frame.change_high - frame.change,
                                          arrayminus=frame.change - frame.change_low),
                             hovertemplate="position %{x}: %{y:+.3f}<extra></extra>"), row=1, col=2)
    fig.add_hline(y=0.0, line=dict(color=INK, dash="dot"), row=1, col=2)
    fig.update_xaxes(dtick=1, title_text="draft position i")
    fig.update_yaxes(range=[0, 1.02], row=1, col=1)
    return layout(fig, f"{b} against {a}, per position", "", "")


def plain(label: str) -> str:
    """A run's label in legends, hover text and titles: plotly renders a few tags there (links among them), so no
    markup from input."""
    return str(label).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
