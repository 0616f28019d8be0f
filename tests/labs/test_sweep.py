"""The k sweep: aggregates are ratios of sums, theory sits beside measurement."""
import pandas as pd
import pytest

from specviz import DecodeConfig, PromptLookupDrafter, best_k, summarize, sweep
from tests.helpers.models import perturbed, tiny_llama


def test_summarize_by_hand():
    runs = pd.DataFrame([
        dict(draft="", k=0, prompt=0, repeat=0, new_tokens=10, rounds=10, passes=8, drafted=0, accepted=0, beta_sum=0,
             beta_n=0, seconds=1.0, draft_s=0.0, target_s=0.8),
        dict(draft="d", k=2, prompt=0, repeat=0, new_tokens=10, rounds=5, passes=5, drafted=10, accepted=5,
             beta_sum=3.0, beta_n=6, seconds=0.5, draft_s=0.08, target_s=0.4),
    ])
    s = summarize(runs).iloc[0]
    assert s.acceptance_rate == pytest.approx(0.5) and s.alpha == pytest.approx(0.5) and s.tau == pytest.approx(2.0)
    assert s.speedup == pytest.approx((10 / 0.5) / (10 / 1.0))
    assert s.c == pytest.approx((0.08 / 10) / (0.8 / 8))  # draft step over a one-token target forward
    assert s.v == pytest.approx((0.4 / 5) / (0.8 / 8))  # a verify pass over a one-token target forward
    assert s.speedup_theory == pytest.approx(1.75 / (2 * 0.08 + 0.8))
    assert s.tau_theory == pytest.approx(1.75)  # (1 - 0.5^3) / (1 - 0.5)


@pytest.mark.slow
def test_sweep_on_tiny_models_counts_every_run(prompt):
    target = tiny_llama(seed=3, sharpen=30)
    drafts = {"itself": target, "perturbed": perturbed(target, 0.4), "lookup": PromptLookupDrafter()}
    runs = sweep(target, drafts, [prompt, prompt[:, :3]], ks=[1, 3], cfg=DecodeConfig(temperature=0, max_new_tokens=12),
                 progress=False)
    assert len(runs) == 2 * (1 + 3 * 2) and (runs.new_tokens == 12).all()
    s = summarize(runs)
    itself = s[s.draft == "itself"]
    assert (itself.acceptance_rate == 1.0).all() and itself.tau.tolist() == pytest.approx([2.0, 4.0])
    assert set(best_k(s).draft) == set(drafts)


def test_summarize_a_draft_that_never_drafted():
    """Prompt lookup on a prompt without repeats drafts nothing: its alpha is 0 (nothing verified), not a NaN that
    the theory columns would refuse."""
    runs = pd.DataFrame([
        dict(draft="", k=0, prompt=0, repeat=0, new_tokens=8, rounds=8, passes=7, drafted=0, accepted=0, beta_sum=0,
             beta_n=0, seconds=1.0, draft_s=0.0, target_s=0.7),
        dict(draft="lookup", k=3, prompt=0, repeat=0, new_tokens=8, rounds=8, passes=8, drafted=0, accepted=0,
             beta_sum=0.0, beta_n=0, seconds=1.0, draft_s=0.01, target_s=0.8),
    ])
    s = summarize(runs).iloc[0]
    assert s.alpha == 0.0 and s.tau_theory == pytest.approx(1.0) and s.speedup == pytest.approx(1.0)


def test_speedup_spread_pairs_each_run_with_its_own_baseline_by_hand():
    import pandas as pd

    from specviz.labs.sweep import speedup_spread

    base = pd.DataFrame(dict(prompt=[0, 1], repeat=[0, 0], new_tokens=[10, 10], seconds=[1.0, 2.0]))
    runs = pd.DataFrame(dict(draft=["a", "a", "b"], k=[2, 2, 2], prompt=[0, 1, 0], repeat=[0, 0, 0],
                             new_tokens=[10, 20, 10], seconds=[0.5, 2.0, 0.25]))
    out = speedup_spread(runs, base, ["draft", "k"], ["prompt", "repeat"]).set_index("draft")
    # a: prompt 0 at 20 tok/s against 10 (2.0x), prompt 1 at 10 tok/s against 5 (2.0x); b: 40 against 10 (4.0x)
    assert out.loc["a", "speedup_min"] == out.loc["a", "speedup_max"] == 2.0
    assert out.loc["b", "speedup_min"] == 4.0
