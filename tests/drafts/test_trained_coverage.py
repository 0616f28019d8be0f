"""The coverage of a pruned draft vocabulary as a table and a figure (specviz.views.coverage_plots)."""
import pytest
import torch

from specviz.drafts.trained.coverage import coverage_frame, vocab_coverage
from specviz.views.coverage_plots import coverage_figure
from tests.helpers.trained import FIXTURES, fixture_target


@pytest.mark.slow
def test_the_table_the_number_and_the_figure_say_the_same_mass():
    target, prompts = fixture_target(), [[1, 2, 3, 4, 5], [9, 9, 30]]
    frame = coverage_frame(FIXTURES / "eagle3", target, prompts)
    assert list(frame.prompt) == [0] * 5 + [1] * 3 and list(frame.position) == [0, 1, 2, 3, 4, 0, 1, 2]
    with torch.no_grad():  # a hand count: the ids of the fixture's pruned vocabulary are every id but 3, 7, 11, ...
        p = torch.softmax(target(torch.tensor([prompts[1]])).logits[0], -1)
    assert abs(frame.outside.iloc[5] - float(p[0, 3::4].sum())) < 1e-6
    mean = vocab_coverage(FIXTURES / "eagle3", target, prompts)
    fig = coverage_figure(frame)
    assert len(fig.data) == 2 and f"mean {mean:.3f}" in fig.layout.title.text
    assert f"acceptance <= {1 - mean:.3f}" in fig.layout.title.text


@pytest.mark.slow
def test_a_run_marks_exactly_the_target_tokens_its_draft_vocabulary_lacks():
    """The fixture's draft vocabulary is every id but 3, 7, 11, ... (d2t): in a real run's timeline, exactly the
    resampled and bonus tokens among those are marked, read from the folder's map."""
    import re

    from specviz import DecodeConfig, speculative_generate
    from specviz.drafts.trained.coverage import vocabulary
    from specviz.drafts.trained.load import load_trained
    from specviz.views.timeline import timeline_html

    vocab = vocabulary(FIXTURES / "eagle3")
    assert vocab == frozenset(range(64)) - frozenset(range(3, 64, 4))
    target = fixture_target()
    trace = speculative_generate(target, load_trained(FIXTURES / "eagle3", target), torch.tensor([[1, 2, 3, 4, 5]]),
                                 DecodeConfig(k=3, temperature=1.0, max_new_tokens=48, seed=3))
    chosen = [t for r in trace.rounds for t in (r.resampled, r.bonus) if t is not None]
    expected = [t for t in chosen if t % 4 == 3]
    assert expected and len(expected) < len(chosen)  # both kinds occur, so the test can tell them apart
    body = timeline_html(trace, vocab=vocab).split('class="sv-timeline"')[1]
    marked = re.findall(r'data-outside="1"[^>]*>&lt;(\d+)&gt;</span>', body)
    assert [int(t) for t in marked] == expected
