"""TensorRT-LLM's Prometheus scrape, each build read with its own meaning: the cumulative counters
(trtllm_spec_decode_num_*_tokens_total) as counts since the start, or between two scrapes; the per-iteration gauges
of PR #12545's first form as one iteration's counts, never added up; the acceptance-length gauge as the last
iteration's (accepted + steps) / steps, checked where the run can state it. Every figure is worked out by hand."""
import math

import pytest

from specviz.engines.read import read_engine_run
from specviz.engines.run import rates

LABELS = 'engine_type="trtllm",model_name="{model}"'


def counters(drafted, accepted, length=None, model="x", extra="", typed=True) -> str:
    labels = LABELS.format(model=model) + extra
    lines = []
    for name, value in (("num_draft_tokens", drafted), ("num_accepted_tokens", accepted)):
        if typed:
            lines.append(f"# TYPE trtllm_spec_decode_{name}_total counter")
        lines.append(f"trtllm_spec_decode_{name}_total{{{labels}}} {value}")
    if length is not None:
        lines.append(f"trtllm_spec_decode_acceptance_length{{{labels}}} {length}")
    return "\n".join(lines) + "\n"


def gauges(drafted, accepted, length=None, model="x", extra="", typed=True) -> str:
    labels = LABELS.format(model=model) + extra
    lines = []
    for name, value in (("num_draft_tokens", drafted), ("num_accepted_tokens", accepted), ("acceptance_length", length)):
        if value is None:
            continue
        if typed:
            lines.append(f"# TYPE trtllm_spec_decode_{name} gauge")
        lines.append(f"trtllm_spec_decode_{name}{{{labels}}} {value}")
    return "\n".join(lines) + "\n"


def refused_naming_the_gauges(text: str) -> str:
    with pytest.raises(ValueError) as refused:
        read_engine_run(text)
    message = str(refused.value).splitlines()[0]
    assert "closest to TensorRT-LLM Prometheus per-iteration gauges" in message, message
    assert "(line " in message and "Paste instead: " in message, message
    return message


# -- the counters: cumulative since the server started ---------------------------------------------------------
def test_one_counter_scrape_is_the_counts_since_start_and_steps_stay_unknown():
    run = read_engine_run(counters(1200.0, 700.0, length=2.5))
    assert (run.drafted, run.accepted, run.steps) == (1200, 700, None)
    assert run.source == "Prometheus scrape (trtllm)" and run.model == "x"
    assert {r.name: r.value for r in rates(run)} == {"acceptance rate": 700 / 1200}  # no length from 2.5
    notes = " ".join(run.notes)
    assert "since the server started" in notes and "steps stay unknown" in notes
    assert "acceptance_length = 2.5: the last iteration's" in notes and "not a mean of these counts" in notes


def test_two_counter_scrapes_give_the_counts_between_them():
    run = read_engine_run([counters(1200.0, 700.0, 2.5), counters(1500.0, 880.0, 3.0)])
    assert (run.drafted, run.accepted, run.steps) == (300, 180, None)
    assert "acceptance_length = 3: " in " ".join(run.notes)  # the last scrape's, as a note


def test_three_counter_scrapes_in_one_text_give_each_interval():
    run = read_engine_run(counters(100.0, 60.0) + counters(400.0, 250.0) + counters(1000.0, 610.0))
    assert (run.drafted, run.accepted) == (900, 550)
    assert [(p.drafted, p.accepted) for p in run.series] == [(300, 190), (600, 360)]


def test_untyped_total_lines_read_as_the_counters():
    run = read_engine_run(counters(1200.0, 700.0, typed=False))
    assert (run.drafted, run.accepted, run.steps) == (1200, 700, None)


def test_counters_of_several_workers_are_summed_and_several_models_kept_apart():
    workers = counters(1200.0, 700.0, extra=',worker="0"') + counters(800.0, 500.0, extra=',worker="1"', typed=False)
    run = read_engine_run(workers)
    assert (run.drafted, run.accepted) == (2000, 1200)
    two_models = counters(1200.0, 700.0, model="a") + counters(90.0, 30.0, model="b", typed=False)
    with pytest.raises(ValueError, match="several models"):
        read_engine_run(two_models)
    picked = read_engine_run(two_models, model="b")
    assert (picked.drafted, picked.accepted, picked.model) == (90, 30, "b")


def test_a_counter_that_fell_is_a_restart():
    with pytest.raises(ValueError, match="server restarted"):
        read_engine_run([counters(1200.0, 700.0), counters(50.0, 20.0)])


# -- the gauges: one iteration ---------------------------------------------------------------------------------
def test_a_gauge_scrape_is_one_iteration_with_steps_from_the_acceptance_length():
    run = read_engine_run(gauges(12.0, 6.0, 2.5))  # (6 + 4) / 4 = 2.5: 4 requests verified drafts
    assert (run.drafted, run.accepted, run.steps) == (12, 6, 4)
    assert run.source == "Prometheus scrape (trtllm, per-iteration gauges)"
    assert {r.name: r.value for r in rates(run)}["mean acceptance length"] == 1 + 6 / 4
    notes = " ".join(run.notes)
    assert "one iteration" in notes and "not counts since the server started" in notes
    assert "6 / (2.5 - 1) = 4" in notes


def test_a_float32_acceptance_length_gives_whole_steps():
    length = 2.3333332538604736  # 14 / 6 as TensorRT-LLM's float field holds it
    run = read_engine_run(gauges(18.0, 8.0, length, typed=False))
    assert (run.drafted, run.accepted, run.steps) == (18, 8, 6)
    assert "per-iteration gauges" in run.source


def test_a_gauge_scrape_without_the_length_leaves_steps_unknown():
    run = read_engine_run(gauges(12.0, 6.0))
    assert (run.drafted, run.accepted, run.steps) == (12, 6, None)
    assert "steps unknown" in " ".join(run.notes)


def test_nothing_accepted_fits_any_step_count():
    run = read_engine_run(gauges(12.0, 0.0, 1.0))
    assert (run.drafted, run.accepted, run.steps) == (12, 0, None)


def test_gauge_scrapes_are_never_added_up():
    first, second = gauges(12.0, 6.0, 2.5), gauges(8.0, 3.0, 2.0)
    message = refused_naming_the_gauges(first + second)
    assert "2 scrapes of gauges" in message and "line 2:" in message
    with pytest.raises(ValueError, match="2 scrapes of gauges"):
        read_engine_run([first, second])
    untyped = gauges(12.0, 6.0, 2.5, typed=False) + gauges(8.0, 3.0, 2.0, typed=False)
    assert "comes twice" in refused_naming_the_gauges(untyped)


def test_gauges_of_several_engines_are_not_added():
    text = gauges(12.0, 6.0, 2.5, extra=',worker="0"') + gauges(8.0, 3.0, 2.0, extra=',worker="1"', typed=False)
    assert "several label sets" in refused_naming_the_gauges(text)


def test_an_iteration_without_drafts_has_nothing_to_read():
    with pytest.raises(ValueError, match="verified no drafts"):
        read_engine_run(gauges(0.0, 0.0, 0.0))


@pytest.mark.parametrize("drafted, accepted, length, why", [
    (12.0, 6.0, 2.4, "fits no whole number"),  # 6 / 1.4 = 4.29 steps
    (3.0, 2.0, 1.5, "fits no whole number"),  # 2 / 0.5 = 4 steps, yet only 3 drafts
    (12.0, 6.0, 0.0, "acceptance length 0"),
    (12.0, 0.0, 2.0, "nothing accepted"),
])
def test_a_length_the_counts_cannot_have_is_refused(drafted, accepted, length, why):
    with pytest.raises(ValueError, match=why):
        read_engine_run(gauges(drafted, accepted, length))


def test_gauges_and_counters_in_one_scrape_are_refused():
    text = gauges(12.0, 6.0, typed=True).replace("num_accepted_tokens gauge", "num_accepted_tokens_total counter")
    text = text.replace("trtllm_spec_decode_num_accepted_tokens{", "trtllm_spec_decode_num_accepted_tokens_total{")
    with pytest.raises(ValueError, match="mixes"):
        read_engine_run(text)


# -- bad input -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("text", [
    counters(-5.0, 3.0), counters(1200.0, float("nan")), counters(1200.0, 700.0, length="NaN"),
    counters(1200.0, 700.0, length=-2.5), counters(1200.0, 700.0, length=0.5),
    gauges(-12.0, 6.0, 2.5), gauges(12.0, "NaN", 2.5), gauges(12.0, 6.0, "NaN"), gauges(12.0, 6.0, "-Inf"),
])
def test_negative_and_nan_values_are_refused(text):
    with pytest.raises(ValueError):
        read_engine_run(text)


def test_the_checks_can_fail():
    """A negative control: the gauge build's figures are not those of the counter build with the same numbers."""
    one_iteration = read_engine_run(gauges(12.0, 6.0, 2.5))
    since_start = read_engine_run(counters(12.0, 6.0, 2.5))
    assert one_iteration.steps == 4 and since_start.steps is None
    assert one_iteration.source != since_start.source
    assert math.isclose({r.name: r.value for r in rates(one_iteration)}["mean acceptance length"], 2.5)
