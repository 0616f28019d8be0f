"""TensorRT-LLM's per-iteration executor stats (trtllm-serve /metrics, llm.get_stats()): the specDecodingStats of
the iterations that verified drafts summed, each checked against its own acceptanceLength."""
from __future__ import annotations

import json

import pytest

from specviz.engines.read import read_engine_run
from tests.helpers.wild import MANIFEST, WILD, wrong_figures

SYNTHETIC = "trtllm-serve-metrics-iteration-stats-synthetic-1.json"


def iteration(i, drafted, accepted, steps, length=None, **extra):
    stats = {"numDraftTokens": drafted, "numAcceptedTokens": accepted, "numRequestsWithDraftTokens": steps}
    if length is not None:
        stats["acceptanceLength"] = length
    return {"iter": i, "iterLatencyMS": 12.5, "specDecodingStats": stats, **extra}


def test_the_scrape_sums_the_iterations_that_drafted():
    text = json.dumps([iteration(0, 0, 0, 0, 0.0), iteration(1, 8, 3, 2, 2.5), iteration(2, 4, 4, 1, 5.0)])
    run = read_engine_run(text)
    assert (run.drafted, run.accepted, run.steps) == (12, 7, 3)
    assert [part.steps for part in run.series] == [2, 1]  # the context iteration is no interval
    assert any("1 iteration without drafts" in note for note in run.notes)


def test_the_corpus_excerpt_reads_as_its_figures_and_the_check_can_fail():
    entry = next(e for e in MANIFEST if e["file"] == SYNTHETIC)
    run = read_engine_run(WILD / SYNTHETIC)
    figures = entry["figures"]
    assert (run.drafted, run.accepted, run.steps) == (
        sum(figures["numDraftTokens"]), sum(figures["numAcceptedTokens"]), sum(figures["numRequestsWithDraftTokens"]))
    assert wrong_figures(entry, run) == []
    swapped = dict(entry, figures=dict(figures, acceptanceLength=[2.25, 2.75, 3.0]))
    assert wrong_figures(swapped, run)  # each interval's length is checked in order


def test_snake_case_and_a_bare_stats_object_read_alike():
    snake = {"iter": 5, "specdec_stats": {"num_draft_tokens": 6, "num_accepted_tokens": 2,
                                          "num_requests_with_draft_tokens": 2, "acceptance_length": 2.0}}
    assert (read_engine_run(json.dumps(snake)).accepted, read_engine_run(json.dumps(snake)).steps) == (2, 2)
    bare = read_engine_run(json.dumps(iteration(0, 6, 2, 2, 2.0)["specDecodingStats"]))
    assert (bare.drafted, bare.accepted, bare.steps) == (6, 2, 2)
    assert any("bare TensorRT-LLM specDecodingStats" in note for note in bare.notes)


@pytest.mark.parametrize("records, says", [
    ([iteration(1, 8, 3, 2, 2.75)], "acceptanceLength 2.75 is not"),
    ([iteration(1, 8, 9, 2)], "exceeds drafted"),
    ([{"iter": 1, "specDecodingStats": {"numDraftTokens": 8, "numAcceptedTokens": 3}}], "lack numRequestsWithDraft"),
    ([iteration(1, 8, 3, 2), iteration(1, 8, 3, 2)], "iteration 1 appears twice"),
    ([iteration(0, 0, 0, 0, 0.0)], "none that verified a draft"),
    ([iteration(1, 3, 1, 0)], "no request that drafted"),
    ([iteration(1, 8.5, 3, 2)], "whole number"),
])
def test_bad_iteration_stats_are_refused_saying_why(records, says):
    with pytest.raises(ValueError, match=says):
        read_engine_run(json.dumps(records))
