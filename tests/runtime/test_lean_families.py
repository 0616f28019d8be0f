"""The lean Llama forward on Qwen3 (q/k norms per head) and Phi-3 (fused qkv and gate/up, partial rotary) against
transformers' logits on tiny random models (no download): a prefill, one token at a time, then a verify pass of
several rows after a rollback; greedy speculative output equal to the target's own; what the lean path refuses."""
import pytest
import torch
from transformers import Phi3Config, Phi3ForCausalLM, Qwen3Config, Qwen3ForCausalLM

from specviz import DecodeConfig, PromptLookupDrafter, speculative_generate
from specviz.drafts.early_exit import early_exit
from specviz.runtime import lean_llama
from specviz.runtime.lean_families import refusal
from specviz.runtime.lm import CachedLM
from tests.helpers.models import BUILDS, COMMON, reference_greedy, reference_logits, tiny


@pytest.mark.parametrize("family", list(BUILDS))
def test_lean_logits_match_transformers_after_a_rollback(family):
    model = tiny(family)
    assert refusal(model) is None and CachedLM(model).path == "lean"
    ids = torch.randint(0, 96, (24,), generator=torch.Generator().manual_seed(1)).tolist()
    want = reference_logits(model, ids)
    lean = lean_llama.LeanLlama(model)
    got = lean.forward(torch.tensor(ids[:10]))  # a prefill
    for i in range(10, 16):  # one token at a time
        got = torch.cat([got, lean.forward(torch.tensor([ids[i]]))])
    lean.crop(13)  # a rollback, then a verify pass of several rows over the overwritten slots
    got = torch.cat([got[:13], lean.forward(torch.tensor(ids[13:24]))])
    torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("family", ["qwen3", "phi3"])
def test_greedy_speculation_on_the_lean_path_is_the_targets_own_greedy(family):
    model = tiny(family, seed=3, sharpen=20)
    prompt = torch.tensor([[5, 9, 11, 5, 9, 11, 5, 9, 11, 3]])
    cfg = DecodeConfig(k=4, temperature=0, max_new_tokens=30)
    want = reference_greedy(model, prompt, 30)
    for draft in (PromptLookupDrafter(), early_exit(model, 1), early_exit(model, 2)):  # exits in the target's cache
        trace = speculative_generate(model, draft, prompt, cfg)
        assert trace.new_tokens == want, draft
    assert trace.counts().accepted > 0


def test_what_the_lean_path_refuses_says_why():
    longrope = tiny("phi3")
    longrope.config.rope_parameters = {**longrope.config.rope_parameters, "rope_type": "longrope"}
    assert "longrope" in refusal(longrope) and CachedLM(longrope).path == "dynamic"
    with pytest.raises(ValueError, match="cannot run Phi3ForCausalLM: RoPE 'longrope'"):
        lean_llama.LeanLlama(longrope)
    windowed = Phi3ForCausalLM(Phi3Config(**COMMON, sliding_window=8)).eval()
    assert "sliding window (8)" in refusal(windowed) and not lean_llama.supports(windowed)
    qwen_window = Qwen3ForCausalLM(Qwen3Config(**COMMON, use_sliding_window=True, sliding_window=8)).eval()
    assert "sliding window" in refusal(qwen_window)
    gelu = tiny("qwen3")
    gelu.config.hidden_act = "gelu"
    assert "activation 'gelu'" in refusal(gelu)
    from transformers import GPT2Config, GPT2LMHeadModel

    assert "model_type 'gpt2'" in refusal(GPT2LMHeadModel(GPT2Config(n_embd=32, n_layer=1, n_head=2)))
