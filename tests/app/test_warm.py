"""The labs' default forms priced in the background at start: afterwards the default k sweep asked with more tokens,
and the default tree lab asked with more repeats, are refused over the budget without any pilot; a price taken at
start-up under a heavy load (or on the starved low-priority thread) is never used as measured once the machine runs
fast, nor the reverse; a lab that cannot be priced is logged and left to price itself; SPECVIZ_WARM=0 starts
nothing."""
import gradio as gr
import pytest

from specviz.app import sweep_tab, tree_tab, warm
from specviz.labs import pilot_cache
from tests.helpers.app import forbid_model_work, handlers, tiny_store
from tests.helpers.clock import VirtualMachine
from tests.helpers.models import last, ui_models

pytestmark = pytest.mark.usefixtures("fresh_pilot_cache")


@pytest.mark.slow
def test_after_warming_a_default_forms_refusal_runs_no_pilot(monkeypatch):
    store = tiny_store(default_draft="tiny")
    assert warm.warm(store) == []
    kinds = {key[0] for key in pilot_cache._entries}
    assert {"sweep", "tree"} <= kinds
    forbid_model_work(monkeypatch)
    monkeypatch.setenv("SPECVIZ_MAX_REQUEST_S", "0.01")
    h = handlers(store)
    sweep_form = ("tiny-target", ["tiny"], "\n\n".join(sweep_tab.EXAMPLE_PROMPTS), sweep_tab.K_MIN, sweep_tab.K_MAX,
                  0.0, 0, 1.0, 256, 0)
    with pytest.raises(gr.Error, match="this sweep would take"):
        last(h.run_sweep(*sweep_form, True, sweep_tab.FIXED_K, sweep_tab.STOP))
    tree_form = ("tiny-target", "tiny", "\n\n".join(tree_tab.EXAMPLE_PROMPTS[: tree_tab.DEFAULT_PROMPTS]),
                 tree_tab.CHAINS, tree_tab.TREES, 0.0, 0, 1.0, tree_tab.DEFAULT_TOKENS, 3, 0)
    with pytest.raises(gr.Error, match="this tree lab"):
        last(h.run_tree_lab(*tree_form))


@pytest.mark.slow
@pytest.mark.parametrize("start, now", [(40.0, 1.0), (1.0, 40.0)])
def test_a_start_up_price_is_priced_at_the_passes_timed_now(monkeypatch, start, now):
    """On a virtual clock: warmed while every pass cost 40x (a busy machine, a nice-19 thread), the default sweep's
    estimate and its gate later price a baseline token at the pass it costs now; and the reverse."""
    monkeypatch.setenv("SPECVIZ_BASELINE", "same")
    monkeypatch.setenv("SPECVIZ_MAX_REQUEST_S", "100000")  # the price is checked here, not the budget
    machine = VirtualMachine(monkeypatch)
    target, draft, tok = ui_models()
    store = tiny_store((machine.costing(target, 0.02), machine.costing(draft, 0.002), tok), default_draft="tiny")
    machine.slow = start
    assert warm.warm(store) == []
    monkeypatch.setattr(sweep_tab.est, "_pilot", lambda *a: pytest.fail("a second pilot ran"))
    machine.slow = now
    form = ("tiny-target", ["tiny"], "\n\n".join(sweep_tab.EXAMPLE_PROMPTS), sweep_tab.K_MIN, sweep_tab.K_MAX, 0.0, 0,
            1.0, sweep_tab.DEFAULT_TOKENS, 0, True, sweep_tab.FIXED_K, sweep_tab.STOP)
    note = handlers(store).estimate(*form)
    assert f"{20 * now:.1f} ms per baseline token" in note, note


@pytest.mark.slow
def test_a_lab_that_cannot_be_priced_is_logged_not_raised(monkeypatch, caplog):
    store = tiny_store(default_draft="tiny")
    monkeypatch.setattr(tree_tab, "warm", lambda store: (_ for _ in ()).throw(ValueError("no such draft")))
    assert warm.warm(store) == ["tree lab: no such draft"]
    assert "could not price the tree lab" in caplog.text


@pytest.mark.slow
def test_specviz_warm_0_starts_nothing(monkeypatch):
    monkeypatch.setenv(warm.ENV, "0")
    assert warm.start(tiny_store()) is None
    monkeypatch.setenv(warm.ENV, "1")
    monkeypatch.setattr(warm, "warm", lambda store: None)
    thread = warm.start(tiny_store())
    thread.join(60)
    assert thread.name == "specviz-warm" and not thread.is_alive()


@pytest.mark.slow
def test_the_models_load_and_compile_before_the_priority_drops(monkeypatch):
    """A visitor's first request waits on the models and the C layers: they come first, at the server's priority,
    and only the pricing runs at the lowest."""
    order = []
    monkeypatch.setenv(warm.ENV, "1")
    monkeypatch.setattr(warm, "load", lambda store: order.append("load"))
    monkeypatch.setattr(warm.os, "setpriority", lambda *a: order.append(("nice", a[2])))
    monkeypatch.setattr(warm, "warm", lambda store: order.append("price"))
    warm.start(tiny_store()).join(60)
    assert order == ["load", ("nice", 19), "price"]
