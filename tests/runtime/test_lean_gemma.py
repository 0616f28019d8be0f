"""The lean Gemma-3 forward against transformers' on tiny random models (no download): the logits of a prefill, of
one token at a time past the sliding window, and of a verify pass after a rollback; greedy speculative output equal
to the model's own greedy output on the lean path."""
import pytest
import torch

from specviz import DecodeConfig, PromptLookupDrafter, autoregressive_generate, speculative_generate
from specviz.runtime import lean_gemma
from specviz.runtime.lm import CachedLM
from tests.helpers.models import tiny_gemma


def reference_logits(model, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0]


@pytest.mark.parametrize("kv_heads", [1, 2])
def test_lean_logits_match_transformers_past_the_window(kv_heads):
    model = tiny_gemma(kv_heads=kv_heads)
    assert lean_gemma.supports(model)
    ids = torch.randint(0, 96, (20,), generator=torch.Generator().manual_seed(1)).tolist()
    want = reference_logits(model, ids)
    lean = lean_gemma.LeanGemma3(model)
    got = lean.forward(torch.tensor(ids[:9]))  # a prefill past the window of 6
    for i in range(9, 14):  # one token at a time
        got = torch.cat([got, lean.forward(torch.tensor([ids[i]]))])
    lean.crop(12)  # a rollback, then a verify pass of several rows
    got = torch.cat([got[:12], lean.forward(torch.tensor(ids[12:20]))])
    torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-4)


@pytest.mark.slow
def test_cached_lm_takes_the_lean_path_and_greedy_speculation_is_exact():
    model = tiny_gemma(seed=3)
    assert CachedLM(model).path == "lean"
    ids = torch.tensor([[5, 9, 11, 5, 9, 11, 5, 9, 11, 3]])
    cfg = DecodeConfig(k=4, temperature=0, max_new_tokens=30)
    own = autoregressive_generate(model, ids, cfg).new_tokens
    seq = ids[0].tolist()
    for _ in range(30):  # the same greedy text by full forwards, no cache at all
        seq.append(int(reference_logits(model, seq)[-1].argmax()))
    assert own == seq[ids.shape[1]:]
    assert speculative_generate(model, PromptLookupDrafter(), ids, cfg).new_tokens == own


def test_what_the_lean_path_does_not_take():
    model = tiny_gemma()
    model.config.final_logit_softcapping = 30.0
    assert not lean_gemma.supports(model)
    with pytest.raises(ValueError, match="cannot score a token tree"):
        lean_gemma.LeanGemma3(tiny_gemma()).forward(torch.tensor([1, 2]), positions=torch.tensor([0, 1]))


@pytest.mark.parametrize("family", ["qwen2", "mistral"])
def test_llama_like_families_take_the_lean_path_with_transformers_logits(family):
    from transformers import MistralConfig, MistralForCausalLM, Qwen2Config, Qwen2ForCausalLM

    from specviz.runtime import lean_llama

    common = dict(vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=256, bos_token_id=None, eos_token_id=None,
                  pad_token_id=None, tie_word_embeddings=False)
    torch.manual_seed(0)
    if family == "qwen2":
        model = Qwen2ForCausalLM(Qwen2Config(**common)).eval()  # q/k/v with biases
        assert model.model.layers[0].self_attn.q_proj.bias is not None
    else:
        model = MistralForCausalLM(MistralConfig(**common, sliding_window=None)).eval()
    assert lean_llama.supports(model) and CachedLM(model).path == "lean"
    ids = torch.randint(0, 96, (16,), generator=torch.Generator().manual_seed(2)).tolist()
    lean = lean_llama.LeanLlama(model)
    got = torch.cat([lean.forward(torch.tensor(ids[:10])), *(lean.forward(torch.tensor([i])) for i in ids[10:])])
    torch.testing.assert_close(got, reference_logits(model, ids), atol=2e-5, rtol=1e-4)
    windowed = MistralForCausalLM(MistralConfig(**common, sliding_window=8)).eval()
    assert not lean_llama.supports(windowed)  # a window the lean path does not keep: transformers' forward


@pytest.mark.slow
def test_an_exit_of_gemma_runs_lean_on_its_targets_weights_with_a_full_or_pruned_head():
    """An early exit (the first layers of kinds sliding and full) on the lean path: transformers' logits of the same
    exit, the target's very laid-out tensors, and a pruned head's logits those of its rows (-inf elsewhere)."""
    from specviz.drafts.early_exit import early_exit

    model = tiny_gemma(seed=4, layers=5, kinds=["sliding_attention", "full_attention"] * 2 + ["full_attention"])
    ids = torch.randint(0, 96, (14,), generator=torch.Generator().manual_seed(5)).tolist()
    exit_ = early_exit(model, 3)
    assert lean_gemma.supports(exit_) and CachedLM(exit_).path == "lean"
    got = CachedLM(exit_).feed(ids)
    torch.testing.assert_close(got, CachedLM(exit_, path="dynamic").feed(ids), atol=2e-5, rtol=1e-4)
    full, own = lean_gemma.lean_weights(model), lean_gemma.lean_weights(exit_)
    assert own.head_t is full.head_t and all(a is b for a, b in zip(own.blocks, full.blocks)) and len(own.blocks) == 3
    keep = torch.tensor([2, 7, 40, 95])
    pruned = CachedLM(early_exit(model, 3, vocab=keep)).feed(ids)
    torch.testing.assert_close(pruned[:, keep], got[:, keep], atol=1e-6, rtol=1e-6)
    assert torch.isneginf(pruned).sum() == pruned.shape[0] * (96 - 4)
    prompt = torch.tensor([[5, 9, 11, 5, 9, 11, 5, 9, 11, 3]])
    cfg = DecodeConfig(k=3, temperature=0, max_new_tokens=24)
    own_greedy = autoregressive_generate(model, prompt, cfg).new_tokens
    assert speculative_generate(model, early_exit(model, 2, vocab=keep), prompt, cfg).new_tokens == own_greedy


@pytest.mark.parametrize("kind", ["sliding_attention", "full_attention"])
def test_a_gemma_whose_layers_are_all_one_kind_runs_lean_with_transformers_logits(kind):
    model = tiny_gemma(seed=5, layers=3, kinds=[kind] * 3)
    assert lean_gemma.supports(model)
    ids = torch.randint(0, 96, (14,), generator=torch.Generator().manual_seed(2)).tolist()
    lean = lean_gemma.LeanGemma3(model)
    got = torch.cat([lean.forward(torch.tensor(ids[:9])), *(lean.forward(torch.tensor([t])) for t in ids[9:])])
    torch.testing.assert_close(got, reference_logits(model, ids), atol=2e-5, rtol=1e-4)
