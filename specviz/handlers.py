"""What the UI's events do, without gradio: load models once, run a decode as a throttled stream of
traces, summarise a run against its baseline, export and import traces. Errors are ValueErrors with
a message for the user; ``specviz.ui`` turns them into gr.Error."""
from __future__ import annotations

import functools
import os
import tempfile
import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import Callable, Iterator, NamedTuple

import torch

from . import models, theory
from .config import DecodeConfig
from .decoder import Decoding, autoregressive_generate
from .timeline import fill_token_text
from .trace import Trace

STREAM_EVERY_S = 0.25  # faster UI updates freeze the browser (gradio issue 6847)
MAX_PROMPT_CHARS = 4000
CACHE_ENV = "SPECVIZ_MODEL_CACHE_GB"


class ModelStore:
    """Models by name, loaded lazily on first use and shared by every user (a lock guards loading).
    Only listed names load: the bundled family, plus the hub PRESETS or any hub ID as SPECVIZ_ALLOW_MODELS
    says (never a local path from a web form). The cache keeps the most recently used models within
    ``limit_bytes`` of parameters (SPECVIZ_MODEL_CACHE_GB; 8 on CUDA, 16 on CPU by default), on
    ``device`` (SPECVIZ_DEVICE, else CUDA where available, else the CPU).
    Inject the loaders and name lists to run the UI on other models (the tests use tiny ones)."""

    def __init__(self, load_model: Callable | None = None, load_drafter: Callable | None = None,
                 list_targets: Callable | None = None, list_drafters: Callable | None = None,
                 default_target: str = models.DEFAULT_TARGET, default_draft: str = models.DEFAULT_DRAFT,
                 allow: str | None = None, limit_bytes: float | None = None,
                 load_tokenizer: Callable | None = None, device: str | None = None):
        self.allow, self.device = allow or models.allow_policy(), device or models.default_device()
        if load_tokenizer is None and load_drafter is None:  # injected drafters come without the pair check
            load_tokenizer = models.load_tokenizer
        load_model = load_model or functools.partial(models.load_model, device=self.device)
        load_drafter = load_drafter or functools.partial(models.load_drafter, device=self.device)
        hub = self.allow != "bundled"  # the pickers offer the presets; "any" also takes other hub IDs by API

        def targets():
            return models.list_models() + (models.preset_targets() if hub else [])

        def drafts():
            return models.list_drafters() + (models.preset_drafts() if hub else [])

        self.list_targets, self.list_drafters = list_targets or targets, list_drafters or drafts
        self._load_model, self._load_drafter, self._load_tokenizer = load_model, load_drafter, load_tokenizer
        self._default_target, self._default_draft = default_target, default_draft
        self.limit_bytes = cache_limit_bytes() if limit_bytes is None else limit_bytes
        self._cache: OrderedDict[tuple[str, str], tuple[object, int]] = OrderedDict()  # oldest use first
        self._pairs_ok: set[tuple[str, str]] = set()
        self._lock = threading.Lock()

    def default_target(self) -> str | None:
        names = self.list_targets()
        return self._default_target if self._default_target in names else (names[0] if names else None)

    def default_draft(self) -> str | None:
        names = self.list_drafters()
        return self._default_draft if self._default_draft in names else (names[0] if names else None)

    def target(self, name: str):
        """(model, tokenizer) for a listed target name."""
        return self._get("target", name, self.list_targets(), self._load_model)

    def draft(self, name: str):
        """A draft LM or model-free drafter for a listed draft name."""
        return self._get("draft", name, self.list_drafters(), self._load_drafter)

    def pair(self, target: str, draft: str):
        """(target model, tokenizer, drafter); ValueError if a draft LM's tokenizer differs from the target's
        (checked on the tokenizers, before the draft's weights load; remembered once it passes)."""
        model, tok = self.target(target)
        if (self._load_tokenizer and (target, draft) not in self._pairs_ok and draft in self.list_drafters()
                and not _model_free(draft)):
            try:
                models.check_tokenizers(tok, self._load_tokenizer(draft))
            except ValueError as e:
                raise ValueError(f"{draft!r} cannot draft for {target!r}: {e}") from None
            self._pairs_ok.add((target, draft))
        return model, tok, self.draft(draft)

    def cached(self) -> list[tuple[str, str]]:
        """(kind, name) of the models held, least recently used first."""
        return list(self._cache)

    def _get(self, kind: str, name: str, allowed: list[str], load: Callable):
        if name not in allowed and not (self.allow == "any" and models.is_hub_id(name)):
            raise ValueError(f"unknown {kind} {name!r}: choose one of {', '.join(allowed) or '(none available)'}")
        with self._lock:
            if (kind, name) in self._cache:
                self._cache.move_to_end((kind, name))
            else:
                obj = load(name)
                self._cache[(kind, name)] = (obj, param_bytes(obj))
                self._evict()
            return self._cache[(kind, name)][0]

    def _evict(self):
        """Drop least recently used models until the rest fit the limit (the newest always stays)."""
        dropped = False
        while len(self._cache) > 1 and sum(size for _, size in self._cache.values()) > self.limit_bytes:
            self._cache.popitem(last=False)
            dropped = True
        if dropped and torch.cuda.is_available():
            torch.cuda.empty_cache()  # handlers still running keep their own references


def _model_free(draft: str) -> bool:
    return draft == models.PROMPT_LOOKUP or draft in models.list_ngrams()


def param_bytes(obj) -> int:
    """Bytes of parameters and buffers of a module, of a (model, tokenizer) pair's model, else 0."""
    module = obj[0] if isinstance(obj, tuple) else obj
    if not isinstance(module, torch.nn.Module):
        return 0
    return sum(t.numel() * t.element_size() for t in (*module.parameters(), *module.buffers()))


def cache_limit_bytes() -> float:
    """SPECVIZ_MODEL_CACHE_GB (GiB) of parameters, by default 8 on CUDA and 16 on CPU."""
    default = 8 if torch.cuda.is_available() else 16
    try:
        return float(os.environ.get(CACHE_ENV) or default) * 2**30
    except ValueError:
        raise ValueError(f"{CACHE_ENV} must be a number of GiB, got {os.environ[CACHE_ENV]!r}") from None


def make_config(k, k_policy, temperature, top_k, top_p, max_new_tokens, seed, draft_stop=0.0) -> DecodeConfig:
    """A DecodeConfig from form values (sliders and number boxes send floats; integers are wanted)."""
    return DecodeConfig(k=_int(k, "k"), k_policy=k_policy or "fixed", temperature=_float(temperature, "temperature"),
                        top_k=_int(top_k, "top_k"), top_p=_float(top_p, "top_p"),
                        max_new_tokens=_int(max_new_tokens, "max_new_tokens"), seed=_int(seed, "seed"),
                        max_k=max(10, _int(k, "k")), draft_stop=_float(draft_stop or 0.0, "draft_stop"))


def _int(x, name: str) -> int:
    if isinstance(x, float) and x.is_integer():
        return int(x)
    if isinstance(x, int) and not isinstance(x, bool):
        return x
    raise ValueError(f"{name} must be a whole number, got {x!r}")


def _float(x, name: str) -> float:
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        return float(x)
    raise ValueError(f"{name} must be a number, got {x!r}")


def encode(tokenizer, prompt) -> torch.Tensor:
    if not isinstance(prompt, str) or not prompt.strip():
        raise ValueError("the prompt is empty: type some text or pick an example")
    if len(prompt) > MAX_PROMPT_CHARS:
        raise ValueError(f"the prompt is {len(prompt)} characters long; keep it under {MAX_PROMPT_CHARS}")
    return tokenizer(prompt, return_tensors="pt").input_ids


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


def stream_run(store: ModelStore, prompt: str, target: str, draft: str, cfg: DecodeConfig,
               every_s: float = STREAM_EVERY_S, user_drafts: dict | None = None) -> Iterator[Trace]:
    """Speculative decoding as a stream of the growing trace: at most one yield per ``every_s``
    seconds, plus the finished trace. Token texts are filled in as rounds arrive. ``user_drafts``:
    this user's trained drafts, picked by name before the store's."""
    model, tok, drafter = user_pair(store, target, draft, user_drafts)
    run = Decoding(model, drafter, encode(tok, prompt), cfg)
    run.trace.target_name, run.trace.draft_name = target, draft
    last = time.perf_counter()
    for _ in run:
        if time.perf_counter() - last >= every_s:
            last = time.perf_counter()
            yield fill_token_text(run.trace, tok)
    yield fill_token_text(run.trace, tok)


def generate(store: ModelStore, prompt: str, target: str, draft: str, cfg: DecodeConfig,
             user_drafts: dict | None = None) -> Trace:
    """The whole run at once (the API endpoint)."""
    trace = None
    for trace in stream_run(store, prompt, target, draft, cfg, every_s=float("inf"), user_drafts=user_drafts):
        pass
    return trace


def baseline(store: ModelStore, trace: Trace) -> Trace:
    """The autoregressive run with the same target, prompt and settings: the speedup's denominator."""
    model, _ = store.target(trace.target_name)
    base = autoregressive_generate(model, torch.tensor([trace.prompt_ids]), trace.config)
    base.target_name = trace.target_name
    return base


def summary_markdown(trace: Trace | None, base: Trace | None) -> str:
    """Headline numbers, and the measured speedup beside Leviathan's prediction."""
    if trace is None:
        return "*No run yet.*"
    s = trace.summary()
    c, k = theory.cost_ratio(trace), theory.mean_k(trace)
    predicted = theory.expected_speedup(s.alpha, k, c) if trace.mode == "speculative" else 1.0
    measured = theory.measured_speedup(trace, base)
    measured_txt = f"**{measured:.2f}×**" if measured else "*(no baseline: run the models to measure it)*"
    base_txt = f"{base.summary().tokens_per_s:.1f} tokens/s" if base else "–"
    return (
        f"**{s.new_tokens} tokens in {s.rounds} rounds** ({trace.stop_reason or 'running…'}) · "
        f"{trace.target_name or 'target'} ← {trace.draft_name or 'no draft'}\n\n"
        f"| acceptance rate | α (mean β) | τ tokens / round | target forwards / token | tokens/s | baseline |\n"
        f"|---|---|---|---|---|---|\n"
        f"| {s.acceptance_rate:.2f} | {s.alpha:.2f} | {s.tau:.2f} | {s.target_forwards_per_token:.2f} | "
        f"{s.tokens_per_s:.1f} | {base_txt} |\n\n"
        f"**Speedup** measured {measured_txt} (tokens/s against an autoregressive run of the same target and "
        f"settings) · predicted **{predicted:.2f}×** by (1 − α^(k+1)) / ((1 − α)(k c + 1)) with α = {s.alpha:.2f}, "
        f"k = {k:.2f} (mean drafts per round) and c = {c:.3f}, measured in this run as the mean draft time per "
        f"drafted token over the mean target time per round."
    )


def export_trace(trace: Trace | None) -> list[str]:
    """Write the trace as CSV (one row per token) and JSON (the full record) into a fresh temp dir."""
    if trace is None:
        raise ValueError("nothing to export yet: run a prompt or import a trace first")
    folder = Path(tempfile.mkdtemp(prefix="specviz-"))
    csv, js = folder / "trace.csv", folder / "trace.json"
    trace.to_frame().to_csv(csv, index=False)
    js.write_text(trace.to_json())
    return [str(csv), str(js)]


def import_trace(path) -> Trace:
    """Read an uploaded JSON trace; ValueError with a readable reason if it is not one."""
    if not path:
        raise ValueError("no file uploaded")
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"could not read the uploaded file: {e}") from e
    trace = Trace.from_json(text)
    for r in trace.rounds:
        if not len(r.drafted) == len(r.p) == len(r.q) == len(r.u) == len(r.beta) == len(r.accept_prob):
            raise ValueError(f"malformed trace JSON: round {r.index}'s drafted, p, q, u, beta lengths differ "
                             "(traces recorded with record=False cannot be replayed)")
    return trace
