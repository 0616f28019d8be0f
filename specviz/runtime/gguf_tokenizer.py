"""A GGUF's tokenizer run by the ``tokenizers`` library directly, from the tokenizer.json cached for the file.

The tokenizer.json is built once per GGUF (``gguf.described``: transformers' reading of the file's vocabulary, with
the merges it implies) and kept in a private cache folder named by the file's SHA-256. Loading it back through
transformers' ``GemmaTokenizer`` held about 270 MB more resident for Gemma-3's 262,144-token vocabulary than the
``tokenizers.Tokenizer`` it wraps (Python-side copies of the vocabulary); ``GgufTokenizer`` wraps that Tokenizer
alone, with the few methods specviz calls (``tok(text).input_ids``, ``decode``, ``convert_ids_to_tokens``,
``get_vocab``, the special tokens' ids), giving the same ids (tests/runtime/test_gguf_tokenizer.py). After parsing,
the freed parse buffers are handed back to the system (``heap``: glibc's malloc_trim), so they do not stay resident.
"""
from __future__ import annotations

import json
from pathlib import Path

from .heap import give_back_freed_memory

ROLES = ("bos_token", "eos_token", "unk_token", "pad_token", "mask_token")


class Encoded(dict):
    """``input_ids`` (and ``attention_mask``) by key or by attribute, as transformers' BatchEncoding reads."""

    def __getattr__(self, name: str):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


class GgufTokenizer:
    """A ``tokenizers.Tokenizer`` with its special tokens, called as transformers' tokenizers are."""

    def __init__(self, backend, specials: dict[str, str | None], name_or_path: str = ""):
        self.backend_tokenizer, self.name_or_path = backend, name_or_path
        for role in ROLES:
            token = specials.get(role)
            token_id = backend.token_to_id(token) if token else None
            if token and token_id is None:
                raise ValueError(f"the tokenizer's {role} {token!r} is not in its vocabulary")
            setattr(self, role, token)
            setattr(self, f"{role}_id", token_id)

    def __call__(self, text: str | list[str], add_special_tokens: bool = True, return_tensors: str | None = None,
                 verbose: bool = True) -> Encoded:
        if isinstance(text, str):
            ids = self.encode(text, add_special_tokens)
        elif isinstance(text, (list, tuple)) and all(isinstance(t, str) for t in text):
            ids = [self.encode(t, add_special_tokens) for t in text]
        else:
            raise ValueError(f"text must be a string or a list of strings, not {type(text).__name__}")
        if return_tensors not in (None, "pt"):
            raise ValueError(f"return_tensors must be None or 'pt', not {return_tensors!r}")
        if return_tensors == "pt":
            import torch

            rows = [ids] if isinstance(text, str) else ids
            if len({len(r) for r in rows}) > 1:
                raise ValueError("texts of different token lengths cannot share one tensor (no padding here)")
            ids = torch.tensor(rows, dtype=torch.long)
            return Encoded(input_ids=ids, attention_mask=torch.ones_like(ids))
        mask = [1] * len(ids) if isinstance(text, str) else [[1] * len(r) for r in ids]
        return Encoded(input_ids=ids, attention_mask=mask)

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return self.backend_tokenizer.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, ids, skip_special_tokens: bool = False, clean_up_tokenization_spaces: bool = False) -> str:
        """The text of ``ids`` (no clean-up of spaces: transformers skips it for BPE vocabularies too)."""
        return self.backend_tokenizer.decode(_ints(ids), skip_special_tokens=skip_special_tokens)

    def convert_ids_to_tokens(self, ids):
        if isinstance(ids, int):
            return self.backend_tokenizer.id_to_token(ids)
        return [self.backend_tokenizer.id_to_token(i) for i in _ints(ids)]

    def get_vocab(self) -> dict[str, int]:
        return self.backend_tokenizer.get_vocab(with_added_tokens=True)

    @property
    def vocab_size(self) -> int:
        return self.backend_tokenizer.get_vocab_size(with_added_tokens=False)

    def __len__(self) -> int:
        return self.backend_tokenizer.get_vocab_size(with_added_tokens=True)

    def save_pretrained(self, out) -> tuple[str, ...]:
        """tokenizer.json and a tokenizer_config.json naming the special tokens (transformers reads both)."""
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        self.backend_tokenizer.save(str(out / "tokenizer.json"))
        config = {"tokenizer_class": "PreTrainedTokenizerFast", **{r: getattr(self, r) for r in ROLES}}
        (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
        return str(out / "tokenizer.json"), str(out / "tokenizer_config.json")


def _ints(ids) -> list[int]:
    if isinstance(ids, int):
        return [ids]
    if hasattr(ids, "tolist"):
        ids = ids.tolist()
    if ids and isinstance(ids[0], list):
        raise ValueError("decode takes one sequence of ids, not a batch")
    return [int(i) for i in ids]


def load(folder: Path) -> GgufTokenizer:
    """The tokenizer saved in ``folder`` (tokenizer.json, tokenizer_config.json naming its special tokens)."""
    from tokenizers import Tokenizer

    folder = Path(folder)
    if not (folder / "tokenizer.json").is_file():
        raise ValueError(f"{str(folder)!r} holds no tokenizer.json")
    config_path = folder / "tokenizer_config.json"
    config = json.loads(config_path.read_text()) if config_path.is_file() else {}
    specials = {r: _content(config.get(r)) for r in ROLES}
    backend = _bpe_tokenizer(folder / "tokenizer.json") or Tokenizer.from_file(str(folder / "tokenizer.json"))
    give_back_freed_memory()
    return GgufTokenizer(backend, specials, str(folder))


BPE_OPTIONS = ("dropout", "unk_token", "continuing_subword_prefix", "end_of_word_suffix", "fuse_unk", "byte_fallback",
               "ignore_merges")  # a BPE model's settings in tokenizer.json, as tokenizers' BPE() takes them


def _bpe_tokenizer(path: Path):
    """The tokenizer saved at ``path`` with its BPE model built from Python (vocabulary and merges passed to
    tokenizers' BPE()), the rest read by tokenizers from the JSON: the same tokenizer as Tokenizer.from_file (the
    same JSON when saved again, tests/runtime/test_gguf_tokenizer.py) in less memory. from_file's parse of Gemma-3's
    33 MB file left about 94 MB resident (glibc keeping pages its parse freed between the vocabulary's strings), this
    about 75 MB. None where the file is not such a BPE (another model, a setting not listed in BPE_OPTIONS, merges
    written as strings) or an added token's id would differ from the file's: the caller reads it with from_file."""
    from tokenizers import AddedToken, Tokenizer
    from tokenizers.models import BPE

    spec = json.loads(path.read_text(encoding="utf-8"))
    model = spec.get("model") or {}
    if model.get("type") != "BPE" or set(model) - {"type", "vocab", "merges", *BPE_OPTIONS} or \
            not all(isinstance(m, list) and len(m) == 2 for m in model.get("merges") or []):
        return None
    bpe = BPE(vocab=model["vocab"], merges=[tuple(m) for m in model["merges"]],
              **{k: model[k] for k in BPE_OPTIONS if model.get(k) is not None})  # None: unset
    added = spec.get("added_tokens") or []
    spec["model"], spec["added_tokens"] = {**model, "vocab": {}, "merges": []}, []
    del model
    tokenizer = Tokenizer.from_str(json.dumps(spec))
    tokenizer.model = bpe
    tokens = [(AddedToken(t["content"], single_word=t["single_word"], lstrip=t["lstrip"], rstrip=t["rstrip"],
                          normalized=t["normalized"], special=t["special"]), t["special"]) for t in added]
    tokenizer.add_special_tokens([token for token, special in tokens if special])
    tokenizer.add_tokens([token for token, special in tokens if not special])
    return tokenizer if all(tokenizer.token_to_id(t["content"]) == t["id"] for t in added) else None


def _content(token) -> str | None:
    """A special token as tokenizer_config.json writes it: a string, or an AddedToken's dict."""
    return token.get("content") if isinstance(token, dict) else token
