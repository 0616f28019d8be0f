"""Operator-configured local models (SPECVIZ_EXTRA_MODELS) and GGUF files found and refused readably."""
import pytest
import torch

from specviz import DecodeConfig, speculative_generate
from specviz.runtime import gguf
from specviz.runtime.local import extra_models
from tests.helpers.models import tiny_llama


def recomputed_greedy(model, ids, n):
    """Greedy by a full forward per token: no cache at all."""
    seq = ids[0].tolist()
    with torch.no_grad():
        for _ in range(n):
            seq.append(int(model(torch.tensor([seq])).logits[0, -1].argmax()))
    return seq[ids.shape[1]:]


def test_extra_models_parse_and_refuse_readably(tmp_path):
    (tmp_path / "a").mkdir()
    assert extra_models(f" mine={tmp_path / 'a'} ,") == {"mine": str(tmp_path / "a")}
    assert extra_models("") == {}
    with pytest.raises(ValueError, match="is not name=PATH"):
        extra_models("just-a-path")
    with pytest.raises(ValueError, match="does not exist"):
        extra_models(f"x={tmp_path / 'missing'}")


@pytest.mark.slow
def test_the_app_serves_an_operators_local_model_by_name(tmp_path, monkeypatch):
    from transformers import AutoTokenizer

    from specviz.app.store import ModelStore
    from specviz.models import ASSETS

    model = tiny_llama(vocab=4096, seed=3, sharpen=20)
    model.save_pretrained(tmp_path / "local")
    AutoTokenizer.from_pretrained(ASSETS / "tokenizer").save_pretrained(tmp_path / "local")
    monkeypatch.setenv("SPECVIZ_EXTRA_MODELS", f"my-llama={tmp_path / 'local'}")
    store = ModelStore()
    assert "my-llama" in store.list_targets()
    target, tok, drafter = store.pair("my-llama", "prompt-lookup")
    ids = tok("ROMEO: ROMEO:", return_tensors="pt").input_ids
    trace = speculative_generate(target, drafter, ids, DecodeConfig(k=3, temperature=0, max_new_tokens=12))
    assert trace.new_tokens == recomputed_greedy(model, ids, 12)
    with pytest.raises(ValueError, match="SPECVIZ_EXTRA_MODELS=name=PATH"):
        store.target(str(tmp_path / "local"))  # a path from the form is never loaded
    assert "my-llama@1" in store.list_drafters()  # its early exit is offered, built on the very model held
    target, tok, exit_draft = store.pair("my-llama", "my-llama@1")
    held = {id(p) for p in target.parameters()}
    assert all(id(p) in held for p in exit_draft.parameters())
    trace = speculative_generate(target, exit_draft, ids, DecodeConfig(k=3, temperature=0, max_new_tokens=12))
    assert trace.new_tokens == recomputed_greedy(model, ids, 12)


def test_load_drafter_builds_an_exit_on_the_target_already_loaded(tmp_path, monkeypatch):
    from specviz import load_drafter
    from specviz.models import load_model

    tiny_llama(vocab=64, layers=4).save_pretrained(tmp_path / "m")
    _write_tokenizer(tmp_path / "m", 64)
    target, _ = load_model(str(tmp_path / "m"))
    exit_draft = load_drafter(f"{tmp_path / 'm'}@2")
    held = {id(p) for p in target.parameters()}
    assert all(id(p) in held for p in exit_draft.parameters())  # no second copy of the target


def _write_tokenizer(folder, vocab):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel({f"w{i}": i for i in range(vocab)}, unk_token="w0"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="w0").save_pretrained(folder)


def test_gguf_files_are_found_and_bad_ones_refused(tmp_path, monkeypatch):
    (tmp_path / "one").mkdir()
    (tmp_path / "one" / "m.gguf").write_bytes(b"")
    assert gguf.locate(str(tmp_path / "one")) == (tmp_path / "one", "m.gguf")
    assert gguf.locate(str(tmp_path / "one" / "m.gguf")) == (tmp_path / "one", "m.gguf")
    (tmp_path / "one" / "n.gguf").write_bytes(b"")
    with pytest.raises(ValueError, match="holds 2 GGUF files"):
        gguf.locate(str(tmp_path / "one"))
    with pytest.raises(ValueError, match="no GGUF file"):
        gguf.locate(str(tmp_path / "x.gguf"))
    assert gguf.locate(str(tmp_path)) is None  # no GGUF here: an ordinary path
    monkeypatch.setattr(gguf, "find_spec", lambda name: None)
    with pytest.raises(ValueError, match="needs the gguf package: pip install gguf"):
        gguf.load(tmp_path / "one", "m.gguf", torch.float32)


def test_the_app_offers_only_drafts_that_fit_a_local_model_of_another_tokenizer(tmp_path, monkeypatch):
    from specviz.app.store import ModelStore
    from specviz.app.widgets import fitting_update

    tiny_llama(vocab=64, layers=4).save_pretrained(tmp_path / "words")
    _write_tokenizer(tmp_path / "words", 64)
    monkeypatch.setenv("SPECVIZ_EXTRA_MODELS", f"words={tmp_path / 'words'}")
    store = ModelStore()
    fit = store.drafts_for("words")
    assert "prompt-lookup" in fit and "words@2" in fit and "words@1" in fit
    assert not {"ngram", "ngram-target", "target@6", "target+eagle", "target+eagle+ngram-target"} & set(fit)
    assert "lite" in fit  # a draft model drafts through the target's tokenizer (wrapped as a CrossDrafter)
    assert store.drafts_for("target") == store.list_drafters()  # the family's own target: every draft
    update = fitting_update(store, "words", "ngram-target", {})  # the explorer's dropdown on picking the target
    assert update["value"] in fit and update["choices"] == fit


@pytest.mark.slow
def test_every_tabs_draft_picker_follows_the_target(tmp_path, monkeypatch):
    from specviz.app.store import ModelStore
    from specviz.app.widgets import fitting_update

    tiny_llama(vocab=64, layers=4).save_pretrained(tmp_path / "words")
    _write_tokenizer(tmp_path / "words", 64)
    monkeypatch.setenv("SPECVIZ_EXTRA_MODELS", f"words={tmp_path / 'words'}")
    store = ModelStore()
    several = fitting_update(store, "words", ["ngram", "lite", "prompt-lookup"])  # a multiselect or checkboxes
    assert several["value"] == ["lite", "prompt-lookup"]
    assert fitting_update(store, "words", "target@6")["value"] in store.drafts_for("words")
    assert fitting_update(store, "target", "target@6")["value"] == "target@6"
    mine = fitting_update(store, "words", "prompt-lookup", {"my-draft": object()})
    assert mine["choices"][-1] == "my-draft" and mine["value"] == "prompt-lookup"


@pytest.mark.skipif(__import__("importlib").util.find_spec("gguf") is None, reason="the gguf package is not installed")
@pytest.mark.parametrize("named", ["folder", "file"])
def test_the_app_serves_an_operators_gguf_by_name(tmp_path, monkeypatch, named):
    """SPECVIZ_EXTRA_MODELS=name=<a folder holding a GGUF, or the .gguf>: the name loads the file (its own tokenizer,
    quantized where the loader can), never the name as a hub ID; greedy speculation keeps its own greedy text."""
    from specviz import autoregressive_generate
    from specviz.app.store import ModelStore
    from tests.helpers.tiny_gguf import write_tiny_gemma

    monkeypatch.setenv("SPECVIZ_GGUF_CACHE", str(tmp_path / "cache"))
    (tmp_path / "shipped").mkdir()
    path = write_tiny_gemma(tmp_path / "shipped" / "tiny-gemma3.gguf")
    monkeypatch.setenv("SPECVIZ_EXTRA_MODELS", f"tiny-gemma={path.parent if named == 'folder' else path}")
    store = ModelStore()
    assert "tiny-gemma" in store.list_targets()
    target, tok, drafter = store.pair("tiny-gemma", "prompt-lookup")
    ids = torch.tensor([[2, 6, 7, 6, 7, 6]])
    cfg = DecodeConfig(k=3, temperature=0, max_new_tokens=12)
    assert speculative_generate(target, drafter, ids, cfg).new_tokens == autoregressive_generate(target, ids, cfg).new_tokens
    assert tok.decode([6, 7]) and store.target("tiny-gemma")[0] is target
