"""Exit adapters: one trained decoder layer after the target's first L layers (specviz.drafts.early_exit)."""
import pytest
import torch

from specviz import DecodeConfig, speculative_generate
from specviz.drafts.early_exit import adapter_file, early_exit, exit_names, extra_parameters, load_exit, new_adapter, parse
from specviz.runtime.lm import CachedLM
from tests.helpers.models import reference_greedy, tiny_gpt2, tiny_llama


@pytest.mark.slow
@pytest.mark.parametrize("make", [tiny_llama, tiny_gpt2])
def test_an_untrained_adapter_is_the_next_layer_and_decoding_stays_exact(make):
    target = make(seed=3, layers=3, sharpen=30)
    ids = list(range(5, 17))
    adapted = early_exit(target, 1, new_adapter(target, 1))
    for path in ("dynamic", "lean"):  # the lean path runs the adapter like any layer of the stack
        got = CachedLM(adapted, path=path).feed(ids)
        want = CachedLM(early_exit(target, 2), path=path).feed(ids)
        torch.testing.assert_close(got, want)
    prompt = torch.tensor([ids])
    trace = speculative_generate(target, adapted, prompt, DecodeConfig(k=3, temperature=0, max_new_tokens=24))
    assert trace.new_tokens == reference_greedy(target, prompt, 24)
    adapter_params = sum(p.numel() for p in adapted.exit_adapter.parameters())
    assert extra_parameters(adapted) == adapter_params > 0 and extra_parameters(early_exit(target, 1)) == 0
    with pytest.raises(ValueError, match="exit of 1 to 2 layers"):
        new_adapter(target, 3)


@pytest.mark.slow
def test_a_saved_adapter_loads_by_name_and_changes_the_exit(tmp_path):
    from safetensors.torch import save_file

    target = tiny_llama(seed=3, layers=3, sharpen=30)
    (tmp_path / "config.json").write_text(target.config.to_json_string())
    assert exit_names(tmp_path, "t") == ["t@1"]
    adapter = new_adapter(target, 1)
    with torch.no_grad():
        for p in adapter.parameters():
            p.add_(0.05 * torch.randn_like(p))  # "trained": no longer layer 2
    save_file({k: v.to(torch.float16).contiguous() for k, v in adapter.state_dict().items()},
              str(adapter_file(tmp_path, 1)))
    assert exit_names(tmp_path, "t") == ["t@1", "t@1+adapter"]
    assert parse("t@1+adapter") == ("t", 1, True) and parse("t+adapter") is None
    loaded = load_exit(target, tmp_path, parse("t@1+adapter"))
    for (name, got), want in zip(loaded.exit_adapter.state_dict().items(), adapter.state_dict().values()):
        torch.testing.assert_close(got, want.to(torch.float16).to(got.dtype), msg=name)
    ids = list(range(5, 17))
    assert not torch.allclose(CachedLM(loaded).feed(ids), CachedLM(early_exit(target, 2)).feed(ids))
    prompt = torch.tensor([ids])
    trace = speculative_generate(target, loaded, prompt, DecodeConfig(k=3, temperature=0, max_new_tokens=20))
    assert trace.new_tokens == reference_greedy(target, prompt, 20)
    with pytest.raises(ValueError, match="no exit adapter for t@2"):
        load_exit(target, tmp_path, parse("t@2+adapter"))


def test_an_exit_on_the_lean_path_reuses_the_targets_laid_out_weights():
    """Zero extra memory is true on the lean path too: the exit's layers, embedding and head are the target's own
    re-laid-out tensors (the very objects); only an adapter's layer is laid out for the exit."""
    from specviz.runtime.lean_llama import lean_weights

    target = tiny_llama(seed=3, layers=3, sharpen=30)
    full = lean_weights(target)
    plain, adapted = lean_weights(early_exit(target, 2)), lean_weights(early_exit(target, 1, new_adapter(target, 1)))
    assert all(a is b for a, b in zip(plain.blocks, full.blocks)) and len(plain.blocks) == 2
    assert plain.head_t is full.head_t and plain.embed is full.embed
    assert adapted.blocks[0] is full.blocks[0] and adapted.blocks[1] is not full.blocks[1]
    torch.testing.assert_close(adapted.blocks[1].qkv_t, full.blocks[1].qkv_t)  # a copy of layer 2, laid out anew


@pytest.mark.slow
def test_the_app_builds_an_exit_on_the_target_it_holds():
    """No second copy of the target: the store's exit draft shares the very model the store serves."""
    from specviz import models
    from specviz.app.store import ModelStore

    name = next(d for d in models.list_drafters() if parse(d) and parse(d).base == models.DEFAULT_TARGET)
    store = ModelStore()
    model, _, draft = store.pair(models.DEFAULT_TARGET, name)
    assert draft.exit_of is model and store.cached() == [("target", models.DEFAULT_TARGET)]


def test_the_summary_says_what_kind_of_draft_ran():
    from specviz import Trace
    from specviz.records import DraftTokens
    from specviz.trace import Round
    from specviz.views.summary import draft_note

    cfg = DecodeConfig(k=1, temperature=0)
    assert "first 4 layers and one trained adapter layer" in draft_note(Trace([0], cfg, draft_name="target@4+adapter"))
    assert "first 2 layers," in draft_note(Trace([0], cfg, draft_name="target@2"))
    r = Round(index=0, k=1, drafted=(1,), q=(1.0,), p=(0.2,), accept_prob=(0.0,), u=(None,), beta=(0.0,), n_accepted=0,
              emitted=(2,), resampled=2, bonus=None, next_p=0.5, residual_top=(), draft_s=0.0, target_s=0.0, wall_s=0.0,
              draft_view=DraftTokens((7,), ("x",)))
    assert "its own tokenizer" in draft_note(Trace([0], cfg, draft_name="d", rounds=[r]))
    assert draft_note(Trace([0], cfg, draft_name="lite")) == ""


def test_an_adapter_stored_in_8_bits_loads_within_one_quantization_step(tmp_path):
    from safetensors.torch import save_file

    from specviz.runtime import int8

    target = tiny_llama(seed=3, layers=3, sharpen=30).float()
    (tmp_path / "config.json").write_text(target.config.to_json_string())
    adapter = new_adapter(target, 2)
    save_file(int8.pack(adapter.state_dict()), str(adapter_file(tmp_path, 2)))
    loaded = load_exit(target, tmp_path, parse("t@2+adapter")).exit_adapter
    for (name, w), w2 in zip(adapter.state_dict().items(), loaded.state_dict().values()):
        step = w.abs().amax(dim=-1, keepdim=True) / 127 if w.dim() == 2 else 1e-3 * w.abs().max()
        assert ((w - w2).abs() <= step * 0.5 + 1e-6).all(), name
