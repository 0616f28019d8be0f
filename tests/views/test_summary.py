"""The summary's speed figures: the speedup leads with the median and range of its interleaved pairs, a single pair
says it is one and why, and a recorded run says where and when its speeds were measured."""
import re

import pytest

from specviz import DecodeConfig, autoregressive_generate, speculative_generate, theory
from specviz.config import TreeConfig
from specviz.views.summary import summary_markdown


@pytest.fixture(scope="module")
def runs(pair):
    target, draft, tok = pair
    ids = tok("ROMEO:", return_tensors="pt").input_ids
    cfg = DecodeConfig(k=3, temperature=0.0, max_new_tokens=12)
    tree = speculative_generate(target, draft, ids, DecodeConfig(temperature=0.0, max_new_tokens=12,
                                                                 tree=TreeConfig(shape=(2, 1))))
    return speculative_generate(target, draft, ids, cfg), autoregressive_generate(target, ids, cfg), tree


@pytest.mark.slow
def test_the_speedup_leads_with_the_median_and_range_of_its_pairs(runs):
    trace, base, _ = runs
    text = summary_markdown(trace, base, spread=[2.30, 0.67, 1.11])
    lead = re.search(r"\*\*Speedup on this machine\*\* measured median \*\*([\d.]+)×\*\* over (\d) interleaved pairs"
                     r".*range ([\d.]+)–([\d.]+)×", text)
    assert lead and lead.groups() == ("1.11", "3", "0.67", "2.30")
    assert "measured **2.30×**" not in text  # the one pair is not the bold figure


def test_a_single_pair_says_so_and_a_skipped_spread_says_why(runs):
    trace, base, _ = runs
    one = f"{theory.measured_speedup(trace, base):.2f}"
    assert f"measured **{one}×** from one pair (this run and its baseline, tokens/s);" in summary_markdown(trace, base)
    why = "2 more pairs would take about 9 s, over the 6 s a run sets aside for them"
    assert f"from one pair (this run and its baseline, tokens/s): {why}" in summary_markdown(trace, base, skipped=why)
    assert "no baseline" in summary_markdown(trace, None)


def test_a_tree_run_leads_the_same_way(runs):
    _, base, tree = runs
    text = summary_markdown(tree, base, spread=[1.0, 1.2, 0.9])
    assert "**Speedup on this machine** measured median **1.00×** over 3 interleaved pairs" in text


@pytest.mark.slow
def test_a_recorded_run_says_where_and_when_it_was_recorded(runs, store):
    from specviz.labs import gallery
    from tests.helpers.app import handlers

    trace, base, _ = runs
    text = summary_markdown(trace, base, where=gallery.RECORDED)
    assert "**Speedup when recorded (2026-11-30" in text and "on this machine" not in text
    outs = handlers(store).open_gallery(next(iter(gallery.entries())))
    assert "**Speedup when recorded (" in outs[3] and "on this machine" not in outs[3]


def test_the_speedup_names_the_forward_its_baseline_ran_on(runs):
    """The speedup divides by the baseline's speed, so the summary names the forward that baseline ran on."""
    from dataclasses import replace

    trace, base, _ = runs
    assert base.forward in ("lean", "dynamic")
    text = summary_markdown(trace, base)
    assert "the baseline ran the target alone on" in text and "would be faster: neither runs here" in text
    engine = summary_markdown(trace, replace(base, forward="llamacpp"))
    assert "the baseline ran the target alone on llama.cpp's own forward (llama-cpp-python), the fastest one-row" in engine
    assert "would be faster" not in engine
    in_c = summary_markdown(trace, replace(base, forward="lean-c"))
    assert "the baseline ran the target alone on specviz's lean forward, its layers in C, the fastest one-row" in in_c
    assert "the baseline ran" not in summary_markdown(trace, replace(base, forward=""))  # an older trace: not said
