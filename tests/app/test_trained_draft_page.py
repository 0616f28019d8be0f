"""The explorer's side of a draft trained elsewhere, without a browser: the format line where the draft is picked,
the timeline's mark from the draft's own vocabulary map, and the trainer's metrics beside the run."""
import pytest
from safetensors.torch import load_file

from specviz import models
from specviz.app import explorer
from specviz.drafts.trained.formats import describe
from tests.helpers.traces import sample_trace
from tests.helpers.trained import CONSOLE, FIXTURES

BUNDLED = "target-eagle3"


def test_the_format_line_is_said_where_a_trained_draft_is_picked(monkeypatch):
    line = explorer.format_line(BUNDLED)
    assert line == f"**Trained draft**, read from its files: {describe(models.ASSETS / BUNDLED)}"
    assert "speculators" in line and "draft vocabulary 1,024 of 4,096" in line
    monkeypatch.setenv("SPECVIZ_EXTRA_MODELS", f"my-eagle3={FIXTURES / 'eagle3'}")
    assert "draft vocabulary 48 of 64" in explorer.format_line("my-eagle3")
    assert explorer.format_line("target") == explorer.format_line(None) == explorer.format_line("") == ""
    assert explorer.format_shown(BUNDLED)["visible"] and not explorer.format_shown("target")["visible"]


def test_the_timeline_reads_the_run_drafts_vocabulary_map():
    trace = sample_trace()
    trace.draft_name = BUNDLED
    d2t = load_file(str(models.ASSETS / BUNDLED / "model.safetensors"))["d2t"].long()
    assert explorer.draft_vocab(trace) == frozenset(i + int(d) for i, d in enumerate(d2t))  # target id = i + d2t[i]
    vocab = explorer.draft_vocab(trace)
    expected = [t for t in (6, 9) if t not in vocab]  # the sample's resampled and bonus tokens
    assert expected == [6]  # the map holds 9, not 6: the test tells them apart
    assert explorer.shown_timeline(trace).count('data-outside="1"') == len(expected) + 1  # and the legend's entry
    trace.draft_name = "target"
    assert explorer.draft_vocab(trace) is None and 'data-outside' not in explorer.shown_timeline(trace)


def test_the_trainer_metrics_are_put_beside_the_run():
    trace = sample_trace(greedy=True)
    trace.draft_name = BUNDLED
    text, fig = explorer.training_beside(trace, None, CONSOLE)
    assert text.startswith(f"**{BUNDLED}**, trained (training, the mean of its last 2 logged steps (10-20)) beside "
                           "this run (2 rounds).")
    assert "temperature" not in text  # a greedy run: argmax agreement on both sides
    assert [list(t.y) for t in fig.data[1::2]] == [[1.0, 0.5], [1.0, 0.5]]  # the run's cond, then full rates
    with pytest.raises(ValueError, match="run a draft first"):
        explorer.training_beside(None, None, CONSOLE)
    with pytest.raises(ValueError, match="no per-position accuracy found"):
        explorer.training_beside(trace, None, "loss=1.0")


def test_compare_says_the_format_of_each_checked_trained_draft():
    from specviz.app.compare_tab import format_lines

    assert format_lines(["target", BUNDLED]) == (f"- **{BUNDLED}** (trained draft, read from its files): "
                                                  f"{describe(models.ASSETS / BUNDLED)}")
    assert format_lines(["target"]) == format_lines(None) == ""


def test_compare_marks_each_pruned_drafts_timeline_with_its_own_map():
    from specviz.app.compare_tab import vocabularies
    from specviz.labs.compare import Run
    from specviz.views.runs import compare_timelines_html

    vocabs = vocabularies(["target", BUNDLED])
    assert list(vocabs) == [BUNDLED] and 6 not in vocabs[BUNDLED] and 9 in vocabs[BUNDLED]
    pruned, full = sample_trace(), sample_trace()
    html = compare_timelines_html([Run(BUNDLED, 0, pruned), Run("target", 0, full)], "baseline", vocabs)
    runs = html.split('class="sv-compare-run"')
    assert runs[1].count('data-outside="1"') == 1 and 'data-outside="1"' not in runs[2]  # token 6, in its run only
    assert 'data-outside="1"' in runs[0]  # the shared legend's entry
