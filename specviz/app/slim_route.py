"""The explorer's chains on a Gemma-3 GGUF served by name (``SPECVIZ_EXTRA_MODELS``) run on ``specviz.slim`` over the C
stack (``runtime.gemma_sequence``), the forward of the engine benchmark, with its drafts: prompt lookup and the
feature drafts saved for that model (``slim.FeatureDraft``, offered only where their widths fit the file).

The file's weights are read once per loaded model (a ``GemmaSequence`` kept beside it, dropped with it); each run gets
a twin sequence and a twin draft of its own (their caches, the same weights), so concurrent visitors never share a
cache. A run's trace names its forward (``gemma-c``), and its baseline runs there too. What slim does not run (a token
tree, another accept rule, another draft, an operator's SPECVIZ_FORWARD) takes the torch decoder as before, and a
feature draft of this kind asked for there is refused in words."""
from __future__ import annotations

import json
import os
import threading
import weakref
from dataclasses import replace
from pathlib import Path

from .. import models
from ..config import DecodeConfig, eos_ids
from ..runtime import lm
from ..runtime.gemma_sequence import GemmaSequence
from ..runtime.llamacpp import source
from ..runtime.local import extra_models
from ..runtime.native import gemma as native_gemma
from ..runtime.threads import fixed
from ..slim import FeatureDraft, Lookup, SlimDecoding
from ..slim.feature_draft import CONFIG, FILE, draft_taps, served_settings
from ..trace import Trace

FORWARD = GemmaSequence.forward_name
_SEQUENCES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # loaded model -> (its GemmaSequence, drafts)
_LOCK = threading.Lock()
_WIDTHS: dict[tuple[str, int], int | None] = {}  # (GGUF path, its mtime) -> hidden width


def feature_draft_folders() -> dict[str, Path]:
    """name -> folder of every saved slim feature draft: the bundled ones (``assets/models``) and the operator's local
    models that are one (``SPECVIZ_EXTRA_MODELS``)."""
    found = {p.name: p for p in sorted(models.ASSETS.glob("*")) if (p / CONFIG).is_file() and (p / FILE).is_file()}
    found.update({name: Path(path) for name, path in extra_models().items()
                  if (Path(path) / CONFIG).is_file() and (Path(path) / FILE).is_file()})
    return found


def is_feature_draft(name) -> bool:
    return isinstance(name, str) and name in feature_draft_folders()


def fastest(draft, temperature) -> tuple[int, float, str] | None:
    """(k, stop, where measured) a saved feature draft's config records as its fastest for this temperature's case
    (``served_settings``: greedy at 0, sampled above), or None: another draft, no record, or a record it cannot read
    (the draft itself is checked when a run loads it)."""
    folder = feature_draft_folders().get(draft) if isinstance(draft, str) else None
    try:
        settings = served_settings(folder) if folder is not None else None
    except ValueError:
        return None
    if settings is None:
        return None
    k, stop = settings["greedy" if _number(temperature) == 0 else "sampled"]
    return k, stop, settings["measured"]


def fastest_note(draft, temperature) -> str:
    """The k line's words for ``fastest``: that k and stop for this temperature's case, and where it was measured."""
    found = fastest(draft, temperature)
    if found is None:
        return ""
    case = "greedy" if _number(temperature) == 0 else "sampled"
    return f" · fastest measured {case}: k = {found[0]}, stop below q {found[1]:g} ({found[2]})"


def _number(value) -> float:
    """A temperature as the browser may hold it (a number, its text, or nothing: 0)."""
    try:
        return float(value or 0)
    except (TypeError, ValueError):
        return 0.0


def gguf_gemma(target: str) -> Path | None:
    """The GGUF file the operator's local model ``target`` is, where its header says Gemma-3 and the C stack runs it
    here (AVX-512 VNNI); else None."""
    path = extra_models().get(target)
    if path is None or not native_gemma.available():
        return None
    from ..runtime import gguf

    try:
        found = gguf.locate(path)
    except ValueError:
        return None
    if found is None:
        return None
    file = found[0] / found[1]
    return file if _width(file) is not None else None


def _width(path: Path) -> int | None:
    """A Gemma-3 GGUF's hidden width from its header (read once per version of the file); None for another file."""
    from ..runtime.gguf_header import Header

    key = (str(path), path.stat().st_mtime_ns)
    if key not in _WIDTHS:
        try:
            fields = Header(path).fields
        except (OSError, ValueError):
            fields = {}
        width = fields.get("gemma3.embedding_length") if fields.get("general.architecture") == "gemma3" else None
        _WIDTHS[key] = int(width) if isinstance(width, int) else None
    return _WIDTHS[key]


def drafts_for(target: str) -> list[str]:
    """The feature drafts that fit the operator's Gemma-3 GGUF ``target`` (their features as wide as its hidden
    states; the vocabulary is checked when a run binds one); none for any other target."""
    path = gguf_gemma(target)
    if path is None:
        return []
    width, out = _width(path), []
    for name, folder in feature_draft_folders().items():
        try:
            if json.loads((folder / CONFIG).read_text()).get("hidden_size") == width:
                out.append(name)
        except (OSError, ValueError):
            continue
    return out


def why_not(model, draft: str | None, cfg: DecodeConfig) -> str | None:
    """Why a run does not take the slim route, in words; None where it does: a Gemma-3 loaded quantized from its GGUF
    that the C stack holds here, a chain with Leviathan's rule, no forward named by the operator (SPECVIZ_FORWARD),
    and prompt lookup, a feature draft or none (the baseline)."""
    if cfg.tree is not None or cfg.rule != "leviathan":
        return "the slim route runs chains with Leviathan's accept rule"
    if os.environ.get(lm.PATH_ENV):
        return f"the operator named a forward for every run ({lm.PATH_ENV})"
    if draft not in (None, models.PROMPT_LOOKUP) and not is_feature_draft(draft):
        return "the slim route drafts with prompt lookup or a feature draft"
    path = source(model)
    if path is None or getattr(model.config, "model_type", None) != "gemma3_text" or _width(path) is None:
        return "the target is not a Gemma-3 GGUF loaded quantized"
    if not native_gemma.available():
        return "the C stack's Gemma-3 pass needs AVX-512 VNNI, which this CPU lacks"
    return _kept(model)["refusal"]


def runs_here(model, draft: str | None, cfg: DecodeConfig) -> bool:
    return why_not(model, draft, cfg) is None


def _kept(model) -> dict:
    """The GemmaSequence (and feature drafts) kept for this loaded model, read the first time and shared after; or,
    where the C stack refuses the file, why (remembered: the torch decoder runs it instead)."""
    with _LOCK:
        kept = _SEQUENCES.get(model)
        if kept is None:
            try:
                kept = {"sequence": GemmaSequence.from_gguf(source(model), taps=_taps(model)), "drafts": {},
                        "refusal": None}
            except (ValueError, OSError) as e:
                kept = {"sequence": None, "drafts": {}, "refusal": f"the C stack cannot hold this GGUF: {e}"}
            _SEQUENCES[model] = kept
        return kept


def _taps(model) -> tuple[int, ...]:
    """The layers of this model that the saved feature drafts fuse with its features (a draft's own refusal names a
    layer it lacks, or a config that cannot be read)."""
    layers = int(getattr(model.config, "num_hidden_layers", 0) or 0)
    taps = []
    for folder in feature_draft_folders().values():
        try:
            taps += [t for t in draft_taps(folder) if t < layers]
        except (ValueError, OSError):  # that draft's own load says why
            continue
    return tuple(sorted(set(taps)))


def decoding(model, target: str, draft: str | None, ids: list[int], cfg: DecodeConfig) -> SlimDecoding:
    """A slim run of ``draft`` (None: autoregressive) on a twin of the model's sequence; its trace names the target
    and draft as the form does."""
    kept = _kept(model)
    if kept["refusal"]:
        raise ValueError(kept["refusal"])
    seq = kept["sequence"].twin(threads=fixed())  # the operator's SPECVIZ_THREADS, else the usable CPUs
    drafter = None
    if draft == models.PROMPT_LOOKUP:
        drafter = Lookup()
    elif draft is not None:
        with _LOCK:
            if draft not in kept["drafts"]:
                kept["drafts"][draft] = FeatureDraft(kept["sequence"], feature_draft_folders()[draft], name=draft)
        drafter = kept["drafts"][draft].twin(seq)
    run = SlimDecoding(seq, ids, cfg, drafter, target_name=target, eos=eos_ids(model), forward_name=FORWARD)
    run.trace.draft_name = draft or ""  # as the form names it
    return run


def baseline(model, trace: Trace, cfg: DecodeConfig | None = None) -> Trace:
    """The autoregressive run of a slim trace's target and prompt on the same forward, with its settings (or
    ``cfg``: the app's, its length cut to a run the budget stopped)."""
    cfg = replace(cfg or trace.config, tree=None)
    return decoding(model, trace.target_name, None, list(trace.prompt_ids), cfg).run()


def refusal(draft: str, why: str | None = None) -> str:
    """Why a feature draft of this kind cannot run here, in words: where it runs, and this run's reason if known."""
    return (f"{draft} is a feature draft of a Gemma-3 GGUF that runs on specviz's C stack: pick it in the explorer "
            "(or /generate) with the operator's Gemma-3 GGUF (SPECVIZ_EXTRA_MODELS) as the target, a chain and "
            "Leviathan's accept rule, and no forward named in SPECVIZ_FORWARD" + (f" (here: {why})" if why else ""))
