"""Early exit: the target drafting for itself with its first L layers, its final norm and its LM head (the self-
speculation of LayerSkip, Elhoushi et al. 2024; transformers' ``assistant_early_exit``). The draft is a causal LM
of its own that shares the target's weights (no copy: zero extra parameters) and keeps its own KV cache, so the
decoder, the trace and the views treat it like any draft. Named "TARGET@L" (``parse``), e.g. "target@2".

An exit adapter (``ADAPTER``: "target@4+adapter") is one more decoder layer after the first L, trained to make the
exit's distribution the full target's (``scripts/train/train_exit_adapter.py``: KL to the target on its own text, the
target frozen). It starts as a copy of layer L + 1, so untrained it is the exit at L + 1; it is the draft's only
weights of its own (``extra_parameters``), saved beside the target as ``exit_adapter_L.safetensors``.

A pruned head (``vocab=``: the token ids the exit may propose, e.g. ``pruned_head.frequent_tokens`` of the target's
own text) scores only those rows of the target's LM head: q is zero outside them and the verify keeps the full
vocabulary, so decoding stays exact while the exit's step reads a fraction of a big vocabulary's head."""
from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import NamedTuple

import torch

from ..runtime.pruned_head import PrunedHead
from .self_drafts import ExitDrafter

ADAPTER = "+adapter"


class Exit(NamedTuple):
    base: str  # the model exited from
    layers: int  # its first ``layers`` decoder layers
    adapter: bool  # then a trained exit adapter layer


def parse(name: str) -> Exit | None:
    """Exit("target", 2, False) for "target@2", Exit("target", 4, True) for "target@4+adapter"; None for a name
    without an exit."""
    name = str(name)
    adapter = name.endswith(ADAPTER)
    base, sep, layers = name.removesuffix(ADAPTER).rpartition("@")
    if not sep or not base or not layers.isdigit():
        return None
    return Exit(base, int(layers), adapter)


def adapter_file(folder: Path, layers: int) -> Path:
    return Path(folder) / f"exit_adapter_{layers}.safetensors"


def exit_names(folder: Path, name: str) -> list[str]:
    """The early exits offered for a bundled model ("target@2"): its first quarter and first half of layers, and
    every exit with a trained adapter saved beside it ("target@4+adapter")."""
    config = Path(folder) / "config.json"
    if not config.is_file():
        return []
    depth = json.loads(config.read_text()).get("num_hidden_layers", 0)
    plain = [f"{name}@{n}" for n in sorted({max(1, depth // 4), max(1, depth // 2)}) if n < depth]
    return plain + [f"{name}@{n}{ADAPTER}" for n in range(1, depth) if adapter_file(folder, n).is_file()]


def early_exit(model, layers: int, adapter: torch.nn.Module | None = None, vocab=None):
    """The model's first ``layers`` decoder layers (then ``adapter``, a decoder layer of its own, if given), final
    norm and LM head as a causal LM sharing the model's weights; with ``vocab`` (token ids), a head of those rows
    only (``PrunedHead``: logits -inf elsewhere)."""
    path, stack_name = _stack(model)
    chain = [model]  # the model, then each module on the way to the stack's owner
    for name in path:
        chain.append(getattr(chain[-1], name))
    stack = getattr(chain[-1], stack_name)
    if not 1 <= layers <= len(stack):
        raise ValueError(f"an early exit needs 1 to {len(stack)} layers of this model, got {layers}")
    twins = [_shallow(m) for m in chain]  # the same modules with their own submodule tables, linked up again
    setattr(twins[-1], stack_name, torch.nn.ModuleList(list(stack)[:layers] + ([adapter] if adapter else [])))
    for parent, name, child in zip(twins, path, twins[1:]):
        setattr(parent, name, child)
    draft = twins[0]
    depth = layers + (adapter is not None)
    cfg = copy.deepcopy(model.config)
    for key in ("num_hidden_layers", "n_layer"):
        if hasattr(cfg, key):
            setattr(cfg, key, depth)
    if getattr(cfg, "layer_types", None):
        cfg.layer_types = (cfg.layer_types + cfg.layer_types[-1:])[:depth]
    for twin in twins:
        if hasattr(twin, "config"):
            twin.config = cfg
    suffix = ADAPTER if adapter is not None else ""
    if vocab is not None:
        head = PrunedHead(model.get_output_embeddings(), vocab)
        draft.set_output_embeddings(head)  # on the twin: the target keeps its own head
        suffix += f" (head of {head.ids.numel()} tokens)"
    cfg._name_or_path = f"{getattr(model.config, '_name_or_path', '') or type(model).__name__}@{layers}{suffix}"
    # what it shares its weights with, kept out of its submodules (``extra_parameters`` counts only the adapter)
    object.__setattr__(draft, "exit_of", model)
    object.__setattr__(draft, "exit_adapter", adapter)
    object.__setattr__(draft, "drafter_class", ExitDrafter)  # as_drafter: drafting in the target's cache
    return draft.eval()


def new_adapter(model, layers: int) -> torch.nn.Module:
    """A fresh exit adapter for the exit at ``layers``: a copy of decoder layer ``layers`` (the next one), so the
    untrained adapter's exit computes the exit at layers + 1."""
    path, stack_name = _stack(model)
    stack = getattr(model.get_submodule(".".join(path)), stack_name)
    if not 1 <= layers < len(stack):
        raise ValueError(f"an exit adapter needs an exit of 1 to {len(stack) - 1} layers, got {layers}")
    adapter = copy.deepcopy(stack[layers])
    if hasattr(getattr(adapter, "self_attn", None), "layer_idx"):
        adapter.self_attn.layer_idx = layers  # its place in the exit's stack (and cache)
    return adapter


def load_exit(model, folder: Path, spec: Exit, vocab=None):
    """The exit a parsed name asks for, with its saved adapter where it has one (and a pruned head, given ``vocab``)."""
    if not spec.adapter:
        return early_exit(model, spec.layers, vocab=vocab)
    from safetensors.torch import load_file

    from ..runtime.int8 import unpack

    path = adapter_file(folder, spec.layers)
    if not path.is_file():
        raise ValueError(f"no exit adapter for {spec.base}@{spec.layers} (expected {path.name}; train one with "
                         "scripts/train/train_exit_adapter.py)")
    adapter = new_adapter(model, spec.layers)
    dtype = next(model.parameters()).dtype
    adapter.load_state_dict(unpack(load_file(str(path)), dtype))  # 8-bit rows or plain tensors
    return early_exit(model, spec.layers, adapter.eval(), vocab=vocab)


def own_parameters(draft) -> list | None:
    """The parameters an early exit holds beside its target: its adapter's (none without one: the rest is the
    target's own); None for any other draft (its own size is all extra)."""
    if getattr(draft, "exit_of", None) is None:
        return None
    adapter = getattr(draft, "exit_adapter", None)
    return [] if adapter is None else list(adapter.parameters())


def extra_parameters(draft) -> int | None:
    """Parameters a draft adds beside its target: for an early exit, its adapter's (0 without one), else None."""
    own = own_parameters(draft)
    return None if own is None else sum(p.numel() for p in own)


STACKS = ((("model",), "layers"),  # Llama, Qwen2, Mistral, Gemma, Phi-3, ...
          (("transformer",), "h"),  # GPT-2, Falcon, BLOOM
          (("gpt_neox",), "layers"),  # GPT-NeoX, Pythia
          (("model", "decoder"), "layers"))  # OPT


def _stack(model) -> tuple[tuple[str, ...], str]:
    """Where the decoder layers live: the attribute path to the module holding them, and the stack's name."""
    for path, name in STACKS:
        owner = model
        for part in path:
            owner = getattr(owner, part, None)
        if isinstance(getattr(owner, name, None), torch.nn.ModuleList):
            return path, name
    raise ValueError(f"{type(model).__name__} has no decoder-layer stack an early exit can cut")


def _shallow(module):
    """A copy of a module that shares its parameters and submodules but has its own submodule table."""
    twin = copy.copy(module)
    twin._modules = dict(module._modules)
    return twin
