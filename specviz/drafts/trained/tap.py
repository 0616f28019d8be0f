"""The target's hidden states where a trained draft reads them, for every committed position.

An EAGLE-3 draft reads the input of three of the target's layers (vLLM's ``aux_hidden_state_layers``: the residual
stream entering layer i, transformers' ``hidden_states[i]``); Medusa heads read the final normed one. specviz's lean
forward keeps only the final one (``LeanLlama.keep_features``), so the tap runs the target again, on transformers'
own forward with a cache of its own (``CachedLM`` "dynamic"), over the tokens each round adds, and catches those
tensors with forward hooks. That second pass costs what a target pass over the round's accepted tokens costs: a run
with a tapped draft measures how well the draft drafts, not how fast an engine that keeps the states would go.
"""
from __future__ import annotations

import threading

import torch

from ...runtime.lm import CachedLM
from ..drafter import Drafter

FINAL = -1  # the final normed hidden state (what the LM head reads)


def decoder_layers(model):
    """The target's decoder layers and final norm (a Llama-style ``model.model.layers`` / ``model.model.norm``)."""
    inner = getattr(model, "model", None)
    layers, norm = getattr(inner, "layers", None), getattr(inner, "norm", None)
    if layers is None or norm is None:
        raise ValueError(f"a tapped draft needs a target with model.layers and model.norm (a Llama-style decoder), "
                         f"not {type(model).__name__}")
    return layers, norm


class Tap:
    """``states(ids)``: (len(ids), n * H) the tapped hidden states at every position of ids, concatenated in the
    order of ``layers`` (ids of the target's layers, or FINAL)."""

    def __init__(self, model, layers: tuple[int, ...]):
        self.model, self.layers = model, tuple(layers)
        self.blocks, self.norm = decoder_layers(model)
        self.lm = CachedLM(model, "dynamic")
        self.rows = torch.empty(0, 0)  # (cached positions, n * H)

    def states(self, ids: list[int]) -> torch.Tensor:
        pending = self.lm.sync(ids)
        kept = len(self.lm.ids)
        if pending:
            fresh = self._run(pending)
            self.rows = torch.cat([self.rows[:kept], fresh]) if kept else fresh
        return self.rows[: len(ids)]

    def _run(self, tokens: list[int]) -> torch.Tensor:
        caught: dict[int, torch.Tensor] = {}
        me = threading.get_ident()  # a target shared by several runs: catch this thread's pass only

        def before(index):
            def hook(module, args, kwargs):
                if threading.get_ident() == me:
                    caught[index] = (args[0] if args else kwargs["hidden_states"])[0]
            return hook

        def after(module, args, output):
            if threading.get_ident() == me:
                caught[FINAL] = output[0]

        handles = [self.blocks[i].register_forward_pre_hook(before(i), with_kwargs=True)
                   for i in self.layers if i != FINAL]
        if FINAL in self.layers:
            handles.append(self.norm.register_forward_hook(after))
        try:
            self.lm.feed(tokens)
        finally:
            for h in handles:
                h.remove()
        return torch.cat([caught[i] for i in self.layers], dim=-1)  # (len(tokens), n * H)


class TappedDrafter(Drafter):
    """A trained draft bound to the very target it was checked against (its tapped states come from that model)."""

    def __init__(self, target, name: str):
        self.target_model, self.name = target, name
        self.window = getattr(target.config, "max_position_embeddings", None)

    def attach(self, target) -> None:
        if target.model is not self.target_model:
            raise ValueError(f"{self.name} was checked against another target than this run's: open it for this one")
