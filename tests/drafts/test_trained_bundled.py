"""The bundled EAGLE-3 draft (assets/models/target-eagle3, speculators layout) opens through the path a downloaded
one takes, passes the check against the bundled target, runs exact, and is offered as a draft of the target (never
as a target) in the app's store and in Compare drafts' list."""
import json

import pytest
import torch

import specviz
from specviz import models
from specviz.config import EXAMPLE_PROMPTS, HELDOUT_PROMPTS
from specviz.drafts.trained.check import check_trained_draft
from specviz.drafts.trained.formats import detect
from specviz.models import ASSETS

NAME = "target-eagle3"
FOLDER = ASSETS / NAME
pytestmark = pytest.mark.skipif(not (FOLDER / "model.safetensors").is_file(), reason="bundled EAGLE-3 draft not built")


def test_it_is_saved_in_the_speculators_layout_with_three_taps_and_a_pruned_vocabulary():
    config = json.loads((FOLDER / "config.json").read_text())
    layout = detect(FOLDER)
    assert layout is not None and layout.kind == "eagle3" and config["speculators_model_type"] == "eagle3"
    assert len(config["eagle_aux_hidden_state_layer_ids"]) == 3
    hidden = config["transformer_layer_config"]["hidden_size"]
    assert layout.tensors["layers.0.self_attn.q_proj.weight"][0][1] == 2 * hidden  # the 2H-input first layer
    assert config["draft_vocab_size"] < config["transformer_layer_config"]["vocab_size"]
    assert (FOLDER / "model.safetensors").stat().st_size < 8 * 2**20


def test_it_is_a_draft_of_the_target_not_a_model_or_a_target():
    assert NAME in specviz.list_drafters() and NAME not in specviz.list_models()
    from specviz.app.store import ModelStore

    store = ModelStore()
    assert NAME in store.list_drafters() and NAME not in store.list_targets()
    assert NAME in store.drafts_for(specviz.DEFAULT_TARGET)  # Compare drafts offers the store's drafts for it


@pytest.mark.slow
def test_it_passes_the_check_against_the_bundled_target_and_decodes_its_greedy_text_exactly():
    target, tok = specviz.load_model(specviz.DEFAULT_TARGET, dtype=torch.float64)
    assert check_trained_draft(FOLDER, target).runs
    draft = models.load_drafter(NAME)  # by name, as the app and a downloaded folder's path do
    rates = []
    for text in EXAMPLE_PROMPTS[:2] + HELDOUT_PROMPTS[:1]:
        ids = tok(text, return_tensors="pt").input_ids
        trace = specviz.speculative_generate(target, draft, ids, specviz.DecodeConfig(k=4, temperature=0,
                                                                                    max_new_tokens=40))
        ref = target.generate(ids, do_sample=False, max_new_tokens=40)[0, ids.shape[1]:].tolist()
        assert trace.new_tokens == ref
        rates.append(trace.summary().acceptance_rate)
    assert sum(rates) / len(rates) > 0.2  # trained on the target's own text (a random draft: ~1 / 1,024)


@pytest.mark.slow
def test_the_store_pairs_it_with_the_target_without_a_tokenizer_of_its_own():
    from specviz.app.store import ModelStore

    calls = []
    store = ModelStore(load_tokenizer=lambda name: calls.append(name) or models.load_tokenizer(name))
    model, tok, drafter = store.pair(specviz.DEFAULT_TARGET, NAME)
    ids = tok(EXAMPLE_PROMPTS[0], return_tensors="pt").input_ids
    trace = specviz.speculative_generate(model, drafter, ids, specviz.DecodeConfig(k=3, temperature=0.8, seed=1,
                                                                                 max_new_tokens=16))
    assert len(trace.new_tokens) == 16 and NAME not in calls
