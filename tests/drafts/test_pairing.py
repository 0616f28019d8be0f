"""A draft that cannot share the target's vocabulary is refused before any work, with the fix named."""
import pytest
import torch

from specviz import DecodeConfig, Decoding, NGramDrafter, NGramModel, PromptLookupDrafter, speculative_generate_batch
from tests.helpers.models import tiny_gpt2, tiny_llama

PROMPT = torch.tensor([[1, 5, 9, 3]])


def test_a_draft_of_another_vocabulary_size_is_refused_naming_the_fix():
    target = tiny_llama(vocab=64)
    with pytest.raises(ValueError, match=r"vocabulary of 1,000 tokens and the target 64.*load_pair.*CrossDrafter"):
        Decoding(target, tiny_gpt2(vocab=1000), PROMPT, DecodeConfig(max_new_tokens=4))
    with pytest.raises(ValueError, match="vocabulary of 1,000 tokens"):
        speculative_generate_batch(target, tiny_gpt2(vocab=1000), [PROMPT], DecodeConfig(max_new_tokens=4))


def test_an_ngram_of_another_vocabulary_is_refused():
    table = NGramModel.fit(torch.randint(0, 900, (500,)), vocab_size=262_144, order=3)
    with pytest.raises(ValueError, match="262,144 tokens and the target 64"):
        Decoding(tiny_llama(vocab=64), NGramDrafter(table), PROMPT, DecodeConfig(max_new_tokens=4))


def test_tokenizer_digests_that_differ_are_refused_even_at_one_size():
    target, draft = tiny_llama(vocab=64), tiny_llama(vocab=64, seed=1)
    target.specviz_vocab, draft.specviz_vocab = "a" * 16, "b" * 16
    with pytest.raises(ValueError, match="another tokenizer"):
        Decoding(target, draft, PROMPT, DecodeConfig(max_new_tokens=4))
    draft.specviz_vocab = target.specviz_vocab
    Decoding(target, draft, PROMPT, DecodeConfig(max_new_tokens=4))  # the same tokenizer: accepted


def test_padding_and_drafts_of_the_targets_own_tokens_pass():
    target = tiny_llama(vocab=64)
    for draft in (tiny_llama(vocab=72, seed=1), PromptLookupDrafter(),
                  NGramDrafter(NGramModel.fit(torch.randint(0, 64, (300,)), vocab_size=64, order=2))):
        assert len(list(Decoding(target, draft, PROMPT, DecodeConfig(max_new_tokens=4)))) >= 1


def test_the_bundled_models_carry_their_tokenizers_digest():
    from specviz.drafts.pairing import vocab_fingerprint
    from specviz.models import list_models, load_model

    if "lite" not in list_models():
        pytest.skip("the bundled models are not in assets/")
    model, tokenizer = load_model("lite")
    assert model.specviz_vocab == vocab_fingerprint(tokenizer)
