"""Several runs side by side: the compare tab's timelines and the batch tab's rows (Trace -> escaped HTML,
traces -> a row table). Notation: tau = tokens per round."""
from __future__ import annotations

import pandas as pd

from ..trace import Trace
from .timeline import esc, legend, timeline_html


def compare_timelines_html(runs: list, baseline: str, vocabs: dict | None = None) -> str:
    """Every finished run's timeline, one above the other: the baseline (named ``baseline``: the reference
    text), then each draft. ``runs``: ``specviz.labs.compare.Run`` records (draft name, trace); ``vocabs``: a pruned
    draft vocabulary's target ids by draft name, its missing tokens marked in that draft's timeline."""
    vocabs, parts = vocabs or {}, []
    for run in runs:
        if run.draft == baseline:
            head = "target alone (autoregressive baseline): the reference text that positions index into"
        else:
            s = run.trace.summary()
            head = (f"{run.draft}: acceptance {s.acceptance_rate:.2f} · τ {s.tau:.2f} tokens/round · "
                    f"{s.tokens_per_s:.1f} tokens/s")
        parts.append(f'<div class="sv-compare-run" data-draft="{esc(run.draft)}"><h4>{esc(head)}</h4>'
                     f"{timeline_html(run.trace, with_legend=False, vocab=vocabs.get(run.draft))}</div>")
    pruned = next((v for v in vocabs.values() if v is not None), None)  # the legend's mark where any draft has one
    return f'{legend(pruned)}<div class="sv-compare-grid">{"".join(parts)}</div>'  # one legend for every run


def batch_rows_html(traces: list[Trace], seed: int) -> str:
    """Per-row timelines of one batched run (row b used seed + b)."""
    parts = []
    for b, trace in enumerate(traces):
        s = trace.summary()
        head = f"row {b} (seed {seed + b}): {s.new_tokens} tokens, acceptance {s.acceptance_rate:.2f}, τ {s.tau:.2f}"
        parts.append(f'<div class="sv-batch-row" data-row="{b}"><h4>{esc(head)}</h4>'
                     f'{timeline_html(trace, with_legend=False)}</div>')
    return legend() + "".join(parts)


def batch_rows_frame(traces: list[Trace], seed: int) -> pd.DataFrame:
    """One row per batch row: acceptance, alpha, tau (timings are the batch's, so none here)."""
    rows = []
    for b, trace in enumerate(traces):
        s = trace.summary()
        rows.append(dict(row=b, seed=seed + b, new_tokens=s.new_tokens, rounds=s.rounds,
                         acceptance_rate=s.acceptance_rate, alpha=s.alpha, tau=s.tau, stop=trace.stop_reason))
    return pd.DataFrame(rows).round(3)
