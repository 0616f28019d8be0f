"""Medusa heads (Cai et al. 2024) run from FasterDecoding's layout: head i reads the target's final normed hidden
state f at the last position the target has verified and proposes the token i + 1 places after the pending one,
through ``medusa_num_layers`` ResBlocks (x + SiLU(W x + b)) and its own LM head (FasterDecoding/Medusa
``medusa/model/medusa_model.py``, ResBlock and ``MedusaModel.medusa_head``, @60eeab9).

The heads do not see the tokens drafted before theirs, so q_i is one distribution per head whatever was drafted:
a valid proposal law (x_i ~ q_i given the context), so the verify keeps the target's law. In the decoder the
pending token's state is not computed until the verify, so f is the state before it: head 0 drafts the first
token after the pending one, as Medusa's own loop drafts from the state that produced its last accepted token.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ..drafter import draft_loop, draft_q
from .expect import MedusaSpec
from .tap import FINAL, Tap, TappedDrafter


class MedusaHeads:
    """Every head's logits from one hidden state."""

    def __init__(self, spec: MedusaSpec, weights: dict[str, torch.Tensor]):
        self.s, self.w = spec, weights
        self.dtype = weights[f"0.{spec.layers}.weight"].dtype

    def logits(self, f: torch.Tensor) -> torch.Tensor:
        """(heads, V) from f (H,)."""
        rows = []
        for h in range(self.s.heads):
            x = f
            for j in range(self.s.layers):
                x = x + F.silu(F.linear(x, self.w[f"{h}.{j}.linear.weight"], self.w[f"{h}.{j}.linear.bias"]))
            rows.append(F.linear(x, self.w[f"{h}.{self.s.layers}.weight"]))
        return torch.stack(rows)


class MedusaDrafter(TappedDrafter):
    """Medusa heads as a drafter: chains of up to ``heads`` tokens, and token trees whose depth is at most that
    (a node at depth d is drafted from head d, whatever its parent)."""

    def __init__(self, heads: MedusaHeads, target, name: str):
        super().__init__(target, name)
        self.heads = heads

    def start(self, prompt, cfg, vocab_size, device):
        super().start(prompt, cfg, vocab_size, device)
        if cfg.tree is not None and cfg.tree.levels > self.heads.s.heads:
            raise ValueError(f"{self.name} has {self.heads.s.heads} heads: a tree at most {self.heads.s.heads} deep "
                             f"(this one is {cfg.tree.levels})")
        self.tap = Tap(self.target_model, (FINAL,))

    @torch.inference_mode()
    def all_logits(self, committed: list[int]) -> torch.Tensor | None:
        if len(committed) < 2:
            return None
        f = self.tap.states(committed[:-1])[-1]
        return self.heads.logits(f.to(self.heads.dtype))

    def propose(self, committed, k, generator):
        return draft_loop(self.stepper(committed), k, self.cfg, self.vocab_size, generator, self.device)

    def stepper(self, committed):
        logits = self.all_logits(committed)

        def next_logits(drafted: list[int]) -> torch.Tensor | None:
            return None if logits is None or len(drafted) >= len(logits) else logits[len(drafted)]

        return next_logits

    # -- token trees: a node's q is its depth's head, the same for every node at that depth
    def tree_start(self, committed):
        logits = self.all_logits(committed)
        if logits is None:
            raise ValueError(f"{self.name} drafts from the state before the pending token: a prompt of 2 tokens or more")
        self.q_by_depth = draft_q(logits, self.cfg, self.vocab_size)  # (heads, V)
        self.depth = {-1: 0}
        return self.q_by_depth[0]

    def tree_expand(self, nodes, tokens, parents):
        for n, parent in zip(nodes, parents):
            self.depth[n] = self.depth[parent] + 1
        last = len(self.q_by_depth) - 1  # start() keeps trees within the heads: deeper nodes are never expanded
        return self.q_by_depth[[min(self.depth[n], last) for n in nodes]]
