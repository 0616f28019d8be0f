"""The coverage of a pruned draft vocabulary as a table and a figure (specviz.views.coverage_plots)."""
import torch

from specviz.drafts.trained.coverage import coverage_frame, vocab_coverage
from specviz.views.coverage_plots import coverage_figure
from tests.helpers.trained import FIXTURES, fixture_target


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
