"""Tiny random-init models built from configs (no downloads), a reference greedy decode, and small tokenizers:
what the tests build their cases from. Fixtures live in tests/conftest.py."""
import copy
import os

import pytest
import torch
from transformers import (
    Gemma3ForCausalLM,
    Gemma3TextConfig,
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    Phi3Config,
    Phi3ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)

# The device the decoder tests run their models on: SPECVIZ_TEST_DEVICE=cuda (scripts/measure/gpu_check.sh sets it
# for the library's tests). Models and the prompt fixture go there; hand-built tensors stay on the CPU
# (the decoder takes prompts as token lists, so either works).
DEVICE = torch.device(os.environ.get("SPECVIZ_TEST_DEVICE", "cpu"))
if DEVICE.type == "cuda" and not torch.cuda.is_available():
    pytest.exit(f"SPECVIZ_TEST_DEVICE={DEVICE} but torch {torch.__version__} sees no CUDA device", returncode=2)
if DEVICE.type == "mps" and not torch.backends.mps.is_available():
    pytest.exit(f"SPECVIZ_TEST_DEVICE={DEVICE} but MPS is not available", returncode=2)


def tiny_gemma(seed=0, window=6, layers=4, heads=4, kv_heads=1, kinds=None):
    """A tiny Gemma-3 (sliding-window layers of ``window``, then a full one, unless ``kinds`` says), its norms given
    some shape."""
    torch.manual_seed(seed)
    cfg = Gemma3TextConfig(vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=layers,
                           num_attention_heads=heads, num_key_value_heads=kv_heads, head_dim=16,
                           max_position_embeddings=256, sliding_window=window, query_pre_attn_scalar=16,
                           layer_types=kinds or ["sliding_attention"] * (layers - 1) + ["full_attention"],
                           bos_token_id=None, eos_token_id=None, pad_token_id=None)
    model = Gemma3ForCausalLM(cfg).eval()
    with torch.no_grad():  # Gemma's norms start at zero (scale 1): give them some shape
        for name, p in model.named_parameters():
            if "norm" in name:
                p.normal_(0, 0.3)
    return model


def tiny_llama(vocab=64, seed=0, layers=2, hidden=32, window=256, sharpen=1.0):
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=window,
                      bos_token_id=None, eos_token_id=None, pad_token_id=None, tie_word_embeddings=False)
    return finish(LlamaForCausalLM(cfg), sharpen)


def tiny_gpt2(vocab=64, seed=0, layers=2, hidden=32, window=256, sharpen=1.0):
    torch.manual_seed(seed)
    cfg = GPT2Config(vocab_size=vocab, n_embd=hidden, n_layer=layers, n_head=2, n_positions=window,
                     bos_token_id=None, eos_token_id=None, pad_token_id=None, tie_word_embeddings=False)
    return finish(GPT2LMHeadModel(cfg), sharpen)


def ui_models(window=128):
    """(target, draft, tokenizer) for the app's tests: a tiny random target behind the bundled tokenizer and
    a perturbed copy of it as the draft."""
    from transformers import AutoTokenizer

    from specviz.models import ASSETS

    tok = AutoTokenizer.from_pretrained(ASSETS / "tokenizer")
    target = tiny_llama(vocab=len(tok), window=window, sharpen=20.0)
    return target, perturbed(target, scale=0.3), tok


def reference_greedy(model, prompt, n):
    """The target's own greedy continuation of prompt (1, L): n tokens (fewer only at its EOS)."""
    out = model.generate(prompt.to(model.device), do_sample=False, max_new_tokens=n,
                         min_new_tokens=n if model.generation_config.eos_token_id is None else 0)
    return out[0, prompt.shape[1]:].tolist()


def last(stream):
    """The final item a streaming handler yields."""
    out = None
    for out in stream:
        pass
    return out


def perturbed(model, scale=0.5, seed=1):
    """A draft that mostly agrees with its target: the target's weights plus noise."""
    torch.manual_seed(seed)
    draft = copy.deepcopy(model)
    with torch.no_grad():
        for w in draft.parameters():
            w.add_(scale * w.std() * torch.randn_like(w))
    return draft.eval()


def finish(model, sharpen):
    """float64 (no near-ties that flip between batched and unbatched GEMMs) and, optionally, peakier
    distributions (random init is nearly uniform) so p and q differ enough to exercise the residual."""
    model = model.double().to(DEVICE).eval()
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(sharpen)
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    return model


def word_tokenizer(words):
    """A word-level tokenizer whose ids are the positions of ``words`` (words[0] is the unknown token)."""
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)},
                                                                               unk_token=words[0])))


BPE_TEXT = ["ROMEO: But soft, what light through yonder window breaks?", "It is the east, and Juliet is the sun.",
            "Arise, fair sun, and kill the envious moon,", "To be, or not to be, that is the question:"] * 20


def byte_bpe(vocab: int):
    """A byte-level BPE of ``vocab`` tokens trained on BPE_TEXT: different vocabularies merge differently."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(BPE_TEXT, trainers.BpeTrainer(vocab_size=vocab,
                                                          initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return PreTrainedTokenizerFast(tokenizer_object=tok)


def assert_greedy_speculative_equals_autoregressive(target, draft, ids, k, tree=None, max_new_tokens=120):
    """Greedy speculative decoding (a chain, or the tree shape ``tree`` names) emits the target's own greedy text,
    accepting some drafts on the way."""
    from specviz import DecodeConfig, TreeConfig, autoregressive_generate, speculative_generate

    cfg = DecodeConfig(k=k, temperature=0, max_new_tokens=max_new_tokens, tree=TreeConfig.parse(tree) if tree else None)
    reference = autoregressive_generate(target, ids, cfg).new_tokens
    trace = speculative_generate(target, draft, ids, cfg)
    assert trace.new_tokens == reference and trace.counts().accepted > 0


def gqa_llama(seed=0, layers=2, hidden=48, heads=6, kv_heads=2, sharpen=1.0, dtype=torch.float64, tied=False):
    """A tiny Llama with grouped-query attention (3 query heads per key/value head), as the bundled ones
    (which also tie the LM head to the embeddings: ``tied``)."""
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=64, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                      num_attention_heads=heads, num_key_value_heads=kv_heads, max_position_embeddings=512,
                      bos_token_id=None, eos_token_id=None, pad_token_id=None, tie_word_embeddings=tied)
    return finish(LlamaForCausalLM(cfg), sharpen).to(dtype)


# the families the lean Llama forward covers besides Llama, tiny and random (tests/runtime)
COMMON = dict(vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=256, bos_token_id=None, eos_token_id=None,
              pad_token_id=None, tie_word_embeddings=False)
BUILDS = {
    "qwen3": lambda: Qwen3ForCausalLM(Qwen3Config(**COMMON, head_dim=24)),  # head_dim not hidden / heads
    "qwen3-bias": lambda: Qwen3ForCausalLM(Qwen3Config(**COMMON, attention_bias=True)),
    "phi3": lambda: Phi3ForCausalLM(Phi3Config(**COMMON)),
    "phi3-partial-rotary": lambda: Phi3ForCausalLM(Phi3Config(**COMMON, partial_rotary_factor=0.5)),
}


def tiny(family: str, seed: int = 0, sharpen: float = 1.0):
    torch.manual_seed(seed)
    model = BUILDS[family]().eval()
    with torch.no_grad():  # norms start at one: give them some shape, so a skipped norm shows
        for name, p in model.named_parameters():
            if "norm" in name:
                p.normal_(1.0, 0.3)
        model.get_output_embeddings().weight.mul_(sharpen)
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    return model


def reference_logits(model, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0]


def llamacpp_llama(heads=4, kv_heads=2, tied=False, seed=0, vocab=96, layers=2):
    """A small Llama that llama.cpp runs (written by gguf_write), its head sharpened so that greedy choices are not
    near-ties between forwards."""
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=64, intermediate_size=96, num_hidden_layers=layers,
                      num_attention_heads=heads, num_key_value_heads=kv_heads, max_position_embeddings=128,
                      bos_token_id=None, eos_token_id=None, pad_token_id=None, tie_word_embeddings=tied)
    model = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():  # sharper than random init, so that greedy choices are not near-ties
        model.lm_head.weight.mul_(8.0)
    return model
