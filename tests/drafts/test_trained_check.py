"""Trained drafts refused before any work (specviz.drafts.trained.check): every kind of fault in a checkpoint that
loads and runs silently elsewhere is named. Each case edits a copy of a fixture written by the real speculators
library (tests/drafts/fixtures/trained, scripts/fixtures/)."""

import pytest
import torch

from specviz.drafts.trained.check import check_trained_draft
from specviz.drafts.trained.formats import detect
from tests.helpers.trained import FIXTURES, edited, fixture_target, refusal


def test_the_fixtures_pass_and_say_what_they_read():
    target = fixture_target()
    plain = check_trained_draft(FIXTURES / "eagle3", target)
    assert plain.runs and plain.layout.kind == "eagle3"
    assert "norm_before_residual = False (set in config.json)" in plain.notes
    assert any("48 of the target's 64" in n for n in plain.notes)
    switched = check_trained_draft(FIXTURES / "eagle3_31", target)
    assert "fc_norm = True (set in config.json)" in switched.notes and "norm_output = True (set in config.json)" in switched.notes
    assert check_trained_draft(FIXTURES / "medusa", target).layout.kind == "medusa"


def test_a_renamed_tensor_is_named_as_unknown_and_its_original_as_missing(tmp_path):
    folder = edited(tmp_path, tensors=lambda t: {("layers.0.attn_norm.weight" if k == "layers.0.hidden_norm.weight"
                                                  else k): v for k, v in t.items()})
    message = refusal(folder)
    assert "tensor layers.0.hidden_norm.weight is missing" in message
    assert "tensor layers.0.attn_norm.weight [32] is not part of" in message


def test_a_missing_tensor_is_named(tmp_path):
    message = refusal(edited(tmp_path, tensors=lambda t: {k: v for k, v in t.items() if k != "fc.weight"}))
    assert "tensor fc.weight is missing (expected shape [32, 96])" in message
    assert "1 problem(s)" in message


def test_an_extra_tensor_is_named(tmp_path):
    message = refusal(edited(tmp_path, tensors=lambda t: {**t, "layers.0.self_attn.rotary.inv_freq": torch.ones(8)}))
    assert "tensor layers.0.self_attn.rotary.inv_freq [8] is not part of a EAGLE-3 (speculators format) draft" in message


def test_a_misshapen_tensor_is_named(tmp_path):
    message = refusal(edited(tmp_path, tensors=lambda t: {**t, "lm_head.weight": t["lm_head.weight"][:40]}))
    assert "tensor lm_head.weight has shape [40, 32], expected [48, 32]" in message


def test_a_tapped_layer_beyond_the_targets_depth_is_named(tmp_path):
    message = refusal(edited(tmp_path, config=lambda c: {**c, "eagle_aux_hidden_state_layer_ids": [1, 2, 4]}))
    assert "tapped layer ids [4] are outside the target's 4 layers (0..3)" in message


def test_a_wrong_hidden_size_is_named():
    message = refusal(FIXTURES / "eagle3", fixture_target(hidden_size=64, intermediate_size=128))
    assert "the draft reads target hidden states of size 32, the target's are 64" in message


def test_a_target_with_another_vocabulary_is_named():
    message = refusal(FIXTURES / "eagle3", fixture_target(vocab_size=80))
    assert "trained for a target vocabulary of 64, the target has 80" in message


def test_a_vocabulary_map_that_disagrees_with_its_mask_is_named(tmp_path):
    def shift(t):  # draft id 5 now maps one target id further: onto an id t2d does not mark
        d2t = t["d2t"].clone()
        d2t[5] += 1
        return {**t, "d2t": d2t}

    message = refusal(edited(tmp_path, tensors=shift))
    assert "d2t and t2d disagree: draft id 5 maps to target id 7" in message


def test_a_mask_marking_more_ids_than_the_draft_vocabulary_is_named(tmp_path):
    def widen(t):
        t2d = t["t2d"].clone()
        t2d[3] = True
        return {**t, "t2d": t2d}

    assert "t2d marks 49 target ids, but the draft vocabulary has 48" in refusal(edited(tmp_path, tensors=widen))


def test_every_problem_is_listed_at_once(tmp_path):
    folder = edited(tmp_path, tensors=lambda t: {k: v for k, v in t.items() if k != "norm.weight"},
                    config=lambda c: {**c, "eagle_aux_hidden_state_layer_ids": [1, 2, 9]})
    message = refusal(folder)
    assert "2 problem(s)" in message and "norm.weight is missing" in message and "[9]" in message


def test_an_absent_switch_states_both_engines_defaults(tmp_path):
    folder = edited(tmp_path, config=lambda c: {k: v for k, v in c.items() if k != "norm_before_residual"})
    notes = " ".join(check_trained_draft(folder, fixture_target()).notes)
    assert "specviz runs False, speculators' own default" in notes and "vLLM reads" in notes and "as True" in notes


def test_a_medusa_head_for_another_hidden_size_is_refused():
    message = refusal(FIXTURES / "medusa", fixture_target(hidden_size=64, intermediate_size=128))
    assert "tensor 0.0.linear.weight has shape [32, 32], expected [64, 64]" in message


@pytest.mark.slow
def test_formats_are_told_apart_from_their_headers(tmp_path):
    mid = edited(tmp_path, tensors=lambda t: {k.replace("layers.0.", "midlayer."): v for k, v in t.items()},
                 config=lambda c: {**c["transformer_layer_config"], "draft_vocab_size": 48,
                                   "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 2, 3]}})
    assert detect(mid).kind == "eagle3-midlayer"
    assert detect(FIXTURES / "medusa").kind == "medusa"
    fixture_target().save_pretrained(tmp_path / "plain")
    assert detect(tmp_path / "plain") is None  # a causal LM, no draft
    dflash = edited(tmp_path / "d", config=lambda c: {**c, "speculators_model_type": "dflash",
                                                      "aux_hidden_state_layer_ids": [1, 7]})
    assert detect(dflash).kind == "dflash"
    assert "tapped layer ids [7]" in refusal(dflash)
