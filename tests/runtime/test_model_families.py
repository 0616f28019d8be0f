"""Model families beyond Llama and GPT-2 through the decoder: sliding attention windows (Mistral, Gemma 2), ALiBi
(BLOOM), eager attention with padding. Each either decodes exactly (greedy == the target's own greedy decode) or is
refused with a ValueError that says why, before any work is lost."""
import pytest
import torch
from transformers import (
    BloomConfig,
    BloomForCausalLM,
    Gemma2Config,
    Gemma2ForCausalLM,
    GPTNeoXConfig,
    GPTNeoXForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    OPTConfig,
    OPTForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
)

from specviz import DecodeConfig, TreeConfig, autoregressive_generate_batch, speculative_generate, speculative_generate_batch
from specviz.drafts.early_exit import early_exit, new_adapter
from specviz.runtime.forwards import sliding_window
from specviz.trees.round import tree_refusal
from tests.helpers.models import finish, reference_greedy

V = 96
COMMON = dict(vocab_size=V, bos_token_id=None, eos_token_id=None, pad_token_id=None, hidden_size=32,
              tie_word_embeddings=False)
LAYERS = dict(intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)


def pair(config, cls):
    """A target and a different draft of one family (so drafts get rejected and caches roll back)."""
    torch.manual_seed(0)
    target = finish(cls(config), 8.0)
    torch.manual_seed(1)
    return target, finish(cls(config), 8.0)


def mistral(window):
    return pair(MistralConfig(**COMMON, **LAYERS, sliding_window=window), MistralForCausalLM)


def gemma2(window=4096):
    return pair(Gemma2Config(**COMMON, **LAYERS, head_dim=8, sliding_window=window), Gemma2ForCausalLM)


PROMPT = torch.tensor([[3, 5, 7, 11, 13]])


@pytest.mark.parametrize("build", [lambda: mistral(8), lambda: gemma2(8),
                                   lambda: pair(Qwen2Config(**COMMON, **LAYERS, sliding_window=8, use_sliding_window=True,
                                                            max_window_layers=0), Qwen2ForCausalLM)],
                         ids=["mistral", "gemma2", "qwen2-window"])
@pytest.mark.slow
def test_sliding_window_chains_roll_back_past_the_window(build):
    """Past an 8-token window a rejected draft must still be cropped: transformers' sliding layers refuse to crop
    unless they record the past (the cache raised a RuntimeError mid-run before)."""
    target, draft = build()
    assert sliding_window(target) == 8
    ref = reference_greedy(target, PROMPT, 48)
    trace = speculative_generate(target, draft, PROMPT, DecodeConfig(k=4, temperature=0.0, max_new_tokens=48))
    assert trace.new_tokens == ref
    assert sum(r.n_accepted < len(r.drafted) for r in trace.rounds) > 3  # rollbacks happened past the window
    sampled = speculative_generate(target, draft, PROMPT, DecodeConfig(k=4, temperature=1.0, max_new_tokens=48, seed=2))
    assert len(sampled.new_tokens) == 48


def test_full_attention_models_have_no_window():
    target, _ = pair(Qwen2Config(**COMMON, **LAYERS), Qwen2ForCausalLM)
    assert sliding_window(target) is None and tree_refusal(target) is None


@pytest.mark.parametrize("build, why", [(lambda: mistral(8), "DynamicSlidingWindowLayer"),
                                        (lambda: pair(BloomConfig(**COMMON, n_layer=2, n_head=4), BloomForCausalLM),
                                         "ALiBi")], ids=["sliding-window", "alibi"])
def test_trees_refused_where_the_model_cannot_score_one(build, why):
    target, draft = build()
    assert why in tree_refusal(target)
    cfg = DecodeConfig(k=4, temperature=0.0, max_new_tokens=8, tree=TreeConfig.parse("2,1"))
    with pytest.raises(ValueError, match="Draft a chain instead") as e:
        speculative_generate(target, draft, PROMPT, cfg)
    assert why in str(e.value) and "the target" in str(e.value)
    ok, _ = pair(Qwen2Config(**COMMON, **LAYERS), Qwen2ForCausalLM)  # a draft that cannot is named as the draft
    with pytest.raises(ValueError, match="the draft"):
        speculative_generate(ok, draft, PROMPT, cfg)


def test_batch_refuses_trees_instead_of_drafting_chains_silently():
    target, draft = pair(Qwen2Config(**COMMON, **LAYERS), Qwen2ForCausalLM)
    with pytest.raises(ValueError, match="one prompt at a time"):
        speculative_generate_batch(target, draft, [PROMPT, PROMPT],
                                   DecodeConfig(k=4, max_new_tokens=8, tree=TreeConfig.parse("2,1")))


@pytest.mark.slow
def test_batch_within_a_sliding_window_is_exact_and_refused_where_the_window_binds():
    prompts = [PROMPT, torch.tensor([[2, 4]])]
    target, draft = mistral(400)
    refs = [reference_greedy(target, p, 30) for p in prompts]
    traces = speculative_generate_batch(target, draft, prompts, DecodeConfig(k=4, temperature=0.0, max_new_tokens=30))
    assert [t.new_tokens for t in traces] == refs
    target, draft = mistral(64)  # holes and padding would be counted by a 64-token window
    with pytest.raises(ValueError, match="sliding window of 64 tokens"):
        speculative_generate_batch(target, draft, prompts, DecodeConfig(k=4, temperature=0.0, max_new_tokens=30))
    with pytest.raises(ValueError, match="sliding window of 64 tokens"):
        autoregressive_generate_batch(target, prompts, DecodeConfig(temperature=0.0, max_new_tokens=60))


@pytest.mark.slow
def test_padded_batch_with_non_finite_logits_is_refused():
    """Gemma 2's eager attention turns fully masked padding rows into NaN, which reach the real rows: the batch says
    so instead of emitting garbage; the same prompts decode exactly one at a time."""
    target, draft = gemma2()
    prompts = [PROMPT, torch.tensor([[2, 4]])]
    with pytest.raises(ValueError, match="non-finite logits for a padded batch"):
        speculative_generate_batch(target, draft, prompts, DecodeConfig(k=4, temperature=0.0, max_new_tokens=12))
    for p in prompts:
        trace = speculative_generate(target, draft, p, DecodeConfig(k=4, temperature=0.0, max_new_tokens=12))
        assert trace.new_tokens == reference_greedy(target, p, 12)


NEOX = (GPTNeoXConfig(**COMMON, intermediate_size=64, num_hidden_layers=3, num_attention_heads=4), GPTNeoXForCausalLM)
OPT = (OPTConfig(**COMMON, ffn_dim=64, num_hidden_layers=3, num_attention_heads=4, word_embed_proj_dim=32), OPTForCausalLM)


@pytest.mark.slow
@pytest.mark.parametrize("config, cls", [NEOX, OPT], ids=["gpt-neox", "opt"])
def test_early_exits_of_pythia_and_opt_cut_their_own_stacks(config, cls):
    """GPT-NeoX keeps its layers at gpt_neox.layers, OPT at model.decoder.layers: the exit at L is the model's first L
    layers (equal to a model built with L layers from the same weights), shares its weights, and decodes exactly."""
    target, _ = pair(config, cls)
    ids = torch.tensor([[3, 5, 7, 11, 13, 17]])
    with torch.no_grad():
        full = target(ids).logits
        torch.testing.assert_close(early_exit(target, 3)(ids).logits, full)
        short = cls(type(config)(**{**config.to_dict(), "num_hidden_layers": 1})).double().eval()
        short.load_state_dict(target.state_dict(), strict=False)  # its one layer: the target's first
        torch.testing.assert_close(early_exit(target, 1)(ids).logits, short(ids).logits)
        assert not torch.allclose(early_exit(target, 1)(ids).logits, full)
    assert all(any(p is q for q in target.parameters()) for p in early_exit(target, 2).parameters())
    assert new_adapter(target, 1) is not None
    trace = speculative_generate(target, early_exit(target, 1), PROMPT, DecodeConfig(k=4, temperature=0.0, max_new_tokens=24))
    assert trace.new_tokens == reference_greedy(target, PROMPT, 24)
