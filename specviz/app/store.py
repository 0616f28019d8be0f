"""The models every user shares (``ModelStore``: loaded once, least recently used dropped first) and each
user's own drafts trained in the distillation lab (``TrainedDraft``, kept in that user's gr.State)."""
from __future__ import annotations

import functools
import os
import threading
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import torch

from .. import models
from ..drafts import eagle, early_exit
from ..drafts.cross import drafting_through
from ..drafts.pairing import vocab_fingerprint
from ..runtime.local import EXTRA_ENV, extra_models
from . import slim_route

CACHE_ENV = "SPECVIZ_MODEL_CACHE_GB"


class ModelStore:
    """Models by name, loaded lazily on first use and shared by every user (a lock guards loading).
    Only listed names load: the bundled family, plus the hub HUB_PRESETS or any hub ID as SPECVIZ_ALLOW_MODELS
    says (never a local path from a web form). The cache keeps the most recently used models within
    ``limit_bytes`` of parameters (SPECVIZ_MODEL_CACHE_GB; 8 on CUDA, 16 on CPU by default), on
    ``device`` (SPECVIZ_DEVICE, else CUDA where available, else the CPU).
    Inject the loaders and name lists to run the UI on other models (the tests use tiny ones)."""

    def __init__(self, load_model: Callable | None = None, load_drafter: Callable | None = None,
                 list_targets: Callable | None = None, list_drafters: Callable | None = None,
                 default_target: str = models.DEFAULT_TARGET, default_draft: str = models.DEFAULT_DRAFT,
                 default_model_draft: str = models.DEFAULT_MODEL_DRAFT,
                 allow: str | None = None, limit_bytes: float | None = None,
                 load_tokenizer: Callable | None = None, device: str | None = None,
                 estimate_bytes: Callable | None = None):
        self.allow, self.device = allow or models.allow_policy(), device or models.default_device()
        if load_tokenizer is None and load_drafter is None:  # injected drafters come without the pair check
            load_tokenizer = models.load_tokenizer
        load_model = load_model or functools.partial(models.load_model, device=self.device)
        load_drafter = load_drafter or functools.partial(models.load_drafter, device=self.device)
        hub = self.allow != "bundled"  # the pickers offer the presets; "any" also takes other hub IDs by API

        def targets():  # the bundled family, the operator's local models (SPECVIZ_EXTRA_MODELS), hub presets
            trained = models.local_trained_drafts()  # drafts trained elsewhere draft for a target: not targets
            local = [name for name in extra_models() if name not in trained and not slim_route.is_feature_draft(name)]
            return models.list_models() + local + (models.preset_targets() if hub else [])

        def drafts():  # the bundled drafts, the early exits of the operator's local models, trained drafts, presets
            trained = models.local_trained_drafts()
            local = [e for name, path in extra_models().items() if name not in trained
                     for e in early_exit.exit_names(Path(path), name)]
            return models.list_drafters() + local + list(trained) + (models.preset_drafts() if hub else [])

        self.list_targets, self.list_drafters = list_targets or targets, list_drafters or drafts
        self._load_model, self._load_drafter, self._load_tokenizer = load_model, load_drafter, load_tokenizer
        self._default_target, self._default_draft = default_target, default_draft
        self._default_model_draft = default_model_draft
        self._estimate = estimate_bytes or functools.partial(load_bytes, device=self.device)
        self.limit_bytes = cache_limit_bytes() if limit_bytes is None else limit_bytes
        self._cache: OrderedDict[tuple[str, str], tuple[object, int]] = OrderedDict()  # oldest use first
        self._pairs_ok: dict[tuple[str, str], object] = {}  # checked pairs: None, or the draft's other tokenizer
        self._digests: dict[str, str | None] = {}  # a target's tokenizer digest, read once (drafts_for)
        self._lock = threading.Lock()

    def default_target(self) -> str | None:
        names = self.list_targets()
        return self._default_target if self._default_target in names else (names[0] if names else None)

    def default_draft(self, model: bool = False) -> str | None:
        """The explorer's default draft; ``model``: the default for what needs a draft model of its own (token
        trees, batches, alpha at fixed contexts), which the default draft (a feature draft) is not. Else the first."""
        names, want = self.list_drafters(), self._default_model_draft if model else self._default_draft
        return want if want in names else (names[0] if names else None)

    def target(self, name: str):
        """(model, tokenizer) for a listed target name."""
        return self._get("target", name, self.list_targets(), self._load_model)

    def draft(self, name: str):
        """A draft LM or model-free drafter for a listed draft name."""
        return self._get("draft", name, self.list_drafters(), self._load_drafter)

    def pair(self, target: str, draft: str):
        """(target model, tokenizer, drafter). A draft LM whose tokenizer differs from the target's (checked on the
        tokenizers, before the draft's weights load; remembered per pair) drafts through the target's tokenizer
        (``specviz.drafts.cross.CrossDrafter``, exact at any temperature); a draft of another tokenizer that is not a
        causal LM is refused with a ValueError."""
        name_of("draft", draft)
        if draft not in self.list_drafters() and slim_route.is_feature_draft(draft):
            raise ValueError(slim_route.refusal(draft))  # no torch drafter: the explorer's slim route runs it
        model, tok = self.target(target)
        local = target in models.list_models() or target in extra_models()
        if models.self_draft_base(draft) == target and local and draft in self.list_drafters():
            # an early exit or feature draft: built on the very model held (shared weights, nothing more loaded)
            return model, tok, models.self_draft(model, target, draft)
        other = None  # the draft's own tokenizer, where it differs from the target's
        # a draft trained elsewhere has no tokenizer: it reads the target's tokens, checked against the run's target
        # (sizes, tapped layers, vocabulary maps) when the run attaches it, before the target's first pass
        trained = draft in models.local_trained_drafts() or draft in models.list_trained()
        if self._load_tokenizer and draft in self.list_drafters() and not model_free(draft) and not trained:
            if (target, draft) not in self._pairs_ok:
                draft_tok = self._load_tokenizer(draft)
                try:
                    models.check_tokenizers(tok, draft_tok)
                    self._pairs_ok[(target, draft)] = None
                except ValueError:
                    self._pairs_ok[(target, draft)] = draft_tok
            other = self._pairs_ok[(target, draft)]
        drafter = self.draft(draft)
        if other is not None:
            drafter = drafting_through(drafter, other, tok, draft, target)
        elif hasattr(drafter, "for_target"):  # a bundled draft with its own tokenizer (cross.py)
            drafter = drafter.for_target(tok)
        return model, tok, drafter

    def drafts_for(self, target: str, slim: bool = False) -> list[str]:
        """The drafts that fit ``target``: every one for a target with the bundled family's tokenizer; for another
        (an operator's local model), those that draft through its tokenizer or read its own tokens (model drafts,
        wrapped as in ``pair``; prompt lookup; its own early exits; ``slim``: for a Gemma-3 GGUF also the feature
        drafts saved for its width, which only the explorer runs, on ``slim_route``), not the family's n-grams,
        hybrids and exits."""
        names = self.list_drafters()
        if target in models.list_models() or self._load_tokenizer is None or target not in self.list_targets():
            return names
        if self._digest(target) == self._digest(models.DEFAULT_TARGET):
            return names
        family = set(models.list_ngrams()) | set(models.list_hybrids())
        return ([d for d in names if d not in family and models.self_draft_base(d) in (None, target)]
                + [d for d in (slim_route.drafts_for(target) if slim else []) if d not in names])

    def _digest(self, name: str) -> str | None:
        if name not in self._digests:
            try:
                self._digests[name] = vocab_fingerprint(self._load_tokenizer(name))
            except ValueError:
                self._digests[name] = None
        return self._digests[name]

    def cached(self) -> list[tuple[str, str]]:
        """(kind, name) of the models held, least recently used first."""
        return list(self._cache)

    def _get(self, kind: str, name: str, allowed: list[str], load: Callable):
        name_of(kind, name)
        if name not in allowed and not (self.allow == "any" and models.is_hub_id(name)):
            raise ValueError(f"unknown {kind} {name!r}: choose one of {', '.join(allowed) or '(none available)'}. "
                             f"This server loads only these; its operator can serve a local model by name with "
                             f"{EXTRA_ENV}=name=PATH, or hub models with {models.ALLOW_ENV}=presets or any")
        with self._lock:
            if (kind, name) in self._cache:
                self._cache.move_to_end((kind, name))
            else:
                need = self._check_size(kind, name)
                self._evict(room=need)  # make room first: the old model goes before the new one loads
                obj = load(name)
                self._cache[(kind, name)] = (obj, param_bytes(obj))
                self._evict()
            return self._cache[(kind, name)][0]

    def _check_size(self, kind: str, name: str) -> int:
        """The bytes a model will take at its load dtype (from its files' metadata, before any weight loads;
        0 if unknown); ValueError if that exceeds the cache limit or the memory this machine has free."""
        need = int(self._estimate(name) or 0)
        held = sum(size for _, size in self._cache.values())
        free = available_bytes() + held  # what is free once every cached model is dropped
        if need > self.limit_bytes or need > free:
            raise ValueError(f"the {kind} {name!r} needs about {need / 2**30:.1f} GiB of memory to load; this server "
                             f"allows {self.limit_bytes / 2**30:.1f} GiB ({CACHE_ENV}) and has about "
                             f"{free / 2**30:.1f} GiB free: pick a smaller model")
        return need

    def _evict(self, room: int = 0):
        """Drop least recently used models until the rest (plus ``room`` for one about to load) fit the limit
        (after a load, the newest always stays)."""
        dropped = False
        while len(self._cache) > (0 if room else 1) and \
                sum(size for _, size in self._cache.values()) + room > self.limit_bytes:
            self._cache.popitem(last=False)
            dropped = True
        if dropped and torch.cuda.is_available():
            torch.cuda.empty_cache()  # handlers still running keep their own references


def name_of(kind: str, name) -> str:
    """A model's name as a form or the API gives it: a string, else a ValueError saying so."""
    if not isinstance(name, str):
        raise ValueError(f"the {kind} must be a model's name (a string), got {type(name).__name__}")
    return name


def model_free(draft: str) -> bool:
    """No tokenizer to check against the target's: model-free drafts, bundled hybrids (their model part is a bundled
    draft: the family shares one tokenizer), early exits and feature drafts of a bundled model (made of the target
    itself), and bundled drafts with their own tokenizer (they draft through the target's: ``specviz.drafts.cross``)."""
    base = models.self_draft_base(draft)
    return (draft == models.PROMPT_LOOKUP or draft in models.list_ngrams() or draft in models.list_hybrids()
            or draft in models.cross_drafts() or base in models.list_models() or base in extra_models())


def param_bytes(obj) -> int:
    """Bytes a module holds (of a (model, tokenizer) pair's model; else 0): each storage of its parameters and
    buffers once (a tied head, or a zero-stride placeholder such as a quantized model's, counts what it holds), and a
    quantized model's matrices (``quantized``: their bytes in the file, the tied table once)."""
    module = obj[0] if isinstance(obj, tuple) else obj
    if not isinstance(module, torch.nn.Module):
        return 0
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes()
                for t in (*module.parameters(), *module.buffers())}
    quantized = getattr(module, "quantized", None)
    if quantized is None:
        return sum(storages.values())
    from ..runtime.quant_gguf import resident_bytes  # only a quantized model's load has imported it

    return sum(storages.values()) + resident_bytes(quantized)


def load_bytes(name: str, device: str | None = None) -> int:
    """Bytes a named model takes once loaded (parameters at the load dtype), from its safetensors metadata: 0 for
    model-free drafts and where the files do not say."""
    if name in models.list_hybrids():  # its model part's (an n-gram's tables are not parameters)
        name = models.HYBRIDS[name][0]
    if early_exit.parse(name) is not None:
        return 0  # the target's own weights, shared
    dtype = models.default_dtype(device)
    size = dtype.itemsize if isinstance(dtype, torch.dtype) else 2
    if (base := eagle.parse(name)) is not None:  # its own layer beside the target's embedding and head
        return eagle.param_count(models.model_folder(base)) * size
    if model_free(name):
        return 0
    count = models.param_count(models.resolve(name))
    return (count or 0) * size


def available_bytes() -> int:
    """Memory this machine has free for a new model: MemAvailable (Linux), else a generous guess."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 2**40


def cache_limit_bytes() -> float:
    """SPECVIZ_MODEL_CACHE_GB (GiB) of parameters, by default 8 on CUDA and 16 on CPU."""
    default = 8 if torch.cuda.is_available() else 16
    try:
        return float(os.environ.get(CACHE_ENV) or default) * 2**30
    except ValueError:
        raise ValueError(f"{CACHE_ENV} must be a number of GiB, got {os.environ[CACHE_ENV]!r}") from None


class TrainedDraft(NamedTuple):
    """A draft one user trained in the distillation lab (kept in that user's gr.State, never shared)."""
    model: object
    target: str  # the target it was trained against: it drafts with that target's tokenizer


def user_pair(store: ModelStore, target: str, draft: str, user_drafts: dict | None = None):
    """(target model, tokenizer, drafter): ``draft`` looked up in this user's trained drafts
    ({name: TrainedDraft}) first, else in the shared store (``store.pair``)."""
    mine = (user_drafts or {}).get(draft) if isinstance(draft, str) else None
    if mine is None:
        return store.pair(target, draft)
    if mine.target != target:
        raise ValueError(f"{draft!r} was trained for target {mine.target!r}, not {target!r}: pick {mine.target!r} "
                         "as the target, or train a draft for this one")
    model, tok = store.target(target)
    return model, tok, mine.model


def draft_choices(store: ModelStore, user_drafts: dict | None = None) -> list[str]:
    """The draft names one user can pick: the store's, then their own trained drafts."""
    names = store.list_drafters()
    return names + [n for n in (user_drafts or {}) if n not in names]
