"""The labs: streamed sweep and per-position acceptance, k policies, distillation lab, figures, handlers."""
import os
import time

import gradio as gr
import numpy as np
import pandas as pd
import pytest
import torch

from specviz import DecodeConfig, PromptLookupDrafter, distill_lab, iter_sweep, speculative_generate, summarize, sweep
from specviz.app.forms import split_prompts
from specviz.labs import estimate, policies
from specviz.labs import sweep as sweep_lab
from specviz.labs.distill_lab import CE, KL, fresh_draft
from specviz.views import lab_plots
from tests.helpers.app import handlers, tiny_store
from tests.helpers.models import last, perturbed, tiny_llama, ui_models

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
GREEDY = DecodeConfig(temperature=0, max_new_tokens=12)
TINY = dict(hidden=32, layers=1, heads=2, kv_heads=2, intermediate=64)


@pytest.fixture(scope="module")
def target():
    return tiny_llama(seed=3, sharpen=30)


@pytest.mark.slow
def test_iter_sweep_rows_equal_sweep(target, prompt):
    drafts = {"near": perturbed(target, 0.4), "lookup": PromptLookupDrafter()}
    streamed = pd.DataFrame([row for row, _ in iter_sweep(target, drafts, [prompt], [1, 3], GREEDY)])
    batch = sweep(target, drafts, [prompt], [1, 3], GREEDY, progress=False)
    cols = ["draft", "k", "prompt", "new_tokens", "rounds", "drafted", "accepted"]
    pd.testing.assert_frame_equal(streamed[cols], batch[cols])


@pytest.mark.slow
def test_per_position_draft_equal_target_accepts_everything(target, prompt):
    rows = []
    for row, trace in iter_sweep(target, {"itself": target}, [prompt], [1, 2, 4], GREEDY):
        if trace is not None:
            rows += sweep_lab.position_rows(trace, draft=row["draft"], k=row["k"], prompt=row["prompt"])
    pos = sweep_lab.per_position(pd.DataFrame(rows))
    assert (pos.rate == 1.0).all() and sorted(pos.position[pos.k == 4]) == [1, 2, 3, 4]
    # 12 tokens at k=4, everything accepted: rounds emit 5, 5 then the last 2 (k capped at 1)
    assert pos[pos.k == 4].set_index("position").drafted.tolist() == [3, 2, 2, 2]
    fig = lab_plots.position_heatmap(pos)
    assert fig.data[0].z.shape == (4, 3) and np.nanmax(fig.data[0].z) == 1.0
    both = lab_plots.position_heatmaps(pos)
    assert len(both.data) == 2 and np.nanmin(both.data[1].z) == 1.0  # reached drafts all accepted too


def test_position_rows_by_hand(target, prompt):
    trace = speculative_generate(target, PromptLookupDrafter(), prompt, DecodeConfig(temperature=0, k=3,
                                                                                          max_new_tokens=10))
    rows = sweep_lab.position_rows(trace, draft="x", k=3)
    for r in rows:  # counts straight from the rounds
        i = r["position"] - 1
        assert r["drafted"] == sum(len(x.drafted) > i for x in trace.rounds)
        assert r["accepted"] == sum(x.n_accepted > i for x in trace.rounds)
        assert r["reached"] == sum(len(x.drafted) > i and x.n_accepted >= i for x in trace.rounds)
    assert sum(r["accepted"] for r in rows) == sum(x.n_accepted for x in trace.rounds)
    pos = sweep_lab.per_position(pd.DataFrame(rows))
    assert (pos.conditional >= pos.rate).all()  # reached <= drafted: the conditional rate is never lower


@pytest.mark.slow
def test_policy_comparison(target, prompt):
    cfg = DecodeConfig(temperature=0, max_new_tokens=24, k=2, max_k=6)
    runs, rounds = policies.compare_policies(target, target, [prompt], cfg, fixed_ks=[2, 4], stops=[0.5])
    summary = policies.policy_summary(runs)
    stop = "stop < 0.5 (k ≤ 6)"
    assert list(summary.policy) == [sweep_lab.BASELINE, "fixed k=2", "fixed k=4", "history", "heuristic", stop]
    assert (summary.acceptance_rate.iloc[1:] == 1.0).all()  # draft == target
    ks = policies.round_ks(rounds)
    heuristic = ks[ks.policy == "heuristic"].k.tolist()
    assert heuristic[:3] == [2, 4, 6]  # +2 after every fully accepted round, capped at max_k
    assert set(ks[ks.policy == "fixed k=4"].k) <= {1, 2, 3, 4}  # 4, capped only by the tokens left
    fig = lab_plots.k_per_round(ks)
    assert [t.name for t in fig.data] == ["fixed k=2", "fixed k=4", "history", "heuristic", stop]
    stopped = ks[ks.policy == stop]  # drafts up to max_k = 6; the chart shows what each round really drafted
    assert list(fig.data[-1].y) == stopped.drafted.tolist() and list(fig.data[-1].customdata) == stopped.k.tolist()
    assert stopped.k.iloc[0] == 6 and (stopped.drafted <= stopped.k).all()
    bars = lab_plots.policy_bars(summary)
    assert list(bars.data[1].y[1:]) == [1.0] * 5


@pytest.mark.slow
def test_sweep_figures_hold_the_summary(target, prompt):
    runs = sweep(target, {"near": perturbed(target, 0.4)}, [prompt], [1, 2, 3], DecodeConfig(max_new_tokens=12),
                 progress=False)
    s = summarize(runs)
    speed = lab_plots.speedup_vs_k(s)
    names = [t.name for t in speed.data]
    assert names == ["near measured", "near theory", "near best k measured", "near best k predicted"]
    assert list(speed.data[0].y) == list(s.speedup) and list(speed.data[1].y) == list(s.speedup_theory)
    assert speed.data[2].x[0] == s.k[s.speedup.idxmax()] and speed.data[3].x[0] == s.k[s.speedup_theory.idxmax()]
    assert list(lab_plots.tau_vs_k(s).data[1].y) == list(s.tau_theory)


def test_estimate_scales_with_runs(target, prompt):
    costs = estimate.measure_costs(target, {"itself": target}, prompt, [1, 4], GREEDY)
    assert costs.token_s > 0 and costs.alpha["itself"] == 1.0  # draft == target: always accepted
    one = estimate.estimate_seconds(costs, 1, [1, 2], 64)
    assert estimate.estimate_seconds(costs, 2, [1, 2], 64) == pytest.approx(2 * one)
    assert one == pytest.approx(estimate.estimate_seconds(costs, 1, [1, 2], 64, 1.0))
    assert one < estimate.estimate_seconds(costs, 1, [1, 2], 64, 0.0)
    lo, hi = costs.round_s["itself"]
    assert costs.round("itself", 1) == pytest.approx(lo) and costs.round("itself", 4) == pytest.approx(hi)


@pytest.mark.slow
def test_distill_lab_trains_both_losses_the_same_steps_and_checkpoints_them_at_the_same_steps():
    target = tiny_llama(vocab=64, seed=5, sharpen=10)
    data = torch.randint(0, 64, (40, 16), generator=torch.Generator().manual_seed(0))
    prompts = [torch.tensor([[1, 2, 3]]), torch.tensor([[7, 8]])]
    lab = distill_lab(target, data, prompts, steps=12, eval_every=5, seq_len=16, batch_size=4, lr=3e-3,
                      heldout_windows=4)
    pts = lab.points
    assert set(lab.drafts) == {KL, CE}
    for method in (KL, CE):
        evals = pts[(pts.method == method) & pts.heldout_kl.notna()]
        steps = pts[(pts.method == method) & pts.loss.notna()]
        assert list(steps.step) == list(range(1, 13))  # every step of both, none more
        assert list(evals.step) == [0, 5, 10, 12] and evals.acceptance.between(0, 1).all()
    kl = pts[(pts.method == KL) & pts.heldout_kl.notna()].heldout_kl
    assert kl.iloc[-1] < 0.9 * kl.iloc[0]  # 0.63 -> 0.54 with these seeds
    evals = pts[pts.heldout_kl.notna()]
    assert evals.alpha.between(0, 1).all()  # mean sum min(p, q) over the held-out positions
    # identical starts: the first checkpoint of both methods is the same model
    first = pts[pts.heldout_kl.notna()].groupby("method").heldout_kl.first()
    assert first[KL] == pytest.approx(first[CE])
    fig = lab_plots.checkpoints_chart(pts)
    assert {t.name for t in fig.data} == {f"{m}: {w}" for m in (KL, CE) for w in ("acceptance α", "held-out KL")}
    assert all(list(t.x) == [0, 5, 10, 12] for t in fig.data)  # against the step: the methods line up


def test_distill_lab_stops_every_method_at_the_same_step_when_its_time_is_spent(monkeypatch):
    """On a virtual clock: a checkpoint costs 1 s, a KL step 3 s and a CE step 1 s; with 20 s the lab stops both at
    the step where one more round and the last checkpoints would not fit, and checkpoints both there."""
    import types

    from specviz.labs import distill_lab as lab_module
    from tests.helpers.clock import VirtualClock

    clock = VirtualClock()
    monkeypatch.setattr(time, "perf_counter", clock)

    def fake_loop(target, draft, train, loss_fn=None, **opts):
        for step in range(opts["steps"]):
            clock.spend(1.0 if loss_fn else 3.0)
            yield step, 1.0 / (step + 1)

    def fake_checkpoint(target, draft, prompts, heldout, **options):
        clock.spend(1.0)
        return dict(heldout_kl=1.0, acceptance=0.5, alpha=0.5)

    class Target:  # the held-out logits the lab computes once, free
        def eval(self):
            return self

        def __call__(self, input_ids):
            return types.SimpleNamespace(logits=None)

    monkeypatch.setattr(lab_module, "iter_distill", fake_loop)
    monkeypatch.setattr(lab_module, "checkpoint", fake_checkpoint)
    drafts = {KL: object(), CE: object()}
    points = list(lab_module.iter_distill_lab(Target(), drafts, torch.zeros(10, 8, dtype=torch.long), [], steps=50,
                                              eval_every=100, seconds=20.0))
    last = {m: max(p["step"] for p in points if p["method"] == m) for m in drafts}
    evals = [(p["method"], p["step"]) for p in points if "heldout_kl" in p]
    # 2 s of first checkpoints, then rounds of 4 s while elapsed + 4 + 2 < 20: three rounds (2 + 12 = 14), then 2 s
    assert last == {KL: 3, CE: 3} and evals == [(KL, 0), (CE, 0), (KL, 3), (CE, 3)]
    assert clock.spent == 16.0  # the virtual seconds it cost: inside the 20 s


def test_fresh_draft_matches_target_vocab(target):
    draft = fresh_draft(target, TINY)
    assert draft.get_output_embeddings().weight.shape[0] == 64 and draft.config.tie_word_embeddings


# -- handlers --------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def store():
    return tiny_store(ui_models(), default_draft="tiny")



@pytest.mark.slow
def test_sweep_handler_streams_and_writes_csv(store):
    h = handlers(store)
    outs = list(h.run_sweep("tiny-target", ["tiny"], "ROMEO:\n\nTo be, or not", 1, 2, 0.0, 0, 1.0, 8, 0, True, 2))
    assert outs[0][0].startswith("**Estimated")
    final = outs[-1]
    assert len(final) == 10 and [os.path.basename(f) for f in final[-1]][:3] == ["sweep_runs.csv", "sweep_summary.csv",
                                                                                  "per_position.csv"]
    assert len(pd.read_csv(final[-1][0])) == 2 * (1 + 2)
    tables = [o[1] for o in outs if isinstance(o[1], pd.DataFrame)]
    assert list(tables[-1].k) == [1, 2]
    policies = final.policy_table  # fixed k, the two adaptive policies and transformers' confidence stop (0.4)
    assert list(policies.policy)[1:] == ["fixed k=2", "history", "heuristic", "stop < 0.4 (k ≤ 10)"]
    drawn = next(o for o in reversed(outs) if isinstance(o.table, pd.DataFrame))  # the last rows drawn, by name
    assert drawn.heatmaps is not None and final.policy_ks is not None and final.policy_bars is not None


@pytest.mark.slow
@pytest.mark.parametrize("compare", [False, True])
def test_the_sweep_estimate_counts_every_run_it_makes(store, compare):
    """The estimate names the runs Run sweep will make, the policy comparison included when it is on: the same
    count as the rows of the CSVs the sweep writes (the baseline and every (draft, k), then every policy)."""
    import re

    h = handlers(store)
    form = ("tiny-target", ["tiny", "prompt-lookup"], "ROMEO:\n\nTo be, or not", 1, 3, 0.0, 0, 1.0, 6, 0)
    note = h.estimate(*form, compare, 2, 0.4)
    stated = int(re.search(r"for (\d+) runs", note).group(1))
    files = last(h.run_sweep(*form, compare, 2, 0.4))[-1]
    made = sum(len(pd.read_csv(f)) for f in files if os.path.basename(f) in ("sweep_runs.csv", "policy_runs.csv"))
    assert stated == made == 2 * (1 + 2 * 3) + (2 * (1 + 4) if compare else 0)
    assert ("policy comparison included" in note) == compare


@pytest.mark.slow
def test_lossless_handler_streams_batches(store):
    h = handlers(store)
    outs = list(h.run_lossless("tiny-target", "tiny", "ROMEO:", 2, 0.7, 0, 1.0, 0, 2000, 500))
    assert len(outs) == 4 and list(outs[-1][1].draws) == [2000] * 3
    assert "WRONG" in outs[-1][3].layout.title.text and "WRONG" in outs[-1][4].layout.title.text
    assert "cannot happen" not in outs[-1][0] and "is the correct step here" not in outs[-1][0]


@pytest.mark.slow
@pytest.mark.parametrize("draft, temperature, top_p, says", [
    ("tiny", 1.0, 1.0, "At temperature 1 with top-k and top-p off, processing leaves the draft's q as it is"),
    ("tiny", 1.0, 0.9, None),  # top-p processes q: the mistake shows
    ("prompt-lookup", 0.7, 1.0, "has no logits of its own"),
])
def test_lossless_says_where_the_unprocessed_q_mistake_cannot_happen(store, draft, temperature, top_p, says):
    """The 'unprocessed q' variant is only called WRONG where it can differ from the correct step; elsewhere
    the status says precisely why not (a model draft at T = 1 unfiltered; a draft without logits)."""
    prompt = "To be, or not to be, to be" if draft == "prompt-lookup" else "ROMEO:"
    status, _, _, _, raw_chart, _ = last(handlers(store).run_lossless("tiny-target", draft, prompt, 0, temperature, 0,
                                                                      top_p, 0, 500, 500))
    if says is None:
        assert "WRONG" in raw_chart.layout.title.text and "cannot happen" not in status
    else:
        assert says in status and "WRONG" not in raw_chart.layout.title.text


@pytest.mark.slow
def test_distill_handler_keeps_drafts_in_state(store):
    h = handlers(store)
    final = last(h.run_distill("tiny-target", "tiny", 2, False, 100, {}))  # checkpoints: start, end
    mine = final[3]
    assert len(mine) == 1 and final[4].endswith(".zip") and list(mine) == ["lab: KL 2 steps #1"]
    assert "**What this run shows**, 2 optimiser steps per method" in final[0]
    html, summary = h.try_draft("ROMEO:", "tiny-target", next(iter(mine)), mine, 0.0)
    assert "sv-tok" in html and "acceptance rate" in summary
    for _ in range(2):  # repeated Train clicks (KL and CE each time) keep at most 4 drafts, without gradients
        final = last(h.run_distill("tiny-target", "tiny", 2, True, 100, mine))
        mine = final[3]
    assert len(mine) == 4 and list(mine)[-1].endswith("#5") and "were dropped" in final[0]
    assert all(not p.requires_grad and p.grad is None for d in mine.values() for p in d.model.parameters())


@pytest.mark.parametrize("call, message", [
    (lambda h: last(h.run_sweep("tiny-target", [], "ROMEO:", 1, 2, 0.0, 0, 1.0, 8, 0, False, 2)), "at least one draft"),
    (lambda h: last(h.run_sweep("tiny-target", ["tiny"], "ROMEO:", 3, 2, 0.0, 0, 1.0, 8, 0, False, 2)), "smallest k"),
    (lambda h: last(h.run_sweep("tiny-target", ["tiny"], "  \n\n ", 1, 2, 0.0, 0, 1.0, 8, 0, False, 2)), "at least one prompt"),
    (lambda h: last(h.run_lossless("tiny-target", "tiny", "ROMEO:", 0, 0.0, 0, 1.0, 0, 1000, 100)), "needs sampling"),
    (lambda h: last(h.run_lossless("tiny-target", "tiny", "ROMEO:", 0, 1.0, 0, 1.0, 0, 5, 100)), "draws must lie"),
    (lambda h: last(h.run_lossless("tiny-target", "prompt-lookup", "ROMEO:", 0, 1.0, 0, 1.0, 0, 1000, 100)), "proposes nothing"),
    (lambda h: last(h.run_distill("tiny-target", "prompt-lookup", 5, False, 1, {})), "model-free"),
    (lambda h: h.try_draft("ROMEO:", "tiny-target", None, {}, 0.0), "train a draft first"),
])
def test_bad_input_raises_readable_gr_error(store, call, message):
    with pytest.raises(gr.Error, match=message):
        call(handlers(store))


@pytest.mark.slow
def test_lab_tabs_are_in_the_app(store):
    from specviz.app import build_demo

    labels = {c.get("props", {}).get("label") for c in build_demo(store).config["components"]}
    assert {"k sweep lab", "Losslessness lab", "Distillation lab"} <= labels


def test_split_prompts_keeps_single_newlines():
    assert split_prompts("KING HENRY:\nOnce more\n\nROMEO:\n") == ["KING HENRY:\nOnce more", "ROMEO:"]


@pytest.mark.slow
def test_temperature_lab_alpha_by_hand_and_through_the_tab(store):
    """alpha_fixed is sum min(p, q) of the processed distributions, computed here by hand; greedy it is the
    share of agreeing argmaxes; the tab's handler returns one row per temperature."""
    from specviz.labs.temperature import overlap
    from specviz.sampling import logits_to_probs

    g = torch.Generator().manual_seed(0)
    p_logits, q_logits = torch.randn(6, 32, generator=g), torch.randn(6, 32, generator=g)
    cfg = DecodeConfig(temperature=0.7, top_k=5)
    want = torch.minimum(logits_to_probs(p_logits, 0.7, 5), logits_to_probs(q_logits, 0.7, 5)).sum(-1).mean()
    assert overlap((p_logits, q_logits), cfg) == pytest.approx(float(want))
    agree = (p_logits.argmax(-1) == q_logits.argmax(-1)).double().mean()
    assert overlap((p_logits, q_logits), DecodeConfig(temperature=0)) == pytest.approx(float(agree))
    status, table, fig = last(handlers(store).run_temperature_lab("tiny-target", "tiny", "ROMEO:", "0, 1, 2", 3, 12, 0))
    assert list(table.temperature) == [0.0, 1.0, 2.0] and table["α (fixed contexts)"].notna().all() and "Why:" in status
    assert table.acceptance.between(0, 1).all() and len(fig.data) == 3
    assert not [c for c in table.columns if "_" in c or c.isdigit()]  # headed in words, no index leaking


@pytest.mark.slow
@pytest.mark.parametrize("max_new", [6, 24])
def test_the_sweeps_stated_range_holds_its_measured_duration(monkeypatch, max_new):
    """Run sweep states its estimate and range before it starts, from a pilot on the machine as loaded; the
    sweep's own measured duration falls inside that range. On a virtual clock (a target pass costs 20 ms, a draft
    pass 2 ms, exactly): a loaded host moves neither the pilot nor the sweep, so only the estimate's model is
    checked."""
    import re

    from tests.helpers.clock import VirtualMachine

    monkeypatch.setenv("SPECVIZ_BASELINE", "same")  # the baseline on the costed forward
    machine = VirtualMachine(monkeypatch)
    target, draft, tok = ui_models()
    h = handlers(tiny_store((machine.costing(target, 0.02), machine.costing(draft, 0.002), tok)))
    # a draft model only: prompt lookup's rounds cost exactly nothing here, where its chart finds no best k to mark
    form = ("tiny-target", ["tiny"], "ROMEO:\n\nTo be, or not", 1, 4, 0.0, 0, 1.0, max_new, 0)
    note = last(h.run_sweep(*form, False, 2, 0.4))[0]
    low, high = (float(x) for x in re.search(r"\(([\d.]+)–([\d.]+) s\)", note).groups())
    took = float(re.search(r"runs in ([\d.]+) s", note).group(1))
    assert 0 < low <= took <= high, note


def test_a_refusal_says_what_to_reduce_and_to_what():
    from specviz.app.sweep_tab import refusal
    from specviz.labs.estimate import Estimate

    def pricing(n, ks, prompts):  # 10 ms per token, k value and prompt
        s = n * len(ks) * prompts * 0.01
        return Estimate(s, s, s)

    assert refusal(pricing, 64, list(range(1, 9)), 2, 1.0) == "reduce new tokens to 6"
    assert refusal(pricing, 8, list(range(1, 9)), 2, 1.0) == ("reduce new tokens to 6, or the largest k to 6, or "
                                                              "the prompts to 1")
    assert refusal(pricing, 8, [1, 2], 8, 1.0, compare=True) == ("reduce new tokens to 6, or the largest k to 1, or "
                                                                "the prompts to 6, or turn off the policy comparison")
    assert refusal(pricing, 512, [1, 2], 8, 0.01) == "reduce the drafts, k values, prompts and new tokens together"
