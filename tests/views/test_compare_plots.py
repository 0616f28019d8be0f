"""The Compare tab's figures: one legend entry per series, every series told apart, the legend under the x axis's
title (its own rows at the figure's bottom), however many drafts."""
import pandas as pd
import pytest

from specviz.views import compare_plots
from specviz.views.style import PALETTE

NAMES = ["lite", "lite-bpe2k", "small-ce", "lite+ngram-target", "target+eagle+ngram-target", "ngram", "ngram-target",
         "prompt-lookup", "target@6", "target@12", "target@4+adapter", "target+eagle"]  # the bundled set: 12 drafts


def table(names=NAMES) -> pd.DataFrame:
    return pd.DataFrame([{"draft": n, "accept@1": 0.5, "accept@2": 0.25} for n in names])


def frame(names=NAMES) -> pd.DataFrame:
    return pd.DataFrame({"token": [1, 2], "text": ["a", "b"], "p": [0.6, 0.4], **{f"q {n}": [0.5, 0.5] for n in names}})


@pytest.mark.slow
def test_one_legend_entry_per_series_each_told_apart():
    for fig, want in ((compare_plots.acceptance_by_position(table()), NAMES),
                      (compare_plots.disagreement_bars(frame()), ["p (target)", *(f"q {n}" for n in NAMES)])):
        assert [t.name for t in fig.data] == want  # once each, in order
    lines = compare_plots.acceptance_by_position(table()).data
    assert len({(t.line.color, t.line.dash) for t in lines}) == len(NAMES) > len(PALETTE)  # colours repeat, dashes not
    bars = compare_plots.disagreement_bars(frame()).data[1:]
    assert len({(t.marker.color, t.marker.pattern.shape) for t in bars}) == len(NAMES)


@pytest.mark.slow
def test_the_legend_sits_under_the_axis_title_and_the_figure_grows_for_it():
    """At the container's bottom, in a margin that holds its rows and the axis title above them: one entry a row where
    a name is long (two would overlap in a third of the page), two where all are short."""
    long, short = compare_plots.acceptance_by_position(table()), compare_plots.acceptance_by_position(table(["a", "b", "c"]))
    for fig, rows in ((long, 12), (short, 2)):
        legend = fig.layout.legend
        assert (legend.yref, legend.y, legend.yanchor, legend.orientation) == ("container", 0, "bottom", "h")
        assert fig.layout.margin.b >= 60 + rows * compare_plots.ROW_PX - 1
        assert fig.layout.height == 320 + rows * compare_plots.ROW_PX
    assert long.layout.legend.entrywidth == 1 and short.layout.legend.entrywidth == 0.5
