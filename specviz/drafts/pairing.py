"""Whether a draft and a target share a tokenizer: the check a same-tokenizer draft must pass, and the vocabulary of
a saved model (a draft with another tokenizer drafts through ``specviz.drafts.cross`` instead)."""
from __future__ import annotations

import json
from pathlib import Path


def vocab_of(folder: Path) -> dict:
    """The token -> id map in a saved tokenizer's ``tokenizer.json`` (empty if it has none)."""
    path = Path(folder) / "tokenizer.json"
    return json.loads(path.read_text()).get("model", {}).get("vocab", {}) if path.is_file() else {}


def check_tokenizers(target_tokenizer, draft_tokenizer) -> None:
    """Raise ValueError unless the two tokenizers map the same ids to the same tokens over their
    shared range (embedding tables may be padded to different sizes; the tokens must agree)."""
    a, b = target_tokenizer.get_vocab(), draft_tokenizer.get_vocab()
    if a == b:
        return
    shared = min(len(target_tokenizer), len(draft_tokenizer))
    ia = {i: t for t, i in a.items() if i < shared}
    ib = {i: t for t, i in b.items() if i < shared}
    differ = sorted(i for i in set(ia) | set(ib) if ia.get(i) != ib.get(i))
    if differ:
        examples = ", ".join(f"id {i}: {ia.get(i)!r} vs {ib.get(i)!r}" for i in differ[:3])
        raise ValueError(
            f"the draft's tokenizer differs from the target's on {len(differ)} of {shared} shared ids "
            f"({examples}); speculative decoding needs a draft that shares the target's tokenizer"
        )


PADDING, PADDING_ROWS = 0.02, 256  # padded tables differ by a few rows or percent (Qwen2: 151,646 tokens in 151,936)
FIX = ("load the pair with specviz.models.load_pair(target, draft), which wraps a draft of another tokenizer, or "
       "wrap it yourself: specviz.CrossDrafter(draft_model, draft_tokenizer, target_tokenizer)")


def vocab_fingerprint(tokenizer) -> str:
    """A short digest of a tokenizer's token -> id map: two models share a tokenizer iff their digests agree."""
    import hashlib

    items = sorted(tokenizer.get_vocab().items(), key=lambda kv: kv[1])
    return hashlib.sha256(json.dumps(items, ensure_ascii=False).encode()).hexdigest()[:16]


def check_fits(target, drafter) -> None:
    """Refuse, before any work, a draft whose vocabulary cannot be the target's: its table's size differs by more
    than padding, or both models carry a tokenizer digest (``load_model`` sets ``specviz_vocab``) and they
    differ. Drafts that read the target's own tokens (prompt lookup, early exits) or map their own (a
    ``CrossDrafter``) say nothing (``Drafter.own_vocab`` is None) and pass."""
    vocab, digest = drafter.own_vocab()
    if vocab is None:
        return
    rows = target.get_output_embeddings().weight.shape[0]
    name = getattr(drafter, "name", type(drafter).__name__)
    theirs = getattr(target, "specviz_vocab", None)
    if digest is not None and theirs is not None and digest != theirs:
        raise ValueError(f"the draft {name!r} was trained with another tokenizer than the target's: no draft of it "
                         f"would be accepted; {FIX}")
    if abs(vocab - rows) > max(PADDING * max(vocab, rows), PADDING_ROWS):
        raise ValueError(f"the draft {name!r} has a vocabulary of {vocab:,} tokens and the target {rows:,}: they "
                         f"cannot share a tokenizer, so no draft would be accepted; {FIX}")
