"""The hardware lab: v(n) and c from interleaved timings, checked by hand on made-up seconds, then measured on
tiny models (a draft model timed by its own forward, a model-free drafter inside a decode)."""
import pytest

from specviz.drafts.drafter import PromptLookupDrafter
from specviz.labs import hardware
from specviz.labs.hardware import COLUMNS, free_rows, measure, summarize
from tests.helpers.models import perturbed


def test_summarize_by_hand():
    # three repeats; each ratio is taken within its repeat: row 2 -> 1.05, 1.1, 1.0; row 3 -> 2, 2, 2
    samples = {1: [1e-3, 2e-3, 1e-3], 2: [1.05e-3, 2.2e-3, 1e-3], 3: [2e-3, 4e-3, 2e-3]}
    hw = summarize(samples, drafts=[1e-4, 3e-4, 1e-4])  # c per repeat: 0.1, 0.15, 0.1
    t = hw.table
    assert list(t.columns) == COLUMNS and list(t.rows) == [1, 2, 3]
    assert list(t.v) == pytest.approx([1.0, 1.05, 2.0]) and list(t.v_min) == pytest.approx([1.0, 1.0, 2.0])
    assert list(t.v_max) == pytest.approx([1.0, 1.1, 2.0])
    assert list(t.ms) == pytest.approx([1.0, 1.05, 2.0]) and t.ms_max.iloc[2] == pytest.approx(4.0)
    assert hw.cost.c == pytest.approx(0.1) and hw.c_range == pytest.approx((0.1, 0.15))
    assert hw.free_rows == 2 and hw.cost.source == "measured here"
    assert hw.cost.v(1) == 1.0 and hw.cost.v(2) == pytest.approx(1.05) and hw.cost.v(4) == pytest.approx(2.95)
    assert hw.cost.step_cost(2) == pytest.approx(2 * 0.1 + 2.0)  # k c + v(k + 1)


def test_free_rows_stops_at_the_first_costly_pass():
    table = summarize({1: [1.0], 2: [1.08], 3: [1.2], 4: [1.05]}, []).table
    assert free_rows(table) == 2  # v(3) = 1.2 ends it, though v(4) is back under 1.1
    assert free_rows(table, tolerance=0.25) == 4
    assert summarize({1: [1.0], 2: [1.5]}, []).free_rows == 1


def test_measured_on_tiny_models(llama):
    draft = perturbed(llama, scale=0.3)
    hw = measure(llama, draft, prompt=[1, 5, 9], rows=range(2, 9), repeats=3, context=16)
    t = hw.table
    assert list(t.columns) == COLUMNS and list(t.rows) == list(range(1, 9))  # one row always measured
    assert t.v.iloc[0] == 1.0 and t.v_min.iloc[0] == 1.0 and t.v_max.iloc[0] == 1.0  # v(1) = 1 by construction
    assert (t.v_min <= t.v).all() and (t.v <= t.v_max).all() and (t.ms_min <= t.ms).all() and (t.ms > 0).all()
    assert hw.cost.verify == tuple(zip(t.rows, t.v)) and hw.cost.v(1) == 1.0
    assert hw.c_range[0] <= hw.cost.c <= hw.c_range[1] and hw.cost.c > 0
    assert hw.free_rows == free_rows(t) and any("c = " in n for n in hw.cost.notes)


@pytest.mark.slow
def test_a_model_free_drafter_is_timed_in_a_decode(llama):
    hw = measure(llama, PromptLookupDrafter(), prompt=[1, 2, 3, 1, 2, 3, 1, 2], rows=[1, 4], repeats=2, context=16)
    assert list(hw.table.rows) == [1, 4] and hw.cost.c >= 0 and hw.c_range is not None
    no_draft = measure(llama, None, rows=[1, 2], repeats=1, context=8)
    assert no_draft.cost.c == 0.0 and no_draft.c_range is None
    assert hardware.pilot_seconds(llama, [1, 2], rows=[1, 4], repeats=2, context=8) > 0


def test_bad_settings():
    with pytest.raises(ValueError, match="repeats >= 1"):
        measure(None, rows=[1, 2], repeats=0)
