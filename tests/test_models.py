"""The registry: bundled models load offline; tokenizer compatibility is checked over shared ids."""
import pytest
import torch
from tokenizers import Tokenizer, models
from transformers import PreTrainedTokenizerFast

import specviz
from specviz import NGramModel
from specviz.models import ASSETS, check_tokenizers, resolve


def word_tokenizer(words):
    return PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)},
                                                                               unk_token=words[0])))


def test_same_vocab_passes_and_padded_sizes_pass():
    check_tokenizers(word_tokenizer(["<unk>", "a", "b"]), word_tokenizer(["<unk>", "a", "b"]))
    # a longer vocabulary that agrees on the shared ids (like a padded or extended table) is fine
    check_tokenizers(word_tokenizer(["<unk>", "a", "b", "c"]), word_tokenizer(["<unk>", "a", "b"]))


def test_different_vocab_is_a_clear_error():
    with pytest.raises(ValueError, match=r"differs from the target's on 2 of 3 shared ids \(id 1: 'a' vs 'b'"):
        check_tokenizers(word_tokenizer(["<unk>", "a", "b"]), word_tokenizer(["<unk>", "b", "a"]))


def test_unknown_names_are_value_errors():
    with pytest.raises(ValueError, match="could not load 'no-such-model': it is not a bundled model"):
        specviz.load_model("no-such-model")
    with pytest.raises(ValueError, match="non-empty"):
        resolve("  ")


@pytest.mark.skipif(not (ASSETS / "tokenizer").is_dir(), reason="bundled tokenizer not built")
def test_bundled_tokenizer_round_trips():
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(ASSETS / "tokenizer")
    text = "ROMEO:\n  But soft! what light through yonder window breaks?\tÆ ß — 'tis <b>&amp;"
    ids = tok(text).input_ids
    assert ids[0] == tok.bos_token_id
    assert tok.decode(ids, skip_special_tokens=True) == text


@pytest.mark.slow
@pytest.mark.parametrize("name", specviz.list_models())
def test_each_bundled_model_loads_offline_and_shares_the_tokenizer(name):
    from specviz.models import cross_drafts

    model, tok = specviz.load_model(name)
    target_tok = specviz.load_model(specviz.DEFAULT_TARGET)[1]
    if name in cross_drafts():  # its own tokenizer, on purpose: it drafts through the target's
        assert tok.get_vocab() != target_tok.get_vocab() and len(tok) != len(target_tok)
    else:
        check_tokenizers(target_tok, tok)
    assert model.dtype == torch.float32 and not model.training
    assert model.generation_config.eos_token_id == tok.eos_token_id


@pytest.mark.slow
@pytest.mark.skipif(not __import__("specviz.models").models.cross_drafts(), reason="no bundled cross-tokenizer draft")
def test_the_bundled_draft_with_its_own_tokenizer_decodes_exactly_through_the_targets():
    """It loads as a CrossDrafter bound to the bundled target's tokenizer; greedy output is the target's own
    (float64), and its rounds keep its own tokens."""
    from specviz import CrossDrafter
    from specviz.models import cross_drafts, load_drafter

    name = cross_drafts()[0]
    target, tok = specviz.load_model(specviz.DEFAULT_TARGET, dtype=torch.float64)
    drafter = load_drafter(name)
    assert isinstance(drafter, CrossDrafter) and 0 < drafter.overlap < 1
    drafter.greedy_rule.model = drafter.model = drafter.model.double()
    ids = tok(specviz.EXAMPLE_PROMPTS[0], return_tensors="pt").input_ids
    trace = specviz.speculative_generate(target, drafter, ids, specviz.DecodeConfig(k=4, temperature=0,
                                                                                    max_new_tokens=40))
    assert trace.new_tokens == target.generate(ids, do_sample=False, max_new_tokens=40)[0, ids.shape[1]:].tolist()
    assert trace.summary().acceptance_rate > 0.15  # it learned the target's text (an untrained draft: ~0.001)
    assert all(r.draft_view is not None for r in trace.rounds if r.drafted)


def float64_draft(name, target):
    """A bundled draft in float64 (no near-ties that flip between batched and unbatched products); one made of the
    target (a feature draft, its hybrid) is built on ``target``, the float64 target."""
    from specviz import models
    from specviz.drafts.hybrid import HybridDrafter

    if models.self_draft_base(name) == specviz.DEFAULT_TARGET:
        return models.self_draft(target, specviz.DEFAULT_TARGET, name)
    if name in models.list_hybrids():
        model, table, _ = models.HYBRIDS[name]
        return HybridDrafter(NGramModel.load(ASSETS / table), specviz.load_model(model, dtype=torch.float64)[0])
    return specviz.load_model(name, dtype=torch.float64)[0]


@pytest.mark.slow
@pytest.mark.skipif(specviz.DEFAULT_TARGET not in specviz.list_models(), reason="bundled target not built")
@pytest.mark.parametrize("name", sorted({specviz.DEFAULT_DRAFT, "lite"} & set(specviz.list_drafters())))
def test_default_pair_greedy_equals_the_targets_own_greedy(name):
    target, tok = specviz.load_model(specviz.DEFAULT_TARGET, dtype=torch.float64)
    draft = float64_draft(name, target)
    for text in specviz.EXAMPLE_PROMPTS[:2]:
        ids = tok(text, return_tensors="pt").input_ids
        trace = specviz.speculative_generate(target, draft, ids, specviz.DecodeConfig(k=4, temperature=0,
                                                                                    max_new_tokens=48))
        ref = target.generate(ids, do_sample=False, max_new_tokens=48)[0, ids.shape[1]:].tolist()
        assert trace.new_tokens == ref
        assert trace.summary().acceptance_rate > 0.3  # trained on the target's own text (random: ~1/4096)


@pytest.mark.slow
def test_int8_storage_round_trips_into_an_ordinary_model(tmp_path):
    """A model saved in 8 bits loads (through load_model's path) as a transformers model whose weights are the
    dequantized ones, within one quantization step of the original, tied head re-tied; greedy decoding on it is
    exact as on any model."""
    import torch

    from specviz import DecodeConfig, speculative_generate
    from specviz.models import param_count
    from specviz.runtime import int8
    from tests.helpers.models import perturbed, reference_greedy, tiny_llama

    model = tiny_llama(vocab=64, seed=4, sharpen=5).float()
    model.config.tie_word_embeddings = True
    model.tie_weights()
    int8.save(model, tmp_path)
    back = int8.load(tmp_path)
    for (name, w), w2 in zip(model.state_dict().items(), back.state_dict().values()):
        step = w.abs().amax(dim=-1, keepdim=True) / 127 if w.dim() == 2 else 1e-3 * w.abs().max()
        assert ((w - w2).abs() <= step * 0.5 + 1e-6).all(), name
    assert back.lm_head.weight.data_ptr() == back.model.embed_tokens.weight.data_ptr()
    assert param_count(str(tmp_path)) == sum(p.numel() for p in model.parameters())
    prompt = torch.tensor([[1, 5, 9]])
    trace = speculative_generate(back, perturbed(back, 0.3), prompt, DecodeConfig(temperature=0, max_new_tokens=20))
    assert trace.new_tokens == reference_greedy(back, prompt, 20)
