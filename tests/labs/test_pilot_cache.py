"""A pair's pilot is measured once and remembered: later estimates price it by target passes timed now over the pass
timed beside it (so a price taken on a starved thread, or under another load, is never used as measured), the tree
lab's real runs refresh it, and a budget refusal that follows comes at once, before any pilot, saying what to reduce
and to what. The scaling is checked on a virtual clock, where a model's pass costs exactly what the test says."""

import gradio as gr
import pandas as pd
import pytest
import torch

from specviz.app import tree_tab
from specviz.config import DecodeConfig
from specviz.labs import estimate as est
from specviz.labs import least, pilot_cache
from tests.helpers.app import count_pass_timings, forbid_model_work, handlers, tiny_store
from tests.helpers.clock import VirtualMachine
from tests.helpers.models import last, perturbed, tiny_gpt2, tiny_llama

pytestmark = pytest.mark.usefixtures("fresh_pilot_cache")


@pytest.fixture
def machine(monkeypatch):
    monkeypatch.setenv("SPECVIZ_BASELINE", "same")  # the baseline on the hooked forward
    return VirtualMachine(monkeypatch)  # every forward of a costed model: slow x its base seconds


def test_a_remembered_price_is_scaled_by_a_pass_timed_now_and_its_range_widens():
    target = tiny_llama()
    pilot_cache.put(("k",), "costs", (target,), 0.5)
    costs, scale = pilot_cache.get(("k",), (target,), 1.0)
    assert costs == "costs" and scale == pytest.approx(2.0)
    assert pilot_cache.slack(1.0) == pilot_cache.SLACK and pilot_cache.slack(2.0) == pytest.approx(1.2 * 2 ** 0.5)
    assert pilot_cache.slack(0.5) == pilot_cache.slack(2.0)  # a speed that rose is as uncertain as one that fell


def test_an_entry_holds_only_for_the_very_models_it_was_priced_with():
    target, other = tiny_llama(seed=0), tiny_llama(seed=1)
    pilot_cache.put(("k",), "costs", (target,), 1.0)
    assert pilot_cache.get(("k",), (other,), 1.0) is None  # another model: the entry is dropped
    assert pilot_cache.get(("k",), (target,), 1.0) is None


def test_a_pass_timed_now_is_the_forwards_cost_on_this_machine(machine):
    target = machine.costing(tiny_gpt2(), 0.02)
    ids = torch.tensor([[1, 5, 9, 3]])
    assert pilot_cache.pass_now(target, ids) == pytest.approx(0.02)
    machine.slow = 40.0
    assert pilot_cache.pass_now(target, ids) == pytest.approx(0.8)
    assert least.pass_seconds(target, ids, DecodeConfig()) == pytest.approx(0.8 / pilot_cache.SLACK)


@pytest.mark.slow
@pytest.mark.parametrize("then, now", [(40.0, 1.0), (1.0, 40.0), (3.0, 3.0)])
def test_a_price_taken_at_one_load_is_priced_at_the_load_now(machine, monkeypatch, then, now):
    """A pilot taken at start-up, 40x slower (a starved thread, a busy machine) is never used as measured once the
    machine runs fast again, nor a fast one once it is slow: the costs follow the passes timed now, exactly."""
    target = machine.costing(tiny_gpt2(sharpen=4.0), 0.02)
    draft = machine.costing(perturbed(tiny_gpt2(sharpen=4.0), scale=0.2), 0.002)
    ids, cfg = torch.tensor([[1, 5, 9, 3]]), DecodeConfig(temperature=0.0, max_new_tokens=16)
    machine.slow = then
    first = est.measure_costs(target, {"d": draft}, ids, [1, 4], cfg)
    assert first.token_s == pytest.approx(0.02 * then) and first.slack == 1.0
    monkeypatch.setattr(est, "_pilot", lambda *a: pytest.fail("a second pilot ran"))
    machine.slow = now
    later = est.measure_costs(target, {"d": draft}, ids, [1, 4], cfg)
    assert later.token_s == pytest.approx(0.02 * now)
    assert later.round_s["d"] == pytest.approx(tuple(r * now / then for r in first.round_s["d"]))
    assert later.slack == pytest.approx(pilot_cache.slack(now / then))


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


def test_a_tree_lab_refusal_after_the_first_pilot_comes_at_once(monkeypatch):
    h = handlers(tiny_store())
    form = ("tiny-target", "tiny", "ROMEO:\n\nTo be", tree_tab.CHAINS, tree_tab.TREES, 0.0, 0, 1.0, 256, 3, 0)
    monkeypatch.setenv("SPECVIZ_MAX_REQUEST_S", "0.5")
    monkeypatch.setattr(tree_tab, "tree_lab", lambda *a, **k: pytest.fail("the lab ran"))
    with pytest.raises(gr.Error, match="this tree lab"):
        last(h.run_tree_lab(*form))  # the first request prices the pair with a pilot
    forbid_model_work(monkeypatch)
    timings = count_pass_timings(monkeypatch)
    with pytest.raises(gr.Error, match=r"would take (about|at least) [\d.]+ s.*reduce (repeats to (at most )?\d+|"
                                       r".*new tokens per run to (at most )?\d+|the settings .* together)"):
        last(h.run_tree_lab(*form))
    assert len(timings) == 1  # one timing of a few passes, and no pilot: at once


@pytest.mark.slow
def test_a_sweep_refusal_after_the_first_pilot_comes_at_once(monkeypatch):
    h = handlers(tiny_store())
    form = ("tiny-target", ["tiny", "prompt-lookup"], "ROMEO:\n\nTo be", 1, 8, 0.0, 0, 1.0, 256, 0)
    h.estimate(*form, False, 2, 0.4)  # "Estimate time" prices the pair with a pilot
    monkeypatch.setenv("SPECVIZ_MAX_REQUEST_S", "0.5")
    forbid_model_work(monkeypatch)
    timings = count_pass_timings(monkeypatch)
    with pytest.raises(gr.Error, match=r"this sweep would take (about|at least) [\d.]+ s.*reduce (new tokens to (at most )?\d+|"
                                       r"the drafts)"):
        last(h.run_sweep(*form, False, 2, 0.4))
    assert len(timings) == 1


def test_the_default_tree_lab_shortens_itself_to_fit_and_a_chosen_length_does_not():
    def pricing(n, prompts, reps):  # 1 s a token
        return est.Estimate(n, n, n)

    assert tree_tab.fit_default(pricing, tree_tab.DEFAULT_TOKENS, 2, 1, 20.0) == 20
    assert tree_tab.fit_default(pricing, tree_tab.DEFAULT_TOKENS, 2, 1, 100.0) is None  # it fits as it is
    assert tree_tab.fit_default(pricing, tree_tab.DEFAULT_TOKENS + 1, 2, 1, 20.0) is None  # asked for: refused instead
    assert tree_tab.fit_default(pricing, tree_tab.DEFAULT_TOKENS, 2, 1, tree_tab.MIN_TOKENS - 1.0) is None


def test_a_labs_token_pilot_is_measured_once_then_priced_at_the_passes_now(pair, monkeypatch):
    from specviz.app import budget

    target, _, tok = pair
    ids, cfg = tok("ROMEO:", return_tensors="pt").input_ids, DecodeConfig(temperature=0.0, max_new_tokens=8)
    first = budget.token_seconds(target, ids, cfg)
    monkeypatch.setattr(budget, "autoregressive_generate", lambda *a, **k: pytest.fail("a second pilot ran"))
    (_, then, _), = pilot_cache._entries.values()
    monkeypatch.setattr(pilot_cache, "pass_now", lambda *a: 3.0 * then)  # a pass takes three times as long now
    assert budget.token_seconds(target, ids, cfg) == pytest.approx(first * 3.0)


@pytest.mark.slow
def test_an_estimate_that_fits_is_one_the_gate_admits(machine, monkeypatch):
    """Estimate time and Run sweep read one price: over several loads, budgets and requests, an estimate that says
    Run sweep takes it is never refused by Run sweep's gate at the same load, and one that says it would refuse is."""
    from tests.helpers.models import ui_models

    target, draft, tok = ui_models()
    h = handlers(tiny_store((machine.costing(target, 0.02), machine.costing(draft, 0.002), tok)))
    monkeypatch.setattr(tree_tab, "tree_lab", lambda *a, **k: pytest.fail("the lab ran"))
    seen = set()
    for slow in (1.0, 6.0, 40.0):
        machine.slow = slow
        for tokens, prompts in ((8, "ROMEO:"), (32, "ROMEO:\n\nTo be"), (64, "ROMEO:\n\nTo be\n\nJULIET:")):
            for budget_s in (5.0, 30.0, 120.0):
                monkeypatch.setenv("SPECVIZ_MAX_REQUEST_S", str(budget_s))
                form = ("tiny-target", ["tiny"], prompts, 1, 8, 0.0, 0, 1.0, tokens, 0, True, 4, 0.4)
                note = h.estimate(*form)
                fits = not note.startswith("**Run sweep would refuse")
                seen.add(fits)
                if fits:
                    likely = note.split(" (")[0]  # "**Estimated ≈ 2.9 s": the range widens once the price is reused
                    assert next(h.run_sweep(*form))[0].startswith(likely)  # admitted, at the same likely duration
                else:
                    with pytest.raises(gr.Error, match="this sweep would take"):
                        next(h.run_sweep(*form))
    assert seen == {True, False}  # both sides were tried


@pytest.mark.slow
def test_an_estimate_that_fits_is_kept_by_its_run_when_the_machine_slows_after_it(machine, monkeypatch):
    """Estimate time says a form fits; the machine then slows so that the gate's own price is over the budget: the
    run goes ahead as the estimate said, saying both prices; the same form never estimated is refused, and so is
    one whose estimate said it would refuse, and a promise older than PROMISE_S binds nothing."""
    from specviz.app import budget
    from tests.helpers.models import ui_models

    target, draft, tok = ui_models()
    h = handlers(tiny_store((machine.costing(target, 0.02), machine.costing(draft, 0.002), tok)))
    form, other = [("tiny-target", ["tiny"], "ROMEO:", 1, 4, 0.0, 0, 1.0, 8, seed, False, 4, 0.4) for seed in (0, 1)]
    likely = float(h.estimate(*form).split("≈ ")[1].split(" ")[0])
    monkeypatch.setenv("SPECVIZ_MAX_REQUEST_S", str(likely * 1.2))
    assert h.estimate(*form).startswith("**Estimated")  # fits the budget at this speed: a promise
    machine.slow = 4.0  # four times slower now: the gate's own price is over
    first = next(h.run_sweep(*form)).status
    assert "Estimate time said this fits" in first and "it runs as the estimate said" in first.lower()
    with pytest.raises(gr.Error, match="this sweep would take"):
        next(h.run_sweep(*other))  # never estimated: refused
    assert h.estimate(*form).startswith("**Run sweep would refuse this now")  # estimated again, slow: withdrawn
    with pytest.raises(gr.Error, match="this sweep would take"):
        next(h.run_sweep(*form))
    machine.slow = 1.0
    assert h.estimate(*form).startswith("**Estimated")
    machine.slow = 4.0
    monkeypatch.setattr(budget, "PROMISE_S", 0.0)  # the promise has lapsed
    with pytest.raises(gr.Error, match="this sweep would take"):
        next(h.run_sweep(*form))


def test_a_withdrawn_promise_is_not_honoured():
    """A promise holds for its own form until it is withdrawn, or an estimate of the form over the budget replaces
    it; withdrawing a form with no promise, or another form's, leaves the rest as they were."""
    from specviz.app import budget

    form, other = budget.form_key("sweep", "a", 1), budget.form_key("sweep", "a", 2)
    budget.promise(form, 5.0, 10.0)
    budget.promise(other, 7.0, 10.0)
    assert budget.promised(form, 10.0).likely_s == 5.0
    budget.withdraw(form)
    assert budget.promised(form, 10.0) is None
    assert budget.promised(other, 10.0).likely_s == 7.0  # another form's promise stands
    budget.withdraw(form)  # nothing left to withdraw: no error
    budget.withdraw(budget.form_key("load", "never estimated"))
    assert budget.promised(other, 10.0).likely_s == 7.0
    budget.promise(form, 4.0, 10.0)  # estimated again and fits: promised again
    assert budget.promised(form, 10.0).likely_s == 4.0
    budget.promise(form, 11.0, 10.0)  # estimated again, over: no promise
    assert budget.promised(form, 10.0) is None


def test_a_sweep_estimate_that_would_refuse_withdraws_the_forms_promise(monkeypatch):
    """Estimate time of the sweep lab promises a form the gate admits and withdraws it when the gate refuses the
    same form later: its Run is then held to the gate alone."""
    from specviz.app import budget, sweep_tab

    refuse = {"now": False}

    def gate(*args):
        if refuse["now"]:
            raise ValueError("over the budget")
        return "**Estimated**", est.Estimate(2.0, 1.0, 3.0), None

    monkeypatch.setattr(sweep_tab, "sweep_setup", lambda store, *form: ())
    monkeypatch.setattr(sweep_tab, "gate", gate)
    monkeypatch.setenv("SPECVIZ_MAX_REQUEST_S", "20")
    form = ("tiny-target", ["tiny"], "ROMEO:", 1, 4, 0.0, 0, 1.0, 8, 0)
    key = budget.form_key("sweep", *form, False, 4, 0.4)
    assert sweep_tab.estimate(None, *form, False, 4, 0.4) == "**Estimated**"
    assert budget.promised(key, 20.0).likely_s == 2.0
    refuse["now"] = True
    assert sweep_tab.estimate(None, *form, False, 4, 0.4).startswith("**Run sweep would refuse this now:** over")
    assert budget.promised(key, 20.0) is None


def test_the_load_labs_run_keeps_what_its_estimate_said(monkeypatch):
    """The Load lab's Estimate time and Run load lab: a form estimated to fit runs although its price has since
    grown over the budget; one estimated over is refused by both."""
    from specviz.app import load_tab
    from specviz.labs import load

    class Ran(Exception):
        pass

    price = {"s": 10.0}
    monkeypatch.setattr(load, "estimate", lambda **a: est.Estimate(price["s"], price["s"] / 2, price["s"] * 2))
    monkeypatch.setattr(load, "run_lab", lambda **a: (_ for _ in ()).throw(Ran()))
    monkeypatch.setenv("SPECVIZ_MAX_REQUEST_S", "20")
    store = tiny_store()
    form = ("tiny-target", "tiny", "ROMEO:", ["1", "2"], 128, 2, 4, 1)
    assert load_tab.estimate_time(store, *form).startswith("**Estimated")
    price["s"] = 30.0  # the machine slowed: over the budget now
    with pytest.raises(Ran):
        load_tab.run_lab(store, *form)  # admitted, as its estimate said
    with pytest.raises(ValueError, match="this load run would take"):
        load_tab.run_lab(store, *form[:-1], 2)  # another form, never estimated
    assert load_tab.estimate_time(store, *form).startswith("**Run load lab would refuse this now")
    with pytest.raises(ValueError, match="this load run would take"):
        load_tab.run_lab(store, *form)
