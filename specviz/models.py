"""Loading models: the bundled family by name (offline), curated hub pairs (HUB_PRESETS), anything else
by hub ID or local path; and the check that a draft shares the target's tokenizer.

Hub loading never hangs offline: the hub's reachability is probed once (``hub.py``: bounded,
remembered) and, when it is unreachable, models load from the local cache only or fail at once
saying so. Remote code is never run (trust_remote_code=False)."""
from __future__ import annotations

import functools
import json
import os
import weakref
from importlib.util import find_spec
from pathlib import Path

from .drafts import eagle, early_exit
from .drafts.pairing import check_tokenizers, vocab_fingerprint, vocab_of  # noqa: F401 (check_tokenizers: part of this API)
from .runtime import gguf
from .runtime.devices import default_device, default_dtype, needs_device_map  # noqa: F401 (part of this API)
from .runtime.hub import hub_reachable, is_hub_id, param_count  # noqa: F401 (part of this API)
from .runtime.hub_pairs import CROSS_PRESETS, HUB_PRESETS  # noqa: F401 (part of this API)
from .runtime.local import extra_models

ASSETS = Path(__file__).resolve().parent.parent / "assets" / "models"
DEFAULT_TARGET = "target"
DEFAULT_DRAFT = "target+eagle+ngram-target"  # the fastest at the explorer's defaults (model card): the feature draft,
# and in greedy runs the n-gram of the target's own greedy text wherever it is sure
DEFAULT_MODEL_DRAFT = "lite"  # for what needs a draft model of its own (token trees, batches, alpha at fixed contexts):
# one layer distilled on the target's own text
PROMPT_LOOKUP = "prompt-lookup"
NOT_MODELS = {"tokenizer"}  # asset folders that are not causal LMs
HYBRIDS = {  # name -> (bundled model draft or feature draft, bundled n-gram, HybridDrafter's options)
    "lite+ngram-target": ("lite", "ngram-target", {}),
    # in greedy runs the run's own last 4 tokens are looked up first (its loops), then the n-gram, at most 5 feature
    # drafts a round (its best k, sampled: model card), and the sure steps may run on to k; sampled runs: up to k
    "target+eagle+ngram-target": ("target+eagle", "ngram-target", {"model_steps": 5, "lookup": 4}),
}

ALLOW_ENV = "SPECVIZ_ALLOW_MODELS"  # which names the web UI may load: bundled | presets | any (hub IDs)
ALLOW_POLICIES = ("bundled", "presets", "any")
LOADED: weakref.WeakValueDictionary = weakref.WeakValueDictionary()  # (name, device) -> a model still in use


def list_models() -> list[str]:
    """Names of the bundled models (folders of assets/models holding a config.json)."""
    if not ASSETS.is_dir():
        return []
    return sorted(p.name for p in ASSETS.iterdir()
                  if (p / "config.json").is_file() and p.name not in NOT_MODELS and not _trained_config(p))


def list_trained() -> list[str]:
    """Bundled drafts in a trainer's layout (a speculators config.json: ``drafts.trained``): they draft for the
    bundled target and are never targets."""
    return sorted(p.name for p in ASSETS.iterdir() if _trained_config(p)) if ASSETS.is_dir() else []


def _trained_config(folder: Path) -> bool:
    config = folder / "config.json"
    return config.is_file() and "speculators_model_type" in json.loads(config.read_text())


def list_ngrams() -> list[str]:
    """Names of the bundled n-gram drafts (folders of assets/models holding an ngram.json)."""
    return sorted(p.name for p in ASSETS.iterdir() if (p / "ngram.json").is_file()) if ASSETS.is_dir() else []


def list_hybrids() -> list[str]:
    """Bundled hybrid drafts ("model+ngram": the n-gram where it is confident in greedy runs, the model elsewhere)
    whose two parts are both bundled."""
    feature_drafts = eagle.names(ASSETS / DEFAULT_TARGET, DEFAULT_TARGET)
    return [name for name, (m, n, _) in HYBRIDS.items()
            if (m in list_models() or m in feature_drafts) and n in list_ngrams()]


@functools.lru_cache(maxsize=1)
def cross_drafts() -> tuple[str, ...]:
    """Bundled models whose tokenizer is not the bundled target's (they draft through ``specviz.drafts.cross``)."""
    if DEFAULT_TARGET not in list_models():
        return ()
    vocab = vocab_of(ASSETS / DEFAULT_TARGET) or vocab_of(ASSETS / "tokenizer")
    return tuple(m for m in list_models() if (ASSETS / m / "tokenizer.json").is_file() and vocab_of(ASSETS / m) != vocab)


def list_drafters() -> list[str]:
    """Everything that can draft for the bundled target: bundled LMs other than it, hybrids, model-free drafters,
    the target's own early exits at a quarter and half of its depth, and its feature draft where one is saved."""
    return ([m for m in list_models() if m != DEFAULT_TARGET] + list_hybrids() + list_ngrams() + [PROMPT_LOOKUP]
            + early_exit.exit_names(ASSETS / DEFAULT_TARGET, DEFAULT_TARGET)
            + eagle.names(ASSETS / DEFAULT_TARGET, DEFAULT_TARGET) + list_trained())


def preset_targets() -> list[str]:
    return list(HUB_PRESETS)


def preset_drafts() -> list[str]:
    pairs = [*HUB_PRESETS.values(), *CROSS_PRESETS.values()]
    return list(dict.fromkeys(d for drafts in pairs for d in drafts))


def allow_policy() -> str:
    """The web UI's allowlist from SPECVIZ_ALLOW_MODELS (default "bundled")."""
    policy = os.environ.get(ALLOW_ENV, "bundled").strip().lower() or "bundled"
    if policy not in ALLOW_POLICIES:
        raise ValueError(f"{ALLOW_ENV}={policy!r}: use one of {', '.join(ALLOW_POLICIES)}")
    return policy


def load_drafter(name: str, device: str | None = None, vocab=None):
    """A draft by name: prompt lookup, a bundled n-gram, a draft trained elsewhere (a folder in the speculators,
    midlayer/EAGLE or Medusa layout, by path or local name: ``drafts.trained``, checked against the target a run
    attaches), or a causal LM (bundled, hub ID or path). ``vocab`` (token ids) gives an early exit ("target@4") a
    head over those tokens only (``early_exit.early_exit``)."""
    if vocab is not None and not early_exit.parse(name):
        raise ValueError(f"vocab= prunes an early exit's head (a name like 'target@4'), not {name!r}")
    if (folder := trained_folder(name)) is not None:  # speculators / EAGLE / Medusa: checked when a run attaches
        from .drafts.trained.load import load_trained

        return load_trained(folder, name=name)
    if name == PROMPT_LOOKUP:
        from .drafts.drafter import PromptLookupDrafter

        return PromptLookupDrafter()
    if name in list_ngrams():
        from .drafts.ngram import NGramDrafter, NGramModel

        return NGramDrafter(NGramModel.load(ASSETS / name), name=name)
    if name in cross_drafts():  # a bundled draft with its own tokenizer: bound to the bundled target's
        from .drafts.cross import CrossDrafter

        model, tokenizer = load_model(name, device=device)
        return CrossDrafter(model, tokenizer, load_tokenizer(DEFAULT_TARGET), name=name)
    if base := self_draft_base(name):  # "target@2", "target+eagle": made of the target, the very one loaded
        target = LOADED.get((base, device))
        return self_draft(target if target is not None else load_model(base, device=device)[0], base, name, vocab)
    if name in list_hybrids():
        from .drafts.hybrid import HybridDrafter
        from .drafts.ngram import NGramModel

        model, table, options = HYBRIDS[name]
        return HybridDrafter(NGramModel.load(ASSETS / table), load_drafter(model, device), name=name, **options)
    return load_model(name, device=device)[0]


def trained_folder(name: str) -> Path | None:
    """The folder of a draft trained elsewhere (speculators, midlayer/EAGLE, Medusa layouts: ``drafts.trained``) that
    a name, a local model's name or a path points at; None for anything else."""
    if name in list_models() or name in list_ngrams() or name == PROMPT_LOOKUP or self_draft_base(name):
        return None
    from .drafts.trained.formats import detect

    path = Path(resolve(name)).expanduser()
    return path if path.is_dir() and detect(path) is not None else None


def local_trained_drafts() -> dict[str, str]:
    """The operator's local models (``SPECVIZ_EXTRA_MODELS``) that are trained drafts: name -> their detected format
    in words (they draft for a target; they are not targets)."""
    from .drafts.trained.formats import describe

    return {name: line for name, path in extra_models().items() if (line := describe(path)) is not None}


def resolve(name_or_path: str) -> str:
    """A bundled name becomes its folder; anything else is passed through (hub ID or path)."""
    if not isinstance(name_or_path, str) or not name_or_path.strip():
        raise ValueError(f"model name must be a non-empty string, got {name_or_path!r}")
    bundled = ASSETS / name_or_path
    if (bundled / "config.json").is_file():
        return str(bundled)
    return extra_models().get(name_or_path, name_or_path)  # an operator's local model by its name


def _source(name_or_path: str) -> tuple[str, dict]:
    """(path or ID, from_pretrained options): local folders and, with the hub unreachable, cache only."""
    path = resolve(name_or_path)
    local = Path(path).expanduser().exists()
    offline = not local and not hub_reachable()
    return path, dict(trust_remote_code=False, local_files_only=local or offline)


def _load_error(name: str, e: Exception, offline: bool) -> ValueError:
    bundled = ", ".join(list_models()) or "none built"
    if offline:
        return ValueError(f"could not load {name!r}: it is not a bundled model and the model hub is unreachable "
                          f"from here (offline), nor is it in the local cache. Use a bundled model ({bundled}), "
                          "or run where the hub is reachable")
    detail = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return ValueError(f"could not load {name!r}: it is not a bundled model ({bundled}) "
                      f"and loading it as a hub ID or local path failed: {detail}")


def load_tokenizer(name_or_path: str):
    """The model's tokenizer; a bundled model stored without one uses the family's (``assets/models/tokenizer``)."""
    from transformers import AutoTokenizer

    if (found := gguf.locate(resolve(name_or_path))) is not None:  # a file, or an operator's local model named
        return gguf.tokenizer(*found)  # built once from the file, cached by its hash
    path, options = _source(name_or_path)
    if Path(path).parent == ASSETS and not (Path(path) / "tokenizer.json").is_file():
        path = str(ASSETS / "tokenizer")  # the family shares one tokenizer, stored once
    try:
        return AutoTokenizer.from_pretrained(path, **options)
    except (OSError, ValueError) as e:
        raise _load_error(name_or_path, e, options["local_files_only"] and not Path(path).exists()) from e


def load_model(name_or_path: str, device: str | None = None, dtype=None):
    """Return (model, tokenizer) in eval mode. Bundled names load offline from assets/models; a .gguf file (or a
    folder holding one) loads dequantized with the tokenizer it carries (``runtime.gguf``). On CUDA
    a target too large for the GPU's free memory is spread with device_map="auto" (needs accelerate)."""
    import torch
    from transformers import AutoModelForCausalLM

    from .runtime import int8

    if name_or_path in list_ngrams():
        raise ValueError(f"{name_or_path!r} is an n-gram drafter, not a causal LM: load it with load_drafter")
    if (found := gguf.locate(resolve(name_or_path))) is not None:  # llama.cpp's format, its own tokenizer
        model, tokenizer = gguf.load(*found, torch.float32 if dtype is None else dtype)
        return _ready(model.to(device) if device else model, tokenizer, name_or_path, device)
    tokenizer = load_tokenizer(name_or_path)
    path, options = _source(name_or_path)
    options["dtype"] = default_dtype(device) if dtype is None else dtype
    if (device or "").startswith("cuda") and find_spec("accelerate") and needs_device_map(
            param_count(path), options["dtype"], torch.cuda.mem_get_info()[0]):
        options["device_map"], device = "auto", None
    try:
        if int8.stored(path):  # the bundled family's 8-bit storage: dequantized into an ordinary model
            model = int8.load(path, options["dtype"] if isinstance(options["dtype"], torch.dtype) else torch.float32)
        else:
            model = AutoModelForCausalLM.from_pretrained(path, **options)
    except OSError as e:
        raise _load_error(name_or_path, e, options["local_files_only"] and not Path(path).exists()) from e
    if device:
        model = model.to(device)
    return _ready(model, tokenizer, name_or_path, device)


def _ready(model, tokenizer, name: str | None = None, device: str | None = None):
    model.specviz_vocab = vocab_fingerprint(tokenizer)  # drafts are checked against it (drafts.pairing.check_fits)
    if name is not None:
        LOADED[(name, device)] = model  # its early exits and feature draft share it (load_drafter)
    return model.eval(), tokenizer


def model_folder(name: str) -> Path:
    """Where a bundled model, an operator's local model (``SPECVIZ_EXTRA_MODELS``) or a local path keeps its files:
    exit adapters and feature drafts live there."""
    return ASSETS / name if name in list_models() else Path(extra_models().get(name, name))


def self_draft_base(name: str) -> str | None:
    """The model a draft made of a target is made of: "target" for "target@2" (an early exit) and "target+eagle"
    (a feature draft); None for any other draft."""
    if name in HYBRIDS:  # a hybrid of a feature draft
        return self_draft_base(HYBRIDS[name][0])
    exit_of = early_exit.parse(name)
    return exit_of.base if exit_of else eagle.parse(name)


def self_draft(target, target_name: str, name: str, vocab=None):
    """The early exit (a causal LM sharing the target's weights) or feature draft (a drafter) ``name`` of ``target``,
    a model loaded as ``target_name``, built on that very model."""
    if name in HYBRIDS:
        from .drafts.hybrid import HybridDrafter
        from .drafts.ngram import NGramModel

        model, table, options = HYBRIDS[name]
        return HybridDrafter(NGramModel.load(ASSETS / table), self_draft(target, target_name, model), name=name,
                             **options)
    if exit_of := early_exit.parse(name):
        return early_exit.load_exit(target, model_folder(target_name), exit_of, vocab)
    return eagle.drafter(target, model_folder(target_name), name)



def drafter_for(target, target_name: str, draft_name: str, device: str | None = None):
    """``load_drafter(draft_name)``, except that a draft made of the target (an early exit, a feature draft, its
    hybrid) is built on ``target``, the model loaded as ``target_name``, instead of on a second copy."""
    if self_draft_base(draft_name) == target_name:
        return self_draft(target, target_name, draft_name)
    return load_drafter(draft_name, device)


def load_pair(target_name: str, draft_name: str, device: str | None = None, dtype=None):
    """(target, draft, tokenizer) for a pair. A draft LM whose tokenizer differs from the target's (checked on the
    tokenizers, before its weights load) comes as a ``specviz.drafts.cross.CrossDrafter`` drafting through the target's
    tokenizer. Model-free drafts (prompt lookup, n-grams) need no check."""
    target, tokenizer = load_model(target_name, device, dtype)
    if self_draft_base(draft_name) == target_name:  # built on the very target loaded
        return target, self_draft(target, target_name, draft_name), tokenizer
    if draft_name == PROMPT_LOOKUP or draft_name in list_ngrams():
        return target, load_drafter(draft_name), tokenizer
    if (folder := trained_folder(draft_name)) is not None:  # checked against this target now, before any work
        from .drafts.trained.load import load_trained

        return target, load_trained(folder, target, name=draft_name), tokenizer
    if draft_name in cross_drafts():  # bundled with its own tokenizer
        return target, load_drafter(draft_name, device).for_target(tokenizer), tokenizer
    draft_tokenizer = load_tokenizer(draft_name)
    try:
        check_tokenizers(tokenizer, draft_tokenizer)
    except ValueError:
        from .drafts.cross import drafting_through

        draft = load_model(draft_name, device, dtype)[0]
        return target, drafting_through(draft, draft_tokenizer, tokenizer, draft_name, target_name), tokenizer
    return target, load_model(draft_name, device, dtype)[0], tokenizer


def check_pair(target_name: str, draft_name: str) -> None:
    target_tokenizer, draft_tokenizer = load_tokenizer(target_name), load_tokenizer(draft_name)
    try:
        check_tokenizers(target_tokenizer, draft_tokenizer)
    except ValueError as e:
        raise ValueError(f"{draft_name!r} cannot draft for {target_name!r}: {e}") from None


def model_card(name: str) -> dict:
    """The training log saved beside a bundled model, if any."""
    log = ASSETS / name / "train_log.json"
    return json.loads(log.read_text()) if log.is_file() else {}
