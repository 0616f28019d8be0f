"""Each figure builds from a hand-made frame and holds the right numbers."""
import pandas as pd
import pytest

from specviz.trace import FRAME_COLUMNS
from specviz.views import plots
from tests.helpers.traces import sample_trace


def token_frame(rows):
    """rows: (round, position, status, p, q, u); drafted rows only, plus one bonus row."""
    out = [[r, 3, pos, 10 + pos, f"t{pos}", st, True, p, q, p / q, min(1, p / q), u, 0.5, None, None]
           for r, pos, st, p, q, u in rows]
    out.append([1, 3, 3, 99, "bonus", "bonus", False, 0.5, None, None, None, None, None, None, None])
    return pd.DataFrame(out, columns=FRAME_COLUMNS).astype({"q": float, "ratio": float, "accept_prob": float,
                                                              "u": float})


ROWS = [(0, 0, "accepted", 0.6, 0.5, 0.1), (0, 1, "rejected", 0.1, 0.5, 0.9), (0, 2, "discarded", 0.2, 0.4, None),
        (1, 0, "accepted", 0.9, 0.3, 0.5), (1, 1, "accepted", 0.4, 0.5, 0.2), (1, 2, "accepted", 0.8, 0.8, 0.3),
        (2, 0, "rejected", 0.1, 0.9, 0.95), (2, 1, "discarded", 0.1, 0.9, None)]


def test_acceptance_by_position_hand_computed():
    fig = plots.acceptance_by_position(token_frame(ROWS))
    bar = fig.data[0]
    assert list(bar.x) == [1, 2, 3]
    # position 1: 2 of 3 accepted; position 2: 1 of 3; position 3: 1 of 2 (the bonus row is not a draft)
    assert list(bar.y) == pytest.approx([2 / 3, 1 / 3, 1 / 2])
    # given every earlier draft accepted (discarded drafts were never reached): 2 of 3, 1 of 2, 1 of 1
    reached = fig.data[1]
    assert list(reached.x) == [1, 2, 3] and list(reached.y) == pytest.approx([2 / 3, 1 / 2, 1.0])


def test_tokens_per_round_histogram():
    rounds = pd.DataFrame([[0, 3, 3, 1, 2, 0, 0, 0], [1, 3, 3, 3, 4, 0, 0, 0], [2, 3, 3, 1, 2, 0, 0, 0],
                           [3, 3, 3, 0, 1, 0, 0, 0]], columns=plots.ROUND_COLUMNS[:8])
    bar = plots.tokens_per_round(rounds).data[0]
    assert dict(zip(bar.x, bar.y)) == {1: 1, 2: 2, 4: 1}


def test_p_vs_q_one_trace_per_decision():
    fig = plots.p_vs_q(token_frame(ROWS))
    by_name = {t.name: t for t in fig.data}
    assert list(by_name["accepted"].x) == [0.5, 0.3, 0.5, 0.8] and list(by_name["accepted"].y) == [0.6, 0.9, 0.4, 0.8]
    assert list(by_name["rejected"].y) == [0.1, 0.1]
    assert len(by_name["discarded"].x) == 2
    assert by_name["accepted"].marker.color == plots.COLOURS["accepted"]


def test_round_times_stacks_draft_and_target_in_ms():
    rounds = pd.DataFrame([[0, 2, 2, 1, 2, 0.01, 0.05, 0.07], [1, 2, 2, 2, 3, 0.02, 0.04, 0.07]],
                          columns=plots.ROUND_COLUMNS[:8])  # no head shares: unsplit
    fig = plots.round_times(rounds)
    assert fig.layout.barmode == "stack"
    assert [t.name for t in fig.data] == ["draft", "target"]
    assert list(fig.data[0].y) == pytest.approx([10, 20]) and list(fig.data[1].y) == pytest.approx([50, 40])


def test_accept_line_bars_and_coins():
    frame = token_frame(ROWS)
    fig = plots.accept_line(frame[frame["round"] == 0])
    bars, coins = fig.data
    assert list(bars.x) == [1, 2, 3] and list(bars.y) == pytest.approx([1.0, 0.2, 0.5])
    assert list(coins.y)[:2] == pytest.approx([0.1, 0.9])
    assert list(bars.marker.color) == [plots.COLOURS[s] for s in ("accepted", "rejected", "discarded")]


def test_rounds_and_residual_frames_from_a_trace():
    t = sample_trace()
    rounds = plots.rounds_frame(t)
    assert rounds[["drafted", "n_accepted", "emitted"]].values.tolist() == [[3, 1, 2], [2, 2, 3]]
    res = plots.residual_frame(t, 0)
    assert res["token"].tolist() == [6, 8] and res["residual"].tolist() == [0.5, 0.3]
    fig = plots.residual_bars(res)
    assert [tr.name for tr in fig.data] == ["residual", "p (target)", "q (draft)"]
    assert list(fig.data[1].y) == [0.25, 0.2]
    empty = plots.residual_bars(plots.residual_frame(t, 1))
    assert "No rejection" in empty.layout.annotations[0].text and empty.layout.xaxis.visible is False  # a note
