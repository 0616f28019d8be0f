"""The wild corpus (tests/engines/fixtures/wild/: real engine output from public threads, with manifest.json's
``figures``: what each source itself printed) and the figure-by-figure check of a run read from it.

A figure is checked where the run can state it: counts exactly (summed over a file's intervals, or the last value
of a cumulative count), printed rates and mean lengths within their printed rounding, computed from the run's own
counts by ``specviz.engines.rates``."""
from __future__ import annotations

import json
from pathlib import Path

from specviz.engines.read import read_engine_run
from specviz.engines.run import rates

WILD = Path(__file__).resolve().parents[1] / "engines" / "fixtures" / "wild"
MANIFEST = json.loads((WILD / "manifest.json").read_text())
COUNTED = [e for e in MANIFEST if e["carries_counts"]]
UNCOUNTED = [e for e in MANIFEST if not e["carries_counts"]]

# the engines' field names for each count; "sum": per interval or per task, "last": cumulative since start
COUNTS = {
    "drafted": {"Drafted": "sum", "generated": "sum", "draft tokens": "sum", "n_drafted": "last", "draft_n": "last",
                "num_draft_tokens": "last", "Draft tokens": "last", "spec_num_proposed_drafts": "last",
                "Number of draft tokens": "last", "Number of draft tokens tokens": "last", "numDraftTokens": "sum"},
    "accepted": {"Accepted": "sum", "accepted": "sum", "n_accept": "last", "draft_n_accepted": "last",
                 "num_accepted_tokens": "last", "Accepted tokens": "last", "spec_num_correct_drafts": "last",
                 "num_accepted_draft_tokens": "last", "numAcceptedTokens": "sum"},
    "steps": {"num_drafts": "last", "Drafts": "last", "num_spec_steps": "last", "spec_verify_ct": "last",
              "vllm:spec_decode_num_drafts_total": "sum", "numRequestsWithDraftTokens": "sum"},
    "k": {"Number of speculative tokens": "last", "n_draft": "last", "num_spec_tokens": "last"},
    "emitted": {"Number of emitted tokens": "last", "Number of emitted tokens tokens": "last", "n_predict": "last",
                "predicted_n": "last", "total_num_output_tokens": "last"},
}
MEANS = ("Mean acceptance length", "mean len", "mean acceptance length", "mean_acceptance_length",
         "Acceptance length", "Acceptance length (benchmark)", "spec_accept_length", "acceptanceLength")
RATES = ("Draft acceptance rate", "Avg Draft acceptance rate", "draft acceptance", "draft acceptance rate", "accept",
         "Acceptance rate (%)", "draft_acceptance_rate", "spec_accept_rate")
HISTOGRAMS = ("acceptance_histogram", "spec_correct_drafts_histogram")
POSITIONS = ("Per-position acceptance rate", "acceptance rate per position")  # accepted at i / steps, per line
STATISTICS = ("#gen drafts", "#gen tokens", "#acc tokens")  # llama.cpp's cumulative counters: stated apart


def as_list(value) -> list:
    return value if isinstance(value, list) else [value]


def printed(value) -> tuple[float, float]:
    """(value as a fraction or a number, half its last printed digit): "38.2%" -> (0.382, 0.0005)."""
    text = value if isinstance(value, str) else repr(float(value))
    percent = text.endswith("%")
    digits = len(text.rstrip("%").partition(".")[2])
    half = 0.5 * 10.0 ** -max(digits, 2 if isinstance(value, float) and digits == 1 else digits) + 1e-9
    number = float(text.rstrip("%"))
    return (number / 100, half / 100) if percent else (number, half)


def expected_counts(entry) -> dict:
    figures, out = entry["figures"], {}
    for field, names in COUNTS.items():
        for name, how in names.items():
            if name in figures:
                values = as_list(figures[name])
                out[field] = sum(values) if how == "sum" else values[-1]
    if "Number of emitted tokens" in figures or "Number of emitted tokens tokens" in figures:
        # V0: the printed accepted count is every matching draft (vllm#9565); the accepted prefix is emitted - steps
        out["steps"] = out["drafted"] // out["k"]
        out["accepted"] = out["emitted"] - out["steps"]
    elif "Number of accepted tokens" in figures:  # early V1: per interval, the accepted drafts
        out["accepted"] = sum(as_list(figures["Number of accepted tokens"]))
    if "accepted" in figures and "draft tokens" not in figures and "generated" not in figures:
        out["drafted"] = None  # llama.cpp's per-round lines before #18211 print 'accepted N/0': not a count
    return out


def intervals(run) -> list:
    return list(run.series) if run.series else [run]


def wrong_figures(entry, run) -> list[str]:
    """Every figure of the entry the run states otherwise (an empty list: all right)."""
    wrong, figures = [], entry["figures"]
    for field, value in expected_counts(entry).items():
        if getattr(run, field) != value:
            wrong.append(f"{field}: read {getattr(run, field)}, the source says {value}")
    parts = intervals(run)
    for name in MEANS:
        values = as_list(figures.get(name, []))
        for part, value in zip(parts if len(values) == len(parts) else [run] * len(values), values):
            wrong += _off(f"{name} {value}", part, "mean acceptance length", value)
    v0 = "Number of emitted tokens" in figures or "Number of emitted tokens tokens" in figures
    for name in () if v0 else RATES:
        values = as_list(figures.get(name, []))
        for part, value in zip(parts if len(values) == len(parts) else [run] * len(values), values):
            wrong += _off(f"{name} {value}", part, "acceptance rate", f"{value}%" if "(%)" in name else value)
    wrong += _positions_off(figures, parts)
    notes = " ".join(run.notes)
    for name in STATISTICS:
        if name in figures and f"{name} = {as_list(figures[name])[-1]} " not in notes:
            wrong.append(f"{name}: the last value {as_list(figures[name])[-1]} is not stated apart in the notes")
    for name in HISTOGRAMS:
        if name in figures:
            h = figures[name]
            dense = [h.get(str(j), 0) for j in range(max(map(int, h)) + 1)] if isinstance(h, dict) else h
            if tuple(dense) != tuple(run.histogram or ())[: len(dense)] or any((run.histogram or ())[len(dense):]):
                wrong.append(f"{name}: read {run.histogram}, the source says {h}")
    return wrong


def _positions_off(figures, parts) -> list[str]:
    """Each interval's per-position counts over its steps print as the source's rates (where they were recovered)."""
    printed_rates = next((as_list(figures[name]) for name in POSITIONS if name in figures), [])
    if len(printed_rates) != sum(part.k or 0 for part in parts):
        return []  # the manifest lists a line's rates once where lines repeat them: nothing to pair
    wrong, at = [], 0
    for part in parts:
        k = part.k or 0
        for i, a_i in enumerate(part.accepted_per_pos or ()):
            if abs(a_i / part.steps - printed_rates[at + i]) > 0.0005 + 1e-9:
                wrong.append(f"position {i}: read {a_i} / {part.steps}, the source says {printed_rates[at + i]}")
        at += k
    return wrong


def _off(what: str, run, rate_name: str, value) -> list[str]:
    got = {r.name: r.value for r in rates(run)}
    if rate_name not in got:
        return [f"{what}: the run states no {rate_name} (counts {run.drafted}, {run.accepted}, {run.steps})"]
    number, half = printed(value)
    return [] if abs(got[rate_name] - number) <= half else [f"{what}: read {got[rate_name]:.5f}"]


def read_wrong(entry) -> list[str]:
    try:
        run = read_engine_run(WILD / entry["file"])
    except ValueError as error:
        return [f"refused: {str(error).splitlines()[0][:200]}"]
    return wrong_figures(entry, run)
