"""Real engine output from public threads (fixtures/wild/), read through the app's entry point and checked figure by
figure against what the source itself printed (manifest.json's ``figures``).

A figure is checked where the run can state it: counts exactly (summed over a file's intervals, or the last value
of a cumulative count), printed rates and mean lengths within their printed rounding, computed from the run's own
counts by ``specviz.engines.rates``. An entry without counts must be refused, with a message naming the format it
is closest to.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from specviz.engines.read import read_engine_run
from specviz.engines.run import rates

WILD = Path(__file__).parent / "fixtures" / "wild"
MANIFEST = json.loads((WILD / "manifest.json").read_text())
COUNTED = [e for e in MANIFEST if e["carries_counts"]]
UNCOUNTED = [e for e in MANIFEST if not e["carries_counts"]]
TARGET = 0.9  # of the entries with counts read with every figure right

# the engines' field names for each count; "sum": per interval or per task, "last": cumulative since start
COUNTS = {
    "drafted": {"Drafted": "sum", "generated": "sum", "draft tokens": "sum", "n_drafted": "last", "draft_n": "last",
                "num_draft_tokens": "last", "Draft tokens": "last", "spec_num_proposed_drafts": "last",
                "Number of draft tokens": "last", "Number of draft tokens tokens": "last"},
    "accepted": {"Accepted": "sum", "accepted": "sum", "n_accept": "last", "draft_n_accepted": "last",
                 "num_accepted_tokens": "last", "Accepted tokens": "last", "spec_num_correct_drafts": "last",
                 "num_accepted_draft_tokens": "last"},
    "steps": {"num_drafts": "last", "Drafts": "last", "num_spec_steps": "last", "spec_verify_ct": "last",
              "vllm:spec_decode_num_drafts_total": "sum"},
    "k": {"Number of speculative tokens": "last", "n_draft": "last", "num_spec_tokens": "last"},
    "emitted": {"Number of emitted tokens": "last", "Number of emitted tokens tokens": "last", "n_predict": "last",
                "predicted_n": "last", "total_num_output_tokens": "last"},
}
MEANS = ("Mean acceptance length", "mean len", "mean acceptance length", "mean_acceptance_length",
         "Acceptance length", "Acceptance length (benchmark)", "spec_accept_length")
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


def test_the_corpus_has_entries_with_counts():
    assert len(COUNTED) >= 30


@pytest.mark.parametrize("entry", COUNTED, ids=[e["file"] for e in COUNTED])
def test_no_excerpt_is_read_wrong(entry):
    """Read, every figure must be right; refused is allowed here (counted against the target below)."""
    wrong = read_wrong(entry)
    assert not wrong or wrong[0].startswith("refused:"), wrong


def test_nine_in_ten_entries_with_counts_read_with_every_figure_right():
    results = {e["file"]: read_wrong(e) for e in COUNTED}
    bad = {f: w for f, w in results.items() if w}
    assert len(COUNTED) - len(bad) >= TARGET * len(COUNTED), bad


@pytest.mark.parametrize("entry", UNCOUNTED, ids=[e["file"] for e in UNCOUNTED])
def test_an_excerpt_without_counts_is_refused_naming_its_format(entry):
    with pytest.raises(ValueError) as refused:
        read_engine_run(WILD / entry["file"])
    message = str(refused.value).splitlines()[0]
    assert "closest to " in message and "closest to none" not in message, message  # a format named
    assert "(line " in message and "Paste instead: " in message, message  # the line that shows it, and advice


def test_the_checks_can_fail():
    """A negative control: a run read from one entry does not pass as another's."""
    entry = next(e for e in COUNTED if e["file"] == "vllm-v0-speculative-metrics-1.txt")
    other = read_engine_run(WILD / "vllm-v0-speculative-metrics-maintainer-4.txt")
    assert wrong_figures(entry, other)
    v0_taken_as_v1 = dict(entry, figures={k: v for k, v in entry["figures"].items() if "emitted" not in k})
    assert wrong_figures(v0_taken_as_v1, read_engine_run(WILD / entry["file"]))  # 8547 is not the accepted prefix


def test_a_prometheus_ui_table_is_read_summed_over_engines():
    """The excerpt keeps only the num_drafts rows (refused: no accepted counter); with the accepted and draft-token
    rows the thread cut, in the same 'series | value' shape, it reads as the sum over its 8 engines."""
    entry = next(e for e in COUNTED if e["file"] == "vllm-prometheus-query-dp-engines-1.txt")
    text = (WILD / entry["file"]).read_text()
    with pytest.raises(ValueError, match="without spec_decode_num_accepted_tokens"):
        read_engine_run(text)
    rows = [line for line in text.splitlines() if "num_drafts_total" in line]
    drafted = [line.replace("num_drafts_total", "num_draft_tokens_total").replace(" | ", " | 1") for line in rows]
    accepted = [line.replace("num_drafts_total", "num_accepted_tokens_total") for line in rows]
    run = read_engine_run("\n".join([text] + drafted + accepted))
    drafts = entry["figures"]["vllm:spec_decode_num_drafts_total"]
    assert run.steps == sum(drafts) == 188 and run.accepted == 188  # the _created row is a timestamp, not counted
    assert run.drafted == sum(int(f"1{d}") for d in drafts)


@pytest.mark.parametrize("name", [e["file"] for e in UNCOUNTED if "accept len" in e["figures"]])
def test_sglang_decode_batch_lines_are_refused_with_what_they_do_say(name):
    """Log lines, not truncated JSON: the refusal states their accept len range (bonus included) and the load."""
    entry = next(e for e in UNCOUNTED if e["file"] == name)
    lengths = as_list(entry["figures"]["accept len"])
    with pytest.raises(ValueError) as refused:
        read_engine_run(WILD / name)
    message = str(refused.value).splitlines()[0]
    assert "JSON" not in message and "closest to SGLang 'Decode batch' log lines" in message
    spread = f"{min(lengths):.2f}" + (f" to {max(lengths):.2f}" if max(lengths) > min(lengths) else "")
    assert f"with accept len {spread}" in message, message
