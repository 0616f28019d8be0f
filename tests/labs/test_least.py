"""The floor a lab's budget gate checks first: a request that even its target passes alone would overrun is refused
at once on its first asking (after one timing of a few target passes, before any pilot or speculative work), saying
what to reduce and the most it could be; and the floor is a floor: a real sweep and a real tree lab take longer
than it."""
import time

import gradio as gr
import pytest

from specviz.app import tree_tab
from specviz.config import DecodeConfig, TreeConfig
from specviz.labs import least
from specviz.labs.sweep import sweep
from specviz.labs.trees import tree_lab
from tests.helpers.app import count_pass_timings, forbid_model_work, handlers, tiny_store
from tests.helpers.models import last

pytestmark = pytest.mark.usefixtures("fresh_pilot_cache")


def test_a_first_sweep_far_over_the_budget_is_refused_at_once_with_the_most_each_setting_could_be(monkeypatch):
    h = handlers(tiny_store())
    monkeypatch.setenv("SPECVIZ_MAX_REQUEST_S", "0.05")
    forbid_model_work(monkeypatch)
    form = ("tiny-target", ["tiny", "prompt-lookup"], "ROMEO:\n\nTo be\n\nJULIET:", 1, 8, 0.0, 0, 1.0, 256, 0)
    timings = count_pass_timings(monkeypatch, pass_s=1e-4)  # 256 tokens over the budget, a few tokens within it
    with pytest.raises(gr.Error, match=r"this sweep would take at least [\d.]+ s .*reduce new tokens to at most \d+"):
        last(h.run_sweep(*form, True, 2, 0.4))
    assert len(timings) == 1


def test_a_first_tree_lab_far_over_the_budget_is_refused_at_once(monkeypatch):
    h = handlers(tiny_store())
    monkeypatch.setenv("SPECVIZ_MAX_REQUEST_S", "0.05")
    forbid_model_work(monkeypatch)
    form = ("tiny-target", "tiny", "ROMEO:\n\nTo be", tree_tab.CHAINS, tree_tab.TREES, 0.0, 0, 1.0, 256, 3, 0)
    timings = count_pass_timings(monkeypatch, pass_s=1e-4)
    with pytest.raises(gr.Error, match=r"this tree lab \(\d+ runs\) would take at least [\d.]+ s .*reduce .*to at most \d+"):
        last(h.run_tree_lab(*form))
    assert len(timings) == 1


def test_a_round_commits_at_most_its_deepest_chain_and_the_bonus():
    assert least.most_tokens(DecodeConfig(k=4)) == 5
    assert least.most_tokens(DecodeConfig(k=4, k_policy="history", max_k=9)) == 10
    assert least.most_tokens(DecodeConfig(k=4, tree=TreeConfig(shape=(3, 2, 1)))) == 4
    assert least.most_tokens(DecodeConfig(k=4, tree=TreeConfig.parse("dynamic:10,8,3"))) == 9
    # hand-computed: 2 prompts of 12 tokens, the baseline and one draft at k = 1 and 3: 24 * (1 + 1/2 + 1/4) passes
    assert least.sweep_floor(0.5, 12, 2, 1, [1, 3]) == pytest.approx(0.5 * 24 * 1.75)


@pytest.mark.slow
def test_the_floor_is_below_what_a_real_sweep_and_tree_lab_take(pair):
    target, draft, tok = pair
    prompts = [tok(p, return_tensors="pt").input_ids for p in ("ROMEO:\n\nTo be", "JULIET:\n\nO")]
    cfg = DecodeConfig(temperature=0.0, max_new_tokens=24)
    pass_s = least.pass_seconds(target, prompts[0], cfg)
    start = time.perf_counter()
    sweep(target, {"d": draft}, prompts, [1, 4], cfg, progress=False)
    took = time.perf_counter() - start
    assert 0 < least.sweep_floor(pass_s, 24, 2, 1, [1, 4]) < took
    configs = [DecodeConfig(k=4, temperature=0.0, max_new_tokens=24),
               DecodeConfig(k=4, temperature=0.0, max_new_tokens=24, tree=TreeConfig(shape=(2, 2, 1)))]
    start = time.perf_counter()
    tree_lab(target, draft, prompts, [4], [TreeConfig(shape=(2, 2, 1))], cfg, 1)
    assert least.configs_floor(pass_s, 24, 2, configs) < time.perf_counter() - start
