"""A pair's pilot is measured once and remembered: later estimates price it at the load now, the tree lab's real runs
refresh it, and a budget refusal that follows comes at once, before any model work, saying what to reduce and to
what."""
import time

import gradio as gr
import pandas as pd
import pytest

from specviz.app import tree_tab
from specviz.labs import estimate as est
from specviz.labs import pilot_cache
from tests.helpers.app import forbid_model_work, handlers, tiny_store
from tests.helpers.models import last, tiny_llama

pytestmark = pytest.mark.usefixtures("fresh_pilot_cache")


def test_a_remembered_price_is_scaled_by_the_load_now_and_its_range_widens(monkeypatch):
    target = tiny_llama()
    load = iter([1.0, 2.0])
    monkeypatch.setattr(pilot_cache, "probe", lambda: next(load))
    pilot_cache.put(("k",), "costs", (target,))
    costs, scale = pilot_cache.get(("k",), (target,))
    assert costs == "costs" and scale == pytest.approx(2.0)
    assert pilot_cache.slack(1.0) == pilot_cache.SLACK and pilot_cache.slack(2.0) == pytest.approx(1.2 * 2 ** 0.5)
    assert pilot_cache.slack(0.5) == pilot_cache.slack(2.0)  # a load that fell is as uncertain as one that rose


def test_an_entry_holds_only_for_the_very_models_it_was_priced_with():
    target, other = tiny_llama(seed=0), tiny_llama(seed=1)
    pilot_cache.put(("k",), "costs", (target,))
    assert pilot_cache.get(("k",), (other,)) is None  # another model: the entry is dropped
    assert pilot_cache.get(("k",), (target,)) is None


def test_a_probe_reads_a_factor_of_at_least_one():
    assert pilot_cache.probe() >= 1.0


def test_a_tree_labs_real_runs_refresh_its_price(pair):
    target, draft, tok = pair
    ids = tok("ROMEO:", return_tensors="pt").input_ids
    configs = [est.DecodeConfig(k=3, temperature=0.0)]
    costs = est.TreeCosts(token_s=0.5, ratio=3.0, run_s=0.1, spread=1.4, slack=1.7)
    lab = pd.DataFrame({"setting": ["autoregressive", "chain k=3", "chain k=6"], "tokens/s": [10.0, 20.0, 5.0]})
    est.remember_tree_run(target, draft, ids, configs, lab, costs)
    fresh = est.measure_tree_costs(target, draft, ids, configs)  # no pilot: the lab's own measurement, at the load now
    scale = fresh.token_s / 0.1
    assert fresh.ratio == pytest.approx((0.5 + 2.0) / 2) and fresh.spread == 1.4
    assert fresh.run_s == pytest.approx(0.1 * scale) and fresh.slack == pytest.approx(pilot_cache.slack(scale))


def test_a_tree_lab_refusal_after_the_first_pilot_comes_within_two_seconds(monkeypatch):
    h = handlers(tiny_store())
    form = ("tiny-target", "tiny", "ROMEO:\n\nTo be", tree_tab.CHAINS, tree_tab.TREES, 0.0, 0, 1.0, 256, 3, 0)
    monkeypatch.setenv("SPECVIZ_MAX_REQUEST_S", "0.5")
    monkeypatch.setattr(tree_tab, "tree_lab", lambda *a, **k: pytest.fail("the lab ran"))
    with pytest.raises(gr.Error, match="this tree lab"):
        last(h.run_tree_lab(*form))  # the first request prices the pair with a pilot
    forbid_model_work(monkeypatch)
    start = time.perf_counter()
    with pytest.raises(gr.Error, match=r"would take (about|at least) [\d.]+ s.*reduce (repeats to (at most )?\d+|"
                                       r".*new tokens per run to (at most )?\d+|the settings .* together)") as refused:
        last(h.run_tree_lab(*form))
    took = time.perf_counter() - start
    assert took < 2.0, f"the refusal took {took:.2f} s: {refused.value}"


def test_a_sweep_refusal_after_the_first_pilot_comes_within_two_seconds(monkeypatch):
    h = handlers(tiny_store())
    form = ("tiny-target", ["tiny", "prompt-lookup"], "ROMEO:\n\nTo be", 1, 8, 0.0, 0, 1.0, 256, 0)
    h.estimate(*form, False, 2, 0.4)  # "Estimate time" prices the pair with a pilot
    monkeypatch.setenv("SPECVIZ_MAX_REQUEST_S", "0.5")
    forbid_model_work(monkeypatch)
    start = time.perf_counter()
    with pytest.raises(gr.Error, match=r"this sweep would take (about|at least) [\d.]+ s.*reduce (new tokens to (at most )?\d+|"
                                       r"the drafts)"):
        last(h.run_sweep(*form, False, 2, 0.4))
    assert time.perf_counter() - start < 2.0


def test_the_default_tree_lab_shortens_itself_to_fit_and_a_chosen_length_does_not():
    def pricing(n, prompts, reps):  # 1 s a token
        return est.Estimate(n, n, n)

    assert tree_tab.fit_default(pricing, tree_tab.DEFAULT_TOKENS, 2, 1, 20.0) == 20
    assert tree_tab.fit_default(pricing, tree_tab.DEFAULT_TOKENS, 2, 1, 100.0) is None  # it fits as it is
    assert tree_tab.fit_default(pricing, tree_tab.DEFAULT_TOKENS + 1, 2, 1, 20.0) is None  # asked for: refused instead
    assert tree_tab.fit_default(pricing, tree_tab.DEFAULT_TOKENS, 2, 1, tree_tab.MIN_TOKENS - 1.0) is None


def test_a_labs_token_pilot_is_measured_once_then_priced_at_the_load_now(pair, monkeypatch):
    from specviz.app import budget
    from specviz.config import DecodeConfig

    target, _, tok = pair
    ids, cfg = tok("ROMEO:", return_tensors="pt").input_ids, DecodeConfig(temperature=0.0, max_new_tokens=8)
    first = budget.token_seconds(target, ids, cfg)
    monkeypatch.setattr(budget, "autoregressive_generate", lambda *a, **k: pytest.fail("a second pilot ran"))
    monkeypatch.setattr(pilot_cache, "probe", lambda: 3.0)  # the load tripled since (the entry was put at another)
    (_, then, _), = pilot_cache._entries.values()
    assert budget.token_seconds(target, ids, cfg) == pytest.approx(first * 3.0 / then)
