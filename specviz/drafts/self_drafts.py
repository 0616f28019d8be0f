"""Drafts made of the target itself, reading what its verify pass computed (``Drafter.attach``):

- ``ExitDrafter``: an early exit ("target@L", ``early_exit``) that shares the target's key/value cache for its first
  L layers instead of keeping its own (LayerSkip's cache reuse). Those layers' keys and values for every verified
  token are already in the target's cache, so the exit needs no prefill and holds no cache but its adapter's; it
  writes its drafted tokens' entries past the target's verified slots, where the next verify pass writes the same
  values again.
- ``FeatureDrafter``: the feature draft (``eagle``), whose input is the target's last hidden state at the position
  before, kept by the target's cache (``LeanLlama.keep_features``).

Both need the target on the lean path (``lm.CachedLM`` with ``path == "lean"``). Elsewhere an exit drafts like any
model with its own cache (``shared=False`` asks for that everywhere, to measure one against the other); a feature
draft is refused with a ValueError.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ..runtime.lean_llama import LeanLlama, Weights, head_logits, layer_weights, lean_weights, linear, rms_norm
from ..runtime.lm import CachedLM, common_prefix
from ..runtime.timing import head_clock
from ..runtime.tree_mask import tree_attention
from ..trees.tree import ROOT
from .drafter import Drafter, ModelDrafter, draft_loop, draft_q


def _same_weights(a, b) -> bool:
    """Whether two models are one target loaded twice (same shapes, same embedding and LM head)."""
    ea, eb = a.get_input_embeddings().weight, b.get_input_embeddings().weight
    ha, hb = a.get_output_embeddings().weight, b.get_output_embeddings().weight
    return (a.config.to_dict() == b.config.to_dict() and ea.shape == eb.shape and ea.device == eb.device
            and torch.equal(ea, eb.to(ea.dtype)) and torch.equal(ha, hb.to(ha.dtype)))


class ExitDrafter(ModelDrafter):
    """An early exit of the target (``early_exit.early_exit``) drafting in the target's own cache where it can."""

    def __init__(self, model, name: str | None = None, shared: bool = True):
        super().__init__(model, name)
        self.shared = shared
        self.lean: LeanLlama | None = None
        self.target_lm: CachedLM | None = None

    def attach(self, target: CachedLM) -> None:
        same = getattr(self.model, "exit_of", None) is target.model
        self.target_lm = target if self.shared and same and isinstance(target.cache, LeanLlama) else None

    def start(self, prompt, cfg, vocab_size, device):
        if self.target_lm is None or cfg.tree is not None:  # its own cache, as any draft model
            self.lean = None
            return super().start(prompt, cfg, vocab_size, device)
        Drafter.start(self, prompt, cfg, vocab_size, device)
        self.lean = self.target_lm.cache
        self.own = lean_weights(self.model)  # the target's layers and head (or the exit's pruned head)
        own = self.own.blocks
        self.depth = len(own) - (getattr(self.model, "exit_adapter", None) is not None)  # the target's layers it runs
        self.adapter = own[self.depth:]  # an exit adapter's layer: the exit's only cache of its own, to prefill
        self.adapter_kv = self.lean.kv.new_zeros(len(self.adapter), *self.lean.kv.shape[1:])
        self.ids: list[int] = []

    def prefill(self, prompt):
        if self.lean is None:
            super().prefill(prompt)
        elif self.adapter:  # the target's prefill filled the shared layers; the adapter's cache needs the prompt
            self._reserve(len(prompt))
            self._run(prompt, 0)

    def propose(self, committed, k, generator):
        if self.lean is None:
            return super().propose(committed, k, generator)
        verified = len(committed) - len(self.target_lm.sync(committed))
        own = common_prefix(self.ids, committed) if self.adapter else len(committed)  # what its adapter's cache holds
        start = min(verified, own, len(committed) - 1)
        self._reserve(len(committed) + k)  # before any write: growing keeps only the target's verified slots

        def next_logits(drafted: list[int]) -> torch.Tensor:
            if not drafted:
                return self._run(committed[start:], start)[-1]
            return self._run(drafted[-1:], len(committed) + len(drafted) - 1)[-1]

        return draft_loop(next_logits, k, self.cfg, self.vocab_size, generator, self.device)

    def stepper(self, committed):
        if self.lean is not None:  # its slots are reserved for a round's k drafts before any write (propose)
            raise ValueError(f"{self.name} drafts in the target's cache: not inside a hybrid (give the hybrid the "
                             "exit model: it drafts with its own cache there)")
        return super().stepper(committed)

    @torch.inference_mode()
    def _run(self, tokens: list[int], start: int) -> torch.Tensor:
        """tokens at slots start.. through the target's first layers (their cache) and the adapter; the logits."""
        lean = self.lean
        stack = list(zip(lean.w.blocks[: self.depth], lean.kv[: self.depth])) + list(zip(self.adapter, self.adapter_kv))
        x = F.embedding(torch.tensor(tokens, device=self.device), lean.w.embed)
        x = lean.layers(x, start, stack)
        del self.ids[start:]
        self.ids += tokens
        with head_clock.timing():
            return head_logits(self.own, rms_norm(x, lean.w.norm, lean.eps))

    def _reserve(self, n: int) -> None:
        self.lean.reserve(n)
        if self.adapter_kv.shape[2] < self.lean.capacity:
            grown = self.adapter_kv.new_zeros(*self.adapter_kv.shape[:2], self.lean.capacity, self.adapter_kv.shape[3])
            grown[:, :, : self.adapter_kv.shape[2]] = self.adapter_kv
            self.adapter_kv = grown

    def cache_bytes(self) -> int:
        """Bytes of key/value cache this run's draft holds of its own (the shared layers' are the target's)."""
        if self.lean is not None:
            return self.adapter_kv.numel() * self.adapter_kv.element_size()
        kv = getattr(self.lm.cache, "kv", None)
        return 0 if kv is None else kv.numel() * kv.element_size()


class FeatureDrafter(Drafter):
    """The feature draft (``eagle.FeatureHead``) of one target: q_{t+1} = head(h_t), h_t from fc([f_{t-1}, e(x_t)])
    through its one layer, where f is the target's own normed last hidden state (for positions the target has
    verified) or the draft's h (for the tokens it drafts this round). Each round it feeds again, with their true
    features, the positions it had drafted over, then drafts one position per pass."""

    def __init__(self, head, target, name: str | None = None, vocab=None):
        """``vocab`` (token ids): draft over those rows of the target's LM head only (q zero elsewhere, the verify
        keeps the full vocabulary: exact), as an early exit's pruned head (``runtime.pruned_head``)."""
        self.head = head.to(next(target.parameters()).dtype)  # (in place) the target's dtype
        self.vocab = None if vocab is None else torch.as_tensor(vocab, dtype=torch.long).flatten().unique()
        self._pruned: dict = {}  # "head": (the target's laid-out head it was cut from, the pruned head); shared by runs
        self.target_model = target
        self._laid_out: dict = {}  # fingerprint of the head's parameters -> their lean layout; one dict that every
        # run's copy of this drafter (``fresh``) shares
        self.name = name or "eagle"
        self.window = getattr(target.config, "max_position_embeddings", None)
        self.target_lm: CachedLM | None = None

    def attach(self, target: CachedLM) -> None:
        if target.model is not self.target_model and _same_weights(target.model, self.target_model):
            self.target_model = target.model  # the same target loaded twice: draft for the copy in use
        if target.model is not self.target_model or not hasattr(target.cache, "keep_features"):
            raise ValueError(f"{self.name} drafts from its own target's hidden states: it needs that target "
                             "(a Llama model) on the lean or llama.cpp forward path")
        self.target_lm = target
        target.cache.keep_features()

    def start(self, prompt, cfg, vocab_size, device):
        if self.target_lm is None:
            raise ValueError(f"{self.name} drafts from its target's own passes, one prompt at a time: not in batches")
        super().start(prompt, cfg, vocab_size, device)
        if self.target_lm.cache.features_from > 0:  # the target was fed before attach: feed it again, keeping them
            ids = list(self.target_lm.ids)
            self.target_lm.rollback(0)
            self.target_lm.cache.features_from = 0
            self.target_lm.feed(ids)
        base, (block, self.fc_t) = lean_weights(self.target_model), self._layout()
        own = Weights(base.embed, (block,), self.head.norm.weight.detach(), *self._head(base))
        self.lm = LeanLlama(self.target_model, own)
        self.ids: list[int] = []  # tokens whose entries are in the draft's cache
        self.true = 0  # entries [0, true) were made from the target's features

    def _head(self, base: Weights) -> tuple:
        """(head_t, head_b, head_ids, vocab) of the draft's LM head: the target's, or its rows in ``vocab`` (taken once
        per laid-out target head; runs of one drafter share them)."""
        if self.vocab is None:
            return base.head_t, base.head_b, None, 0
        cached = self._pruned.get("head")
        if cached is None or cached[0] is not base.head_t:
            if int(self.vocab[0]) < 0 or int(self.vocab[-1]) >= base.head_t.shape[1]:
                raise ValueError(f"{self.name}: vocab ids must lie in [0, {base.head_t.shape[1]})")
            ids = self.vocab.to(base.head_t.device)
            bias = None if base.head_b is None else base.head_b[ids].contiguous()
            cached = self._pruned["head"] = (base.head_t, (base.head_t[:, ids].contiguous(), bias, ids,
                                                              base.head_t.shape[1]))
        return cached[1]

    def _layout(self):
        """The head's layer and fc re-laid out for the lean forward, redone only when a parameter changed (as
        ``lean_weights`` does for models): runs of one drafter share them."""
        fingerprint = tuple((p.data_ptr(), p._version) for p in self.head.parameters())
        if fingerprint not in self._laid_out:
            with torch.no_grad():
                layout = layer_weights(self.head.layer), self.head.fc.weight.detach().t().contiguous()
            self._laid_out.clear()
            self._laid_out[fingerprint] = layout
        return self._laid_out[fingerprint]

    def propose(self, committed, k, generator):
        return draft_loop(self.stepper(committed), k, self.cfg, self.vocab_size, generator, self.device)

    def stepper(self, committed):
        """Feeds again the positions with the target's features it lacks, then ``next_logits(drafted)``: one pass per
        drafted token (each input is the draft's own h at the position before, so tokens a hybrid's other draft
        proposed are fed one by one)."""
        h, last, fed = self._catch_up(committed), len(committed) - 1, 0

        def next_logits(drafted: list[int]) -> torch.Tensor:
            nonlocal h, fed
            for i in range(fed, len(drafted)):
                h = self._run(drafted[i: i + 1], last + 1 + i, h[-1:])
            fed = len(drafted)
            return self.last_logits

        return next_logits

    def _catch_up(self, committed: list[int]) -> torch.Tensor:
        """The draft's entries for committed, those the target has verified made from the target's features (the
        positions it had drafted over, fed again); h at committed's last position, (1, d)."""
        target = self.target_lm
        known = min(common_prefix(target.ids, committed), target.cache.length)  # positions with the target's features
        start = min(self.true, common_prefix(self.ids, committed), known, len(committed) - 1)
        last = len(committed) - 1
        upto = min(known, last)  # entries start..upto from true features; beyond, the draft's own h
        features = target.cache.features
        before = features[start - 1: upto] if start else torch.cat([features.new_zeros(1, features.shape[1]),
                                                                     features[:upto]])  # f_{t-1}; none before 0
        h = self._run(committed[start: upto + 1], start, before)
        for i in range(upto + 1, last + 1):  # never in the decoder's rounds; kept for any other caller
            h = self._run([committed[i]], i, h[-1:])
        self.true = upto + 1
        return h[-1:]

    # -- token trees (EAGLE-2's drafting): a level's nodes in one pass of the draft's layer, each from its parent's h
    def tree_start(self, committed):
        return draft_q(self.tree_root_logits(committed), self.cfg, self.vocab_size)

    def tree_expand(self, nodes, tokens, parents):
        return draft_q(self.tree_logits(nodes, tokens, parents), self.cfg, self.vocab_size)

    def tree_root_logits(self, committed) -> torch.Tensor:
        """The draft's logits after committed (its entries caught up), the tree's root; (V,)."""
        self.tree_h = {ROOT: self._catch_up(committed)[0]}  # node -> the draft's h there
        self.tree_at, self.fed, self.fed_parents = len(committed), {}, []  # nodes' slots: tree_at + fed index
        return self.last_logits

    @torch.inference_mode()
    def tree_logits(self, nodes, tokens, parents) -> torch.Tensor:
        """The draft's logits at a level's nodes (n, V), all in one pass, each from its parent's h."""
        first, lm = len(self.fed_parents), self.lm
        for n, parent in zip(nodes, parents):
            self.fed[n] = len(self.fed)
            self.fed_parents.append(self.fed[parent] if parent != ROOT else ROOT)
        start = self.tree_at + first
        positions, visible = None, None  # a lone node under the last one fed, the whole tree a path: a chain step
        if len(nodes) > 1 or any(parent != j - 1 for j, parent in enumerate(self.fed_parents)):
            positions, visible = tree_attention(start, 0, self.fed_parents, first, self.device)
        lm.reserve(start + len(nodes))
        features = torch.stack([self.tree_h[parent] for parent in parents])
        e = F.embedding(torch.tensor(tokens, device=self.device), lm.w.embed)
        x = linear(torch.cat([features.to(e.dtype), e], dim=-1), self.fc_t, None)
        h, logits = lm.through_head(x, start, None, positions, visible)
        lm.length = start + len(nodes)  # a later reserve keeps the tree's entries
        self.tree_h.update(zip(nodes, h))
        return logits

    # tree_end: nothing to keep. The next round feeds the accepted path again from the target's features.

    @torch.inference_mode()
    def _run(self, tokens: list[int], start: int, features: torch.Tensor) -> torch.Tensor:
        """Entries for tokens at positions start.. with the features of the positions before each: their h (n, d);
        ``last_logits``, the draft's logits after the last of them (V,)."""
        lm = self.lm
        lm.length = start
        lm.reserve(start + len(tokens))
        e = F.embedding(torch.tensor(tokens, device=self.device), lm.w.embed)
        x = linear(torch.cat([features.to(e.dtype), e], dim=-1), self.fc_t, None)
        h, logits = lm.through_head(x, start, first=len(tokens) - 1)
        self.last_logits = logits[-1]
        lm.length = start + len(tokens)
        del self.ids[start:]
        self.ids += tokens
        return h
