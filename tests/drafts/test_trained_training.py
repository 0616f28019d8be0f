"""A trainer's per-position accuracies read from the formats speculators and SpecForge write, put beside a run's
acceptance per position, and the gap read in words: checked against hand-computed values."""
import json

import pandas as pd
import pytest

from specviz.drafts.trained.training import beside, read_trainer_metrics, reading, serving_rates, trained_rates
from tests.helpers.traces import sample_trace
from tests.helpers.trained import CONSOLE


def values(frame, **where):
    rows = frame
    for k, v in where.items():
        rows = rows[rows[k] == v]
    return list(zip(rows.step, rows.position, rows.value))


def test_speculators_console_lines():
    frame = read_trainer_metrics(CONSOLE)
    assert values(frame, kind="full") == [(10, 1, 0.8), (20, 1, 0.7), (10, 2, 0.48), (20, 2, 0.42)]
    assert values(frame, kind="cond") == [(10, 1, 0.8), (20, 1, 0.7), (10, 2, 0.6), (20, 2, 0.6)]
    assert set(frame.split) == {"train"}  # loss_0, lr and epoch are not accuracies
    rates, said = trained_rates(frame)
    assert dict(zip(zip(rates.kind, rates.position), rates.training)) == pytest.approx(
        {("cond", 1): 0.75, ("cond", 2): 0.6, ("full", 1): 0.75, ("full", 2): 0.45})
    assert said == "training, the mean of its last 2 logged steps (10-20)"


def test_json_lines_nested_and_validation_preferred():
    lines = [{"train": {"full_acc_0": 0.5, "cond_acc_0": 0.5}, "global_step": 3},
             {"val": {"full_acc_0_epoch": 0.9, "cond_acc_1_epoch": 0.4}, "epoch": 0}]
    frame = read_trainer_metrics("\n".join(json.dumps(x) for x in lines))
    assert values(frame, split="val", kind="full") == [(1, 1, 0.9)]  # no step key: its line number
    assert values(frame, split="val", kind="cond") == [(1, 2, 0.4)]
    rates, said = trained_rates(frame)
    assert list(zip(rates.kind, rates.position, rates.training)) == [("cond", 2, 0.4), ("full", 1, 0.9)]
    assert said.startswith("validation")


def test_dflash_positions_start_at_the_first_logged_and_specforge_steps_at_zero():
    dflash = read_trainer_metrics(json.dumps([{"train/position_1_acc": 0.7, "train/position_2_acc": 0.5,
                                              "train/full_acc": 0.6, "global_step": 8}]))
    assert values(dflash, kind="step") == [(8, 1, 0.7), (8, 2, 0.5)]  # position_0 (the anchor) not logged
    specforge = read_trainer_metrics("train/acc_0: 0.66 train/acc_1: 0.41 train/ploss_0: 2.0")
    assert values(specforge, kind="step") == [(0, 1, 0.66), (0, 2, 0.41)]


def test_what_is_not_a_trainer_metric_is_refused_in_words():
    with pytest.raises(ValueError, match="no per-position accuracy found"):
        read_trainer_metrics("loss=1.0, lr=2e-4")
    with pytest.raises(ValueError, match="no trainer metrics given"):
        read_trainer_metrics("  ")
    with pytest.raises(ValueError, match="full_acc_0 = 72.0: an accuracy is a share"):
        read_trainer_metrics("train/full_acc_0=72")


def test_serving_rates_by_hand():
    # round 1 drafts 3, accepts 1 (positions 1, 2 verified); round 2 drafts 2, accepts both
    served = serving_rates(sample_trace())
    assert list(served.drafted) == [2, 2, 1] and list(served.reached) == [2, 2, 0]
    assert list(served.accepted) == [2, 1, 0]
    assert list(served.full) == [1.0, 0.5, 0.0] and list(served.cond[:2]) == [1.0, 0.5]
    frame = beside(read_trainer_metrics(CONSOLE), sample_trace())
    full = frame[frame.kind == "full"]
    assert list(full.serving) == [1.0, 0.5] and list(full.n) == [2, 2] and list(full.training) == pytest.approx([0.75, 0.45])
    assert list(frame[frame.kind == "cond"].serving) == [1.0, 0.5]  # cond_acc beside accepted / reached


def table(training, serving, n=400, kind="cond"):
    frame = pd.DataFrame(dict(kind=kind, position=range(1, len(training) + 1), training=training, serving=serving,
                              n=n))
    frame["noise"] = 2 * (frame.serving * (1 - frame.serving) / n) ** 0.5
    return frame


def test_a_gap_at_every_position_including_the_first_reads_as_a_mismatch():
    text = reading(table([0.8, 0.6, 0.5], [0.3, 0.2, 0.1]))
    assert text.startswith("Serving accepts less than training at every draft position, the first included")
    assert "serving 0.30 against training 0.80 at position 1" in text and "mismatch" in text


def test_agreement_at_the_first_position_then_a_fall_reads_as_depth():
    text = reading(table([0.8, 0.6, 0.5], [0.81, 0.3, 0.2]))
    assert text.startswith("Serving and training agree at the first position") and "from position 2 (2, 3)" in text
    assert "not a serving mismatch" in text


def test_no_gap_and_the_noise_band():
    assert reading(table([0.8, 0.6], [0.82, 0.61])).startswith("Serving is below training beyond the run's noise at no")
    # 0.70 against 0.80 from 20 drafts: within two standard errors (0.20), so no gap is claimed
    assert reading(table([0.8], [0.7], n=20)).startswith("Serving is below training beyond the run's noise at no")
    assert "temperature 0.8" in reading(table([0.8], [0.8]), temperature=0.8)
