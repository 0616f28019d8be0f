"""Opening a trained draft: detect its layout, check it against the target, then (only then) read its weights and
build the drafter that runs it. ``load_trained(path)`` without a target gives a ``TrainedDraft`` that does all of
that when a run attaches its target, before the target's first pass."""
from __future__ import annotations

from pathlib import Path

import torch

from ...config import TreeConfig
from ..drafter import Drafter
from .check import Checked, check_trained_draft
from .eagle1 import Eagle1Model
from .eagle3 import Eagle3Drafter, Eagle3Model
from .expect import eagle3_spec, medusa_spec
from .formats import Layout, detect
from .medusa import MedusaDrafter, MedusaHeads
from .tap import FINAL


def read_weights(layout: Layout, like: torch.Tensor) -> dict[str, torch.Tensor]:
    """Every tensor, floats in the target's dtype on its device; ``midlayer.*`` named ``layers.0.*``."""
    from safetensors import safe_open

    out = {}
    for path in sorted(set(layout.files.values())):
        with safe_open(str(path), "pt") as f:
            for name in f.keys():
                t = f.get_tensor(name)
                t = t.to(like.device, like.dtype) if t.dtype.is_floating_point else t.to(like.device)
                out[name.replace("midlayer.", "layers.0.", 1) if name.startswith("midlayer.") else name] = t
    return out


def rotary_for(spec, device):
    """transformers' rotary embedding for the draft layer's config (any rope type it knows)."""
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    skip = {"model_type", "architectures", "transformers_version", "dtype", "torch_dtype"}
    cfg = LlamaConfig(**{k: v for k, v in spec.layer_config.items() if k not in skip})
    cfg.head_dim = spec.head_dim
    return LlamaRotaryEmbedding(cfg).to(device)


def build(checked: Checked, target, name: str) -> Drafter:
    """The drafter of a checked draft, bound to ``target``."""
    layout = checked.layout
    if not checked.runs:
        raise ValueError(f"{layout.folder.name} ({layout.title}) was read and checked, but specviz does not run "
                         "this kind of draft (it runs EAGLE-3, EAGLE-1 / HASS and Medusa heads)")
    like = target.get_output_embeddings().weight
    weights = read_weights(layout, like)
    if layout.kind == "medusa":
        return MedusaDrafter(MedusaHeads(medusa_spec(layout), weights), target, name)
    spec = eagle3_spec(layout)
    embed = weights.get("embed_tokens.weight", target.get_input_embeddings().weight)
    rotary = rotary_for(spec, like.device)
    if layout.kind == "eagle1":
        head = target.get_output_embeddings()
        return Eagle3Drafter(Eagle1Model(spec, weights, embed, rotary, head.weight, head.bias), target, (FINAL,), name)
    layers = target.config.num_hidden_layers
    tapped = spec.tapped or (2, layers // 2, layers - 3)
    return Eagle3Drafter(Eagle3Model(spec, weights, embed, rotary), target, tapped, name)


class TrainedDraft(Drafter):
    """A trained draft folder not yet bound to a target: ``attach`` (each run, before the target's first pass)
    checks it against the run's target and builds its drafter (once per target), which then does the work."""

    def __init__(self, layout: Layout, name: str | None = None):
        self.layout, self.name = layout, name or layout.folder.name
        self._built: dict = {}  # id(target) -> (target, drafter): shared by every run's copy
        self.inner: Drafter | None = None

    def attach(self, target) -> None:
        model = target.model
        entry = self._built.get(id(model))
        if entry is None or entry[0] is not model:
            checked = check_trained_draft(self.layout, model)
            entry = self._built[id(model)] = (model, build(checked, model, self.name))
        self.inner = entry[1].fresh()
        self.inner.attach(target)
        self.window = self.inner.window

    def _bound(self) -> Drafter:
        if self.inner is None:
            raise ValueError(f"{self.name} drafts for the target a run attaches (speculative_generate / Decoding), "
                             "one prompt at a time: not in batches")
        return self.inner

    def start(self, prompt, cfg, vocab_size, device):
        self._bound().start(prompt, cfg, vocab_size, device)

    def propose(self, committed, k, generator):
        return self._bound().propose(committed, k, generator)

    def stepper(self, committed):
        return self._bound().stepper(committed)

    def tree_start(self, committed):
        return self._bound().tree_start(committed)

    def tree_expand(self, nodes, tokens, parents):
        return self._bound().tree_expand(nodes, tokens, parents)

    def tree_end(self, path):
        return self._bound().tree_end(path)


def medusa_tree(path) -> TreeConfig:
    """The token tree a Medusa folder's ``medusa_choices`` describe, as a TreeConfig of ranks (each node the path of
    ranks, one per head, from the root). ValueError where the folder is no Medusa head or names no choices."""
    layout = detect(path)
    if layout is None or layout.kind != "medusa":
        raise ValueError(f"{Path(path).name}: not a Medusa head (medusa_lm_head.safetensors and its config.json)")
    choices = medusa_spec(layout).choices
    if not choices:
        raise ValueError(f"{layout.folder.name}: its config.json names no medusa_choices; give a tree shape instead")
    return TreeConfig(choices=choices)


def load_trained(path, target=None, name: str | None = None) -> Drafter:
    """A trained draft from its folder. With ``target``: checked against it now (a ValueError lists every problem)
    and bound to it; without: a ``TrainedDraft`` checked against each run's target when the run starts."""
    layout = detect(path)
    if layout is None:
        raise ValueError(f"{Path(path).name}: not a trained draft specviz reads (a speculators config.json, a "
                         "midlayer.* or EAGLE checkpoint, or medusa_lm_head.safetensors)")
    if target is None:
        return TrainedDraft(layout, name)
    return build(check_trained_draft(layout, target), target, name or layout.folder.name)
