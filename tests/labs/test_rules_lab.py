"""The acceptance-rule lab on tiny models: one row per rule and temperature; lossless rules keep p at a fixed context
and lossy ones miss it by the closed form's amount; the closed-form acceptance tracks the decoder's; the engine
presets name replayable rules; bad settings are readable errors; the lesson's variants parse."""
import pandas as pd
import pytest
import torch

import specviz
from specviz import DecodeConfig
from specviz.labs import lessons
from specviz.labs.rule_presets import PRESETS, presets_frame
from specviz.labs.rules import COLUMNS, VARIANTS, rules_lab, variant_config
from specviz.views import rule_plots
from tests.helpers.models import perturbed, tiny_llama

TARGET = tiny_llama(vocab=32, seed=7, sharpen=10)
DRAFT = perturbed(TARGET, 0.6, seed=2)
PROMPTS = [torch.tensor([[1, 5, 9, 3]]), torch.tensor([[2, 4]])]


@pytest.fixture(scope="module")
def lab():
    cfg = DecodeConfig(k=3, max_new_tokens=24)
    return rules_lab(TARGET, DRAFT, PROMPTS, temperatures=[0, 1.0], cfg=cfg, draws=6000)


@pytest.mark.slow
def test_one_row_per_rule_and_temperature(lab):
    assert list(lab.columns) == COLUMNS and len(lab) == len(VARIANTS) * 2
    assert set(zip(lab.rule, lab.temperature)) == {(v, t) for v in VARIANTS for t in (0.0, 1.0)}
    assert specviz.rules_lab is rules_lab and "rules_lab" in specviz.__all__
    lossy = {"typical", "optimistic", "lenient"}
    assert all(row.lossless == (row.rule not in lossy) for row in lab.itertuples())
    assert lab.text.str.len().gt(0).all() and lab.target_text.nunique() == 2  # one target sample per temperature
    assert lab.c.nunique() == 1 and lab.v.nunique() == 1  # one cost for every rule: a round costs what it costs


@pytest.mark.slow
def test_fixed_context_check_passes_lossless_rules_and_fails_lossy_ones_by_their_tv(lab):
    sampled = lab[lab.temperature == 1.0]
    for row in sampled.itertuples():
        assert row.mc_p_vs_law > 1e-4  # the emitted tokens follow the rule's closed-form law
        if row.lossless:
            assert row.mc_p_vs_p > 1e-4 and row.mc_tv_closed < 1e-9 and row.tv_closed == 0.0
        else:
            assert abs(row.mc_tv - row.mc_tv_closed) < 0.04
            if row.mc_tv_closed > 0.05:
                assert row.mc_p_vs_p < 1e-4
    assert sampled.set_index("rule").loc["optimistic", "tv_closed"] > 0.05
    assert lab[lab.temperature == 0.0].mc_tv.isna().all()  # greedy: no law to sample


@pytest.mark.slow
def test_closed_form_acceptance_tracks_the_decoder(lab):
    greedy = lab[lab.temperature == 0.0].set_index("rule")
    exact = greedy.drop(index="optimistic")  # at T = 0 every other rule is the greedy match: identical runs
    assert exact.alpha.nunique() == 1 and (exact.alpha == exact.alpha_closed).all()
    assert greedy.loc["optimistic", "alpha"] == 1.0 == greedy.loc["optimistic", "acceptance"]
    sampled = lab[lab.temperature == 1.0]
    assert ((sampled.alpha - sampled.alpha_closed).abs() < 0.35).all()  # a few dozen positions per row
    levi = sampled.set_index("rule")
    assert levi.loc["leviathan", "alpha_closed"] >= levi.loc["point_mass", "alpha_closed"]  # min(p,q) >= q p


@pytest.mark.slow
def test_plots_are_figures(lab):
    for fig in (rule_plots.acceptance_vs_temperature(lab), rule_plots.tv_vs_temperature(lab),
                rule_plots.speedup_by_rule(lab)):
        assert fig.data
    assert all("lossy" not in t.name for t in rule_plots.acceptance_vs_temperature(lab).data if "Leviathan" in t.name)


def test_presets_name_rules_the_lab_replays():
    frame = presets_frame()
    assert isinstance(frame, pd.DataFrame) and len(frame) == len(PRESETS) >= 8
    for preset in PRESETS:
        variant_config(DecodeConfig(), preset.variant)  # a replayable variant
        assert preset.variant.partition("+")[0] in specviz.config.RULES and preset.source and preset.note
    assert {"vLLM (v1 gpu_model_runner)", "llama.cpp (common, server)", "MLX-LM", "Medusa"} <= set(frame.engine)


@pytest.mark.parametrize("variant", ["leviathan+greedy", "nope"])
def test_bad_variants_fail_before_any_run(variant):
    with pytest.raises(ValueError, match="rule"):
        rules_lab(TARGET, DRAFT, PROMPTS, temperatures=[1.0], variants=[variant])


def test_the_rule_lesson_reads_its_rules():
    lesson = next(les for les in lessons.load_lessons() if les.title.startswith("8."))
    values = [v for step in lesson.steps for v in step.action.get("values", []) if isinstance(v, str)]
    settings = [step.action["settings"].get("rule", "leviathan") for step in lesson.steps]
    for v in values + settings:
        variant_config(DecodeConfig(), v)
    assert all(step.answer["metric"] == "acceptance" for step in lesson.steps)  # host-independent
