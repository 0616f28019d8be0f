"""Early exit: the target drafting for itself with its first L layers, its final norm and its LM head (the self-
speculation of LayerSkip, Elhoushi et al. 2024; transformers' ``assistant_early_exit``). The draft is a causal LM
of its own that shares the target's weights (no copy: zero extra parameters) and keeps its own KV cache, so the
decoder, the trace and the views treat it like any draft. Named "TARGET@L" (``parse``), e.g. "target@2"."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import torch


def parse(name: str) -> tuple[str, int] | None:
    """("target", 2) for "target@2"; None for a name without an exit."""
    base, sep, layers = str(name).rpartition("@")
    if not sep or not base or not layers.isdigit():
        return None
    return base, int(layers)


def exit_names(folder: Path, name: str) -> list[str]:
    """The early exits offered for a bundled model ("target@2"): its first quarter and first half of layers."""
    config = Path(folder) / "config.json"
    if not config.is_file():
        return []
    depth = json.loads(config.read_text()).get("num_hidden_layers", 0)
    return [f"{name}@{n}" for n in sorted({max(1, depth // 4), max(1, depth // 2)}) if n < depth]


def early_exit(model, layers: int):
    """The model's first ``layers`` decoder layers, final norm and LM head as a causal LM sharing its weights."""
    inner_name, stack_name = _stack(model)
    inner = getattr(model, inner_name)
    stack = getattr(inner, stack_name)
    if not 1 <= layers <= len(stack):
        raise ValueError(f"an early exit needs 1 to {len(stack)} layers of this model, got {layers}")
    draft = _shallow(model)
    draft_inner = _shallow(inner)
    setattr(draft_inner, stack_name, torch.nn.ModuleList(list(stack)[:layers]))
    setattr(draft, inner_name, draft_inner)
    cfg = copy.deepcopy(model.config)
    for key in ("num_hidden_layers", "n_layer"):
        if hasattr(cfg, key):
            setattr(cfg, key, layers)
    if getattr(cfg, "layer_types", None):
        cfg.layer_types = cfg.layer_types[:layers]
    draft.config = draft_inner.config = cfg
    cfg._name_or_path = f"{getattr(model.config, '_name_or_path', '') or type(model).__name__}@{layers}"
    # what it shares its weights with, kept out of its submodules (``extra_parameters`` counts none of them)
    object.__setattr__(draft, "exit_of", model)
    return draft.eval()


def extra_parameters(draft) -> int | None:
    """Parameters a draft adds beside its target: 0 for an early exit (it is the target's own), else None
    (the draft's own size is all extra)."""
    return 0 if getattr(draft, "exit_of", None) is not None else None


def _stack(model) -> tuple[str, str]:
    """Where the decoder layers live: model.model.layers (Llama, Qwen2, Mistral, ...) or model.transformer.h (GPT-2)."""
    if hasattr(model, "model") and hasattr(model.model, "layers"):
        return "model", "layers"
    if hasattr(model, "transformer") and hasattr(model.transformer, "h"):
        return "transformer", "h"
    raise ValueError(f"{type(model).__name__} has no decoder-layer stack an early exit can cut")


def _shallow(module):
    """A copy of a module that shares its parameters and submodules but has its own submodule table."""
    twin = copy.copy(module)
    twin._modules = dict(module._modules)
    return twin
