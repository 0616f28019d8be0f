"""The llama.cpp forward on a GGUF as shipped: a tiny Gemma-3 of Q8_0 and Q5_0 matrices written here runs from its
own file (no float32 copy written), greedy speculative decoding on it equals its own autoregressive greedy decode
token for token, its pass's rows equal the same rows fed one by one, a sequence that outgrows its context continues
in a larger one with the same logits, a pass's logits are the caller's own; and a file whose architecture or
vocabulary is not the model's is refused before anything loads."""
import importlib.util

import pytest
import torch

from specviz import DecodeConfig, autoregressive_generate, speculative_generate
from specviz.runtime import llamacpp, llamacpp_seq, lm, native
from tests.helpers.tiny_gguf import write_tiny_gemma

needs_gguf = pytest.mark.skipif(importlib.util.find_spec("gguf") is None, reason="the gguf package is not installed")
needs_llamacpp = pytest.mark.skipif(llamacpp.available() is not None,
                                    reason="llama-cpp-python is not installed (pip install llama-cpp-python gguf)")
needs_native = pytest.mark.skipif(native.unavailable() is not None, reason=f"{native.unavailable()}")
PROMPTS = [[2, 6, 7, 6, 7, 6], [2, 9, 10, 4, 5], [2, 11, 12, 13, 14, 15, 4]]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """(the file, the target loaded quantized from it, a draft from another tiny file, the GGUF cache folder)."""
    if importlib.util.find_spec("gguf") is None or native.unavailable() is not None:
        pytest.skip("the gguf package and the quantized loader's C compiler are needed")
    from specviz.runtime import gguf as loader

    folder, cache = tmp_path_factory.mktemp("gguf"), tmp_path_factory.mktemp("cache")
    path = write_tiny_gemma(folder / "tiny-gemma3.gguf")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SPECVIZ_GGUF_CACHE", str(cache))
        model, _ = loader.load(folder, path.name, torch.float32)
        draft, _ = loader.load(folder, write_tiny_gemma(folder / "draft.gguf", seed=1).name, torch.float32)
        model.generation_config.eos_token_id = draft.generation_config.eos_token_id = None  # full-length runs
        yield path, model, draft, cache


class Shell(torch.nn.Module):
    """A model with only a config (what the file checks read)."""

    def __init__(self, **config):
        super().__init__()
        self.config = type("Config", (), config)()


@needs_gguf
def test_the_files_architecture_and_vocabulary_are_read_from_its_header(tmp_path):
    import gguf

    path = write_tiny_gemma(tmp_path / "t.gguf")
    reader = gguf.GGUFReader(str(path))
    arch = bytes(reader.fields["general.architecture"].parts[-1]).decode()
    vocab = len(reader.fields["tokenizer.ggml.tokens"].data)
    assert llamacpp.gguf_identity(path) == (arch, vocab) == ("gemma3", 16)


@needs_gguf
def test_a_file_that_is_not_the_models_is_refused_before_anything_loads(tmp_path, monkeypatch):
    path = write_tiny_gemma(tmp_path / "t.gguf")
    monkeypatch.setattr(llamacpp_seq, "_model", lambda p: pytest.fail("llama.cpp loaded a refused file"))
    with pytest.raises(ValueError, match="architecture 'gemma3'; the model's config says 'llama'"):
        llamacpp.from_file(Shell(model_type="llama", vocab_size=16), path)
    with pytest.raises(ValueError, match="vocabulary of 16 tokens; the model's config says 17"):
        llamacpp.from_file(Shell(model_type="gemma3_text", vocab_size=17), path)
    (tmp_path / "x.gguf").write_bytes(b"not a gguf at all, just bytes")
    with pytest.raises(ValueError, match="not a readable GGUF"):
        llamacpp.from_file(Shell(model_type="gemma3_text", vocab_size=16), tmp_path / "x.gguf")
    with pytest.raises(ValueError, match="no GGUF file"):
        llamacpp.from_file(Shell(model_type="gemma3_text", vocab_size=16), tmp_path / "absent.gguf")
    shell = llamacpp.from_file(Shell(model_type="gemma3_text", vocab_size=16), path)
    assert llamacpp.source(shell) == path.resolve()
    shell.config.vocab_size = 17  # the config changed after the check: the forward checks again
    if llamacpp.available() is None:
        with pytest.raises(ValueError, match="vocabulary"):
            llamacpp.LlamaCppForward(shell)


@needs_gguf
def test_a_gguf_loaded_dequantized_keeps_its_file_for_llamacpps_forward(tmp_path, monkeypatch):
    """The dequantized load (transformers' reader) records the file, so llama.cpp's forward runs it as shipped
    rather than a float32 copy of the weights; a model the file does not fit is left unrecorded."""
    from specviz.runtime import gguf as loader

    monkeypatch.setenv("SPECVIZ_GGUF_CACHE", str(tmp_path / "cache"))
    path = write_tiny_gemma(tmp_path / "t.gguf")
    dequantized, _ = loader.load(tmp_path, path.name, torch.float32, quantized=False)
    assert not hasattr(dequantized, "quantized") and llamacpp.source(dequantized) == path.resolve()
    other = Shell(model_type="gemma3_text", vocab_size=17)  # not this file's vocabulary: nothing recorded
    assert loader.shipped_file(other, path) is other and llamacpp.source(other) is None


def test_architecture_names_follow_llamacpps_converter():
    assert [llamacpp.gguf_architecture(t) for t in ("gemma3_text", "llama", "mistral", "qwen2", "qwen3_moe")] == \
        ["gemma3", "llama", "llama", "qwen2", "qwen3moe"]


@needs_llamacpp
def test_the_shipped_file_runs_as_it_is(tiny):
    path, model, _, cache = tiny
    run = lm.CachedLM(model, "llamacpp")
    assert run.path == "llamacpp" and run.cache.path == str(path)
    logits = run.feed(PROMPTS[0])
    assert logits.shape == (len(PROMPTS[0]), 16) and torch.isfinite(logits).all()
    assert not list(cache.rglob("*.gguf"))  # no float32 copy written


@needs_llamacpp
def test_a_passs_rows_equal_the_same_rows_fed_one_by_one(tiny):
    _, model, _, _ = tiny
    ids = PROMPTS[2]
    together = lm.CachedLM(model, "llamacpp").feed(ids)
    one = lm.CachedLM(model, "llamacpp")
    alone = torch.cat([one.feed(ids[:3])] + [one.feed([t]) for t in ids[3:]])
    assert torch.allclose(together, alone, atol=1e-4)


@needs_llamacpp
def test_a_passs_logits_stay_the_callers_after_the_next_pass(tiny):
    _, model, _, _ = tiny
    run = lm.CachedLM(model, "llamacpp")
    first = run.feed(PROMPTS[0])
    kept = first.clone()
    run.feed([5, 4, 3])
    assert torch.equal(first, kept)


@needs_llamacpp
def test_a_sequence_that_outgrows_its_context_continues_in_a_larger_one(tiny, monkeypatch):
    _, model, _, _ = tiny
    ids = [2, 6, 7, 6, 7, 6, 9, 10, 11, 4, 5, 12, 13]
    reference = lm.CachedLM(model, "llamacpp").feed(ids)
    monkeypatch.setattr(llamacpp_seq, "FIRST_CONTEXT", 4)
    run = lm.CachedLM(model, "llamacpp")
    grown = torch.cat([run.feed(ids[:3]), run.feed(ids[3:6]), run.feed(ids[6:])])
    assert run.cache.capacity >= len(ids) and run.cache.get_seq_length() == len(ids)
    assert torch.allclose(grown, reference, atol=1e-4)
    run.rollback(5)
    assert torch.allclose(run.feed(ids[5:9]), reference[5:9], atol=1e-4)


@needs_llamacpp
@pytest.mark.parametrize("k", [2, 4])
def test_greedy_speculation_equals_greedy_decoding_on_the_shipped_file(tiny, monkeypatch, k):
    """Target and draft both on llama.cpp's forward of their files; the draft (other weights) is often rejected, so
    rollbacks in llama.cpp's KV cache are exercised."""
    _, model, draft, _ = tiny
    monkeypatch.setattr(lm, "DEFAULT_PATH", "llamacpp")
    monkeypatch.setenv(lm.BASELINE_ENV, "same")
    rejected = 0
    for prompt in PROMPTS:
        cfg = DecodeConfig(k=k, temperature=0.0, max_new_tokens=24, seed=0)
        ar = autoregressive_generate(model, torch.tensor([prompt]), cfg)
        spec = speculative_generate(model, draft, torch.tensor([prompt]), cfg)
        assert spec.new_tokens == ar.new_tokens and len(ar.new_tokens) == 24
        rejected += sum(r.n_accepted < len(r.drafted) for r in spec.rounds)
    assert rejected > 0


@needs_llamacpp
def test_a_model_recorded_with_its_file_runs_on_that_file_not_on_a_copy(tmp_path, monkeypatch):
    """A Llama read from its own GGUF (here one gguf_write wrote: no token list, its vocabulary size in a key), recorded
    by from_file: the forward opens that file and writes none, with the same logits as the written copy's."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from specviz.runtime import gguf_write

    monkeypatch.setenv(gguf_write.CACHE_ENV, str(tmp_path / "cache"))
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=96, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=128, bos_token_id=None, eos_token_id=None,
                      pad_token_id=None)
    model = LlamaForCausalLM(cfg).eval()
    gguf_write.write(model, tmp_path / "own.gguf")
    assert llamacpp.gguf_identity(tmp_path / "own.gguf") == ("llama", 96)
    copy = lm.CachedLM(model, "llamacpp").feed([5, 1, 40, 7])
    written = sorted((tmp_path / "cache").rglob("*.gguf"))
    assert len(written) == 1
    llamacpp.from_file(model, tmp_path / "own.gguf")
    run = lm.CachedLM(model, "llamacpp")
    assert run.cache.path == str((tmp_path / "own.gguf").resolve())
    assert torch.equal(run.feed([5, 1, 40, 7]), copy)
    assert sorted((tmp_path / "cache").rglob("*.gguf")) == written
