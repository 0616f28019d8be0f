"""The tree lab's estimate: one cost model (a pilot's baseline token and the costliest setting's ratio to it) for
the stated duration, its range, the budget's refusal and what the refusal tells the user to reduce."""
import gradio as gr
import pytest

from specviz.app import tree_tab
from specviz.config import DecodeConfig, TreeConfig
from specviz.labs import estimate as est


def test_tree_estimate_by_hand():
    costs = est.TreeCosts(token_s=0.1, ratio=2.0, run_s=0.5, spread=1.5)
    # warm-up: 4 tokens of the baseline and 2 settings (at 2x) + 3 set-ups; then per prompt 10 tokens the same way
    warm = 4 * 0.1 * (1 + 2 * 2.0) + 3 * 0.5
    assert est.tree_estimate(costs, 2, 3, 10).likely == pytest.approx(warm + 3 * (10 * 0.1 * 5 + 1.5))
    fast, slow = est.tree_estimate(costs, 2, 3, 10).low, est.tree_estimate(costs, 2, 3, 10).high
    assert fast == pytest.approx(4 * 0.1 * 3 + 1.5 + 3 * (10 * 0.1 * 3 + 1.5))  # the settings as fast as the baseline
    assert slow == pytest.approx(warm + 3 * (10 * 0.1 * 5 * 1.5 + 1.5))  # the pilot's slow rounds
    assert est.tree_estimate(costs, 2, 3, 10, repeats=2).likely > est.tree_estimate(costs, 2, 3, 10).likely


def test_the_costliest_setting_is_the_one_with_the_most_rows():
    cfg = DecodeConfig(k=4)
    configs = [cfg, DecodeConfig(k=11), DecodeConfig(tree=TreeConfig(shape=(3, 2, 2, 1))),
               DecodeConfig(tree=TreeConfig.parse("chain:11,3"))]
    assert est.most_rows(configs).tree == TreeConfig(shape=(3, 2, 2, 1))  # 33 nodes


def test_a_refusal_names_the_setting_to_reduce_and_a_value_that_fits():
    def pricing(n, prompts, reps):  # 1 s a token a prompt a repeat
        return est.Estimate(n * prompts * reps, n * prompts * reps, n * prompts * reps)

    text = tree_tab.refusal(pricing, 64, 3, 2, 100.0)
    assert text == "reduce new tokens per run to 16"  # 64 x 3 x 1 or 64 x 1 x 2 never fit 100 s: only tokens do
    assert tree_tab.refusal(pricing, 30, 3, 2, 100.0) == "reduce repeats to 1, or the prompts to 1, or new tokens per run to 16"
    assert "together" in tree_tab.refusal(pricing, 64, 3, 2, 0.5)  # not even one token fits


def test_the_tree_lab_is_refused_before_any_run_from_its_estimate(store, monkeypatch):
    """Over the budget, the lab is refused after its pilot and before any of its runs, with the estimate's range and
    the value of new tokens that fits, priced by the same cost model."""
    from tests.helpers.app import handlers
    from tests.helpers.models import last

    monkeypatch.setattr(est, "measure_tree_costs", lambda *a, **k: est.TreeCosts(token_s=0.1, ratio=1.0, run_s=0.0))
    monkeypatch.setattr(tree_tab, "tree_lab", lambda *a, **k: pytest.fail("the lab ran"))
    monkeypatch.setenv("SPECVIZ_MAX_REQUEST_S", "20")
    form = ("tiny-target", "tiny", "ROMEO:\n\nTo be", tree_tab.CHAINS, tree_tab.TREES, 0.0, 0, 1.0, 48, 1, 0)
    # 2 prompts x 48 tokens x 0.1 s x (the baseline + 5 settings) + the warm-up (4 tokens each): 60 s; 14 tokens:
    # 2.4 + 2 x 14 x 0.6 = 19.2 s fits 20 s, 15 tokens do not
    with pytest.raises(gr.Error, match=r"this tree lab \(12 runs\) would take about 60 s; .*its estimate ≈ 60 s "
                                       r"\(60–60 s\); reduce new tokens per run to 14"):
        last(handlers(store).run_tree_lab(*form))


def test_the_default_tree_lab_fits_the_default_budget_on_a_busy_machine():
    """At 80 ms a baseline token (the bundled target on 2 shared, loaded cores) and the costliest setting at twice a
    baseline token's time, the tab's defaults fit SPECVIZ_MAX_REQUEST_S's default."""
    from specviz.app.budget import DEFAULT_S

    chains, trees = tree_tab.lab_setup(tree_tab.CHAINS, tree_tab.TREES)
    costs = est.TreeCosts(token_s=0.08, ratio=2.0, run_s=0.05)
    assert est.tree_estimate(costs, len(chains) + len(trees), tree_tab.DEFAULT_PROMPTS, tree_tab.DEFAULT_TOKENS).likely \
        < DEFAULT_S


def test_a_pilot_on_tiny_models_measures_a_token_and_a_ratio(pair):
    target, draft, tok = pair
    ids = tok("ROMEO:", return_tensors="pt").input_ids
    configs = [DecodeConfig(k=3, temperature=0.0), DecodeConfig(temperature=0.0, tree=TreeConfig(shape=(2, 1)))]
    costs = est.measure_tree_costs(target, draft, ids, configs)
    assert costs.token_s > 0 and costs.ratio > 0 and costs.run_s >= 0 and costs.spread >= 1


def test_the_default_length_shortens_itself_to_fit_the_budget_and_says_so(store, monkeypatch):
    """At 0.1 s a baseline token the default 32 tokens of 2 prompts and 5 settings take about 41 s: over a 30 s budget
    the lab runs the longest length that fits (23 tokens: 2.4 + 2 x 23 x 0.6 = 30 s) and says so; a length typed in
    is refused instead."""
    from tests.helpers.app import handlers

    monkeypatch.setattr(est, "measure_tree_costs", lambda *a, **k: est.TreeCosts(token_s=0.1, ratio=1.0, run_s=0.0))
    ran = {}

    def lab(model, drafter, prompts, chains, trees, cfg, repeats, check=None):
        ran["tokens"] = cfg.max_new_tokens
        raise KeyboardInterrupt  # the lab's own work is not what is tested

    monkeypatch.setattr(tree_tab, "tree_lab", lab)
    monkeypatch.setenv("SPECVIZ_MAX_REQUEST_S", "30")
    form = ["tiny-target", "tiny", "ROMEO:\n\nTo be", tree_tab.CHAINS, tree_tab.TREES, 0.0, 0, 1.0,
            tree_tab.DEFAULT_TOKENS, 1, 0]
    stream = handlers(store).run_tree_lab(*form)
    assert "would not fit this server's 30 s on this machine as loaded now: 23 a run" in next(stream)[0]
    with pytest.raises(KeyboardInterrupt):
        next(stream)
    assert ran["tokens"] == 23
    form[8] = tree_tab.DEFAULT_TOKENS + 1
    with pytest.raises(gr.Error, match="reduce the prompts to 1, or new tokens per run to 23"):
        next(handlers(store).run_tree_lab(*form))
