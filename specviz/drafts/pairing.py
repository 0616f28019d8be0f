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
