"""Loading models: the bundled family by name (offline), anything else by hub ID or local path;
and the check that a draft shares the target's tokenizer."""
from __future__ import annotations

import json
from pathlib import Path

ASSETS = Path(__file__).resolve().parent.parent / "assets" / "models"
DEFAULT_TARGET = "target"
DEFAULT_DRAFT = "small"
PROMPT_LOOKUP = "prompt-lookup"
NOT_MODELS = {"tokenizer"}  # asset folders that are not causal LMs


def list_models() -> list[str]:
    """Names of the bundled models (folders of assets/models holding a config.json)."""
    if not ASSETS.is_dir():
        return []
    return sorted(p.name for p in ASSETS.iterdir() if (p / "config.json").is_file() and p.name not in NOT_MODELS)


def list_ngrams() -> list[str]:
    """Names of the bundled n-gram drafts (folders of assets/models holding an ngram.json)."""
    return sorted(p.name for p in ASSETS.iterdir() if (p / "ngram.json").is_file()) if ASSETS.is_dir() else []


def list_drafters() -> list[str]:
    """Everything that can draft for the bundled target: bundled LMs other than it, and model-free drafters."""
    return [m for m in list_models() if m != DEFAULT_TARGET] + list_ngrams() + [PROMPT_LOOKUP]


def load_drafter(name: str, device: str | None = None):
    """A draft by name: prompt lookup, a bundled n-gram, or a causal LM (bundled, hub ID or path)."""
    if name == PROMPT_LOOKUP:
        from .drafters import PromptLookupDrafter

        return PromptLookupDrafter()
    if name in list_ngrams():
        from .ngram import NGramDrafter, NGramModel

        return NGramDrafter(NGramModel.load(ASSETS / name), name=name)
    return load_model(name, device=device)[0]


def resolve(name_or_path: str) -> str:
    """A bundled name becomes its folder; anything else is passed through (hub ID or path)."""
    if not isinstance(name_or_path, str) or not name_or_path.strip():
        raise ValueError(f"model name must be a non-empty string, got {name_or_path!r}")
    bundled = ASSETS / name_or_path
    return str(bundled) if (bundled / "config.json").is_file() else name_or_path


def load_model(name_or_path: str, device: str | None = None, dtype=None):
    """Return (model, tokenizer) in eval mode. Bundled names load offline from assets/models."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if name_or_path in list_ngrams():
        raise ValueError(f"{name_or_path!r} is an n-gram drafter, not a causal LM: load it with load_drafter")
    path = resolve(name_or_path)
    if dtype is None:  # half precision is slow on CPUs: compute in float32 there
        dtype = torch.float32 if (device or "cpu") == "cpu" else "auto"
    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    except OSError as e:
        detail = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ValueError(
            f"could not load {name_or_path!r}: it is not a bundled model ({', '.join(list_models()) or 'none built'}) "
            f"and loading it as a hub ID or local path failed: {detail}"
        ) from e
    if device:
        model = model.to(device)
    return model.eval(), tokenizer


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


def model_card(name: str) -> dict:
    """The training log saved beside a bundled model, if any."""
    log = ASSETS / name / "train_log.json"
    return json.loads(log.read_text()) if log.is_file() else {}
