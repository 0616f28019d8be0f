"""Real engine output from public threads (fixtures/wild/), read through the app's entry point and checked figure by
figure against what the source itself printed (manifest.json's ``figures``).

A figure is checked where the run can state it: counts exactly (summed over a file's intervals, or the last value
of a cumulative count), printed rates and mean lengths within their printed rounding, computed from the run's own
counts by ``specviz.engines.rates``. An entry without counts must be refused, with a message naming the format it
is closest to.
"""
from __future__ import annotations

import pytest

from specviz.engines.read import read_engine_run
from tests.helpers.wild import COUNTED, UNCOUNTED, WILD, as_list, read_wrong, wrong_figures

TARGET = 0.9  # of the entries with counts read with every figure right


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


def test_the_readme_and_engines_doc_state_the_corpus_as_it_reads():
    """README's and docs/ENGINES.md's tally of the corpus (excerpts, those with counts, those read right) is this
    corpus's, read now: a fixture added or a reader changed without the docs following fails here."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    right = sum(not read_wrong(e) for e in COUNTED)
    total = len(COUNTED) + len(UNCOUNTED)
    readme = " ".join((root / "README.md").read_text().split())
    assert re.search(rf"Of {total} excerpts from public engine threads .{{0,60}} {right} of the {len(COUNTED)} that "
                     "carry counts read with every figure right", readme)
    engines = " ".join((root / "docs" / "ENGINES.md").read_text().split())
    assert f"checked against {total} excerpts" in engines
    assert f"reads each of the {len(COUNTED)} excerpts that carry counts" in engines and f"; {right} read with" in engines
