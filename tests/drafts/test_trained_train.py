"""scripts/train/train_eagle3.py: what it writes is the speculators layout the reader opens, and its training
lowers the KL on the tiny target of the fixtures."""
import importlib.util
from pathlib import Path

import pytest
import torch

from specviz import DecodeConfig, speculative_generate
from specviz.drafts.trained.check import check_trained_draft
from specviz.drafts.trained.eagle3 import Eagle3Model
from specviz.drafts.trained.expect import eagle3_spec
from specviz.drafts.trained.formats import Layout
from specviz.drafts.trained.load import load_trained, rotary_for
from tests.helpers.models import reference_greedy
from tests.helpers.trained import edited, fixture_target, refusal

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "train" / "train_eagle3.py"


def script():
    spec = importlib.util.spec_from_file_location("train_eagle3", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_a_trained_draft_is_saved_in_the_layout_the_reader_checks_and_runs(tmp_path):
    train, target = script(), fixture_target()
    torch.manual_seed(0)
    windows = torch.stack([torch.tensor(reference_greedy(target, torch.tensor([[i, i + 1]]), 24)) for i in range(6)])
    t2d, d2t = train.vocab_maps(windows, 64, 40)
    config = train.config_for(target, len(d2t))
    layout = Layout("eagle3", tmp_path, config, {}, {})
    spec = eagle3_spec(layout)
    weights = train.fresh_weights(layout, spec, target, t2d.nonzero().flatten(), 0)
    model = Eagle3Model(spec, weights | {"d2t": d2t}, target.get_input_embeddings().weight.detach(),
                        rotary_for(spec, "cpu"))
    opt, tapped, losses = torch.optim.AdamW(list(weights.values()), lr=3e-3), (2, 2, 1), []
    for step in range(40):
        loss = train.loss_on(windows[step % len(windows)], target, model, tapped, 2)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    assert sum(losses[-6:]) < 0.8 * sum(losses[:6])  # it learns
    train.save(tmp_path / "draft", config, weights, t2d, d2t, {})
    assert check_trained_draft(tmp_path / "draft", target).runs
    ids = torch.tensor([[5, 6]])
    trace = speculative_generate(target, load_trained(tmp_path / "draft"), ids,
                                 DecodeConfig(k=3, temperature=0, max_new_tokens=16))
    assert trace.new_tokens == reference_greedy(target, ids, 16)


def test_a_peagle_draft_is_checked_like_eagle3_and_not_run(tmp_path):
    folder = edited(tmp_path, config=lambda c: {**c, "speculators_model_type": "peagle", "mask_token_id": 0})
    target = fixture_target()
    checked = check_trained_draft(folder, target)
    assert checked.layout.kind == "peagle" and not checked.runs
    try:
        load_trained(folder, target)
    except ValueError as e:
        assert "does not run this kind of draft" in str(e)
    else:
        raise AssertionError("a P-EAGLE draft was run")
    bad = edited(tmp_path / "b", config=lambda c: {**c, "speculators_model_type": "peagle",
                                                   "eagle_aux_hidden_state_layer_ids": [1, 2, 5]})
    assert "tapped layer ids [5]" in refusal(bad)
