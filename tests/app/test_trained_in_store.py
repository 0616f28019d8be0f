"""A trained draft given to the app as a local model (SPECVIZ_EXTRA_MODELS) is offered as a draft, never as a
target, pairs with a target without a tokenizer of its own, runs exact, and is refused against a target it does
not fit, before any work."""
import pytest
import torch

from specviz import DecodeConfig, speculative_generate
from specviz.app.store import ModelStore
from tests.helpers.models import reference_greedy
from tests.helpers.trained import FIXTURES, fixture_target


@pytest.fixture
def store(monkeypatch, tmp_path):
    for name in ("tiny", "wide"):
        (tmp_path / name).mkdir()
    monkeypatch.setenv("SPECVIZ_EXTRA_MODELS",
                       f"tiny={tmp_path / 'tiny'},wide={tmp_path / 'wide'},my-eagle3={FIXTURES / 'eagle3'}")
    targets = {"tiny": fixture_target(), "wide": fixture_target(hidden_size=64)}
    return ModelStore(load_model=lambda name: (targets[name], None))


def test_a_trained_draft_is_a_draft_not_a_target(store):
    assert "my-eagle3" in store.list_drafters() and "my-eagle3" not in store.list_targets()
    assert "tiny" in store.list_targets()


@pytest.mark.slow
def test_it_pairs_without_a_tokenizer_and_runs_exact(store):
    model, _, drafter = store.pair("tiny", "my-eagle3")
    ids = torch.tensor([[1, 2, 3, 4, 5]])
    trace = speculative_generate(model, drafter, ids, DecodeConfig(k=3, temperature=0, max_new_tokens=16))
    assert trace.new_tokens == reference_greedy(model, ids, 16)


def test_a_target_it_does_not_fit_is_refused_before_any_work(store):
    model, _, drafter = store.pair("wide", "my-eagle3")
    calls = []
    model.register_forward_pre_hook(lambda *_: calls.append(1))
    with pytest.raises(ValueError, match="hidden"):
        speculative_generate(model, drafter, torch.tensor([[1, 2, 3]]), DecodeConfig(k=3, temperature=0))
    assert not calls  # the target never ran
