"""The trainer-beside-serving figure draws the table it is given."""
import pandas as pd
import pytest

from specviz.views.training_plots import training_vs_serving_figure


def test_one_dashed_training_line_and_one_serving_line_per_kind():
    frame = pd.DataFrame(dict(kind=["cond", "cond", "full"], position=[1, 2, 1], training=[0.8, 0.6, 0.8],
                              serving=[0.5, 0.4, 0.5], n=[10, 8, 10], noise=[0.3, 0.35, 0.3]))
    fig = training_vs_serving_figure(frame)
    assert [t.name for t in fig.data] == ["training: cond_acc (step i right, given 1..i-1)", "serving: accepted / reached",
                                          "training: full_acc (all of steps 1..i right)", "serving: accepted / drafted"]
    assert list(fig.data[0].y) == [0.8, 0.6] and fig.data[0].line.dash == "dash"
    assert list(fig.data[1].y) == [0.5, 0.4] and list(fig.data[1].error_y.array) == [0.3, 0.35]
    with pytest.raises(ValueError, match="nothing to draw"):
        training_vs_serving_figure(frame.iloc[:0])
