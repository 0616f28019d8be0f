"""Drafters: whatever proposes the next k tokens, a small LM or a model-free rule.

A drafter is a function of the committed context: ``propose(committed, k, generator)``
returns up to k token ids and the distribution q each was drawn from (None for a point mass,
i.e. a deterministic proposal). It keeps whatever cache it likes in step with ``committed``.

Every drafter that drafts from a q uses the same loop (``draft_loop``), one ``draft_step`` per token:
q_i from the draft's logits (processed as the target's), x_i ~ q_i (greedy: argmax), and the stop rule:
drafting ends after the first x_i with q_i(x_i) < cfg.draft_stop (transformers' assistant_confidence_threshold).
"""
from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..config import DecodeConfig
from ..records import DraftTokens
from ..runtime.lm import CachedLM, context_window
from ..sampling import align_vocab, logits_to_probs, point_mass, sample
from ..trees.round import check_tree_model
from ..trees.value import SiblingEstimate
from .lookup import lookup_continuation


@dataclass(frozen=True)
class Proposal:
    tokens: torch.Tensor  # (m,) m <= k
    q: torch.Tensor | None  # (m, V) the distributions the tokens were drawn from; None = point masses
    draft_view: DraftTokens | None = None  # a draft with another tokenizer: what it drafted in its own tokens
    sources: tuple[str, ...] = ()  # which of its drafts proposed each token (a hybrid's "lookup", "table", "model")
    others: tuple[torch.Tensor | None, ...] = ()  # per token, a second opinion's log q (V,) at a point mass, or None

    @classmethod
    def of(cls, tokens: list[int], qs: list[torch.Tensor], device) -> Proposal:
        """From the drafted ids and their q rows (V,) each; no tokens: an empty proposal."""
        return cls(torch.tensor(tokens, dtype=torch.long, device=device), torch.stack(qs) if qs else None)

    def q_on(self, vocab_size: int, dtype=torch.float32) -> torch.Tensor:
        """q over the vocabulary, (m, V): the drafted-from distributions as they are (dtype applies only to
        point masses), or onehot(x_i) for a deterministic proposal, which verify then accepts with p(x_i)."""
        return self.q if self.q is not None else point_mass(self.tokens, vocab_size, dtype)


def draft_step(logits: torch.Tensor, cfg: DecodeConfig, vocab_size: int,
               generator: torch.Generator | None) -> tuple[int, torch.Tensor, bool]:
    """One drafted token from the draft's logits (V',): (x, q, go_on). q (V,) is processed by the run's
    temperature / top-k / top-p like the target's p; x = argmax q (greedy, or cfg.draft_greedy) or x ~ q; go_on is
    False once the draft doubts its own token, q(x) < cfg.draft_stop (the stop depends on the draft alone: still
    lossless)."""
    q = draft_q(logits, cfg, vocab_size)
    x = int(q.argmax()) if cfg.greedy or cfg.draft_greedy else int(sample(q, generator))
    return x, q, bool(q[x] >= cfg.draft_stop)


def draft_q(logits: torch.Tensor, cfg: DecodeConfig, vocab_size: int) -> torch.Tensor:
    """q from the draft's logits (..., V'): on the target's vocabulary, processed as the target's p."""
    return logits_to_probs(align_vocab(logits, vocab_size), cfg.temperature, cfg.top_k, cfg.top_p)


def draft_loop(next_logits: Callable[[list[int]], torch.Tensor], k: int, cfg: DecodeConfig, vocab_size: int,
               generator: torch.Generator | None, device) -> Proposal:
    """Up to k tokens x_1, x_2, ... drafted one ``draft_step`` at a time; ``next_logits(drafted)`` is the
    draft's logits for the position after the context and the tokens drafted so far (None: it proposes no more
    this round)."""
    tokens, qs = [], []
    for _ in range(k):
        logits = next_logits(tokens)
        if logits is None:
            break
        x, q, go_on = draft_step(logits, cfg, vocab_size, generator)
        tokens.append(x)
        qs.append(q)
        if not go_on:  # the draft doubts its token: verify what it has
            break
    return Proposal.of(tokens, qs, device)


def draft_view(ids: list[int], n_embed: int, vocab_size: int) -> list[int]:
    """The context as a draft with n_embed embedding rows sees it: ids it cannot embed (rows of a target's
    padded vocabulary) become id 0. Any draft context keeps sampling lossless; only acceptance can suffer."""
    return ids if n_embed >= vocab_size else [i if i < n_embed else 0 for i in ids]


class Drafter:
    """Base class: drafters override ``propose`` (those that draft from a q through ``draft_loop``);
    ``start`` resets per-run state."""

    name = "drafter"
    window: int | None = None  # context positions the drafter can use (None: unbounded)

    def own_vocab(self) -> tuple[int | None, str | None]:
        """(its vocabulary's size, its tokenizer's digest) where this draft has a vocabulary of its own: None where it
        reads the target's tokens (prompt lookup, an exit of the target) or maps its own (``pairing.check_fits``)."""
        return None, None

    def start(self, prompt: list[int], cfg: DecodeConfig, vocab_size: int, device) -> None:
        self.cfg, self.vocab_size, self.device = cfg, vocab_size, device

    def attach(self, target: CachedLM) -> None:
        """Called before ``start`` with the run's target and its cache: a drafter made from the target itself (an
        early exit, a feature draft) may read what the target's passes computed. Others ignore it."""

    def fresh(self) -> Drafter:
        """A copy for one run: the per-run state (settings, caches, a tree's bookkeeping) that ``start`` and the
        rounds set lands on the copy, so runs sharing one drafter (two visitors, two threads) never mix; models and
        tables stay shared (they are only read)."""
        return copy.copy(self)

    def sibling_estimate(self) -> SiblingEstimate:
        """Where this draft's greedy chains are rejected and what a sibling wins there, learnt from the verdicts of
        every greedy run of this drafter (``tree_value.SiblingEstimate``; its per-run copies share it): a 64-token
        run has about a dozen rounds, too few to learn from alone. Only where siblings go depends on it, never the
        greedy text (sampled runs learn within the run, so that a seed replays the same text)."""
        if getattr(self, "_sibling_estimate", None) is None:
            self._sibling_estimate = SiblingEstimate()
        return self._sibling_estimate

    def prefill(self, prompt: list[int]) -> None:
        """Called once, timed as prefill, before the first round."""

    def propose(self, committed: list[int], k: int, generator: torch.Generator | None) -> Proposal:
        raise NotImplementedError

    def stepper(self, committed: list[int]) -> Callable[[list[int]], torch.Tensor]:
        """For drafts with logits: ``next_logits(drafted)``, the draft's logits (V',) after committed + drafted, for
        ``draft_loop`` and for a hybrid, whose other draft may have drafted some of ``drafted`` (those it has not
        seen are fed on the next call). Made once a round, when the draft is first needed."""
        raise ValueError(f"{self.name} has no logits for a hybrid to fall back on")

    # -- token trees (specviz.trees.tree): drafters with a q for any context implement these three --
    def tree_start(self, committed: list[int]) -> torch.Tensor:
        """q at the tree's root (after committed), (V,); the drafter forgets any earlier tree."""
        raise ValueError(f"{self.name} drafts chains only: token trees need a draft model or an n-gram")

    def tree_expand(self, nodes: list[int], tokens: list[int], parents: list[int]) -> torch.Tensor:
        """q after each of the given new nodes, (n, V), all in one pass: node ids as numbered by the tree,
        their tokens and parents (-1: the root; else a node given to an earlier call)."""
        raise NotImplementedError

    def tree_end(self, path: list[int]) -> None:
        """The accepted path (node ids): a drafter with a cache keeps those nodes it has seen."""


class ModelDrafter(Drafter):
    """A causal LM drafting autoregressively with its own KV cache: x_i ~ q_i (greedy: argmax)."""

    def __init__(self, model, name: str | None = None):
        self.model = model
        self.name = name or model_name(model)
        self.window = context_window(model)

    def own_vocab(self):
        return self.model.get_input_embeddings().weight.shape[0], getattr(self.model, "specviz_vocab", None)

    def start(self, prompt, cfg, vocab_size, device):
        super().start(prompt, cfg, vocab_size, device)
        if cfg.tree is not None and not cfg.tree.chained:  # a chain with siblings is drafted as a chain
            check_tree_model(self.model, f"draft {self.name}")
        self.lm = CachedLM(self.model, trees=cfg.tree is not None and not cfg.tree.chained)
        self.n_embed = self.model.get_input_embeddings().weight.shape[0]

    def prefill(self, prompt):
        self.lm.feed(self.visible(prompt))  # its last logits are q_1 of the first round

    def visible(self, ids: list[int]) -> list[int]:
        return draft_view(ids, self.n_embed, self.vocab_size)

    def tree_start(self, committed):
        self.fed: dict[int, int] = {}  # tree node id -> its index among the nodes in the draft's cache
        return draft_q(self.lm.extend(self.visible(committed), [])[-1], self.cfg, self.vocab_size)

    def tree_expand(self, nodes, tokens, parents):
        for n in nodes:
            self.fed[n] = len(self.fed)
        logits = self.lm.tree_forward([], self.visible(tokens), [self.fed.get(p, -1) for p in parents])
        return draft_q(logits, self.cfg, self.vocab_size)

    def tree_end(self, path):
        # every accepted node was fed but perhaps the last (a leaf, whose children nobody drafted)
        self.lm.keep_path([self.fed[n] for n in path if n in self.fed], None)

    def propose(self, committed, k, generator):
        return draft_loop(self.stepper(committed), k, self.cfg, self.vocab_size, generator, self.device)

    def stepper(self, committed):
        logits, fed = self.lm.extend(self.visible(committed), []), 0  # (1, V') after committed

        def next_logits(drafted: list[int]) -> torch.Tensor:  # (V',) after committed + drafted
            nonlocal logits, fed
            if len(drafted) > fed:  # one token it drafted, or several from a hybrid's other draft: one pass
                logits, fed = self.lm.feed(self.visible(drafted[fed:])), len(drafted)
            return logits[-1]

        return next_logits


class PromptLookupDrafter(Drafter):
    """Prompt lookup decoding: propose what followed the latest earlier match of the context's
    last n-gram (n from max_ngram down to min_ngram), as transformers' ``prompt_lookup_num_tokens``
    and vLLM's ngram method. Deterministic, so q is a point mass."""

    def __init__(self, max_ngram: int = 3, min_ngram: int = 1):
        if not 1 <= min_ngram <= max_ngram:
            raise ValueError(f"need 1 <= min_ngram <= max_ngram, got min_ngram={min_ngram}, max_ngram={max_ngram}")
        self.max_ngram, self.min_ngram = max_ngram, min_ngram
        self.name = f"prompt-lookup (n={min_ngram}..{max_ngram})"

    def propose(self, committed, k, generator):
        tokens = lookup_continuation(committed, k, self.max_ngram, self.min_ngram)
        return Proposal(torch.tensor(tokens, dtype=torch.long, device=self.device), None)


def model_name(model) -> str:
    """What a trace calls a transformers model: its hub id or path, else its class name."""
    return getattr(model.config, "_name_or_path", "") or type(model).__name__


def as_drafter(draft) -> Drafter:
    """Accept a Drafter as is, wrap a transformers causal LM."""
    if isinstance(draft, Drafter):
        return draft
    if (own := getattr(draft, "drafter_class", None)) is not None:  # a model that says how it drafts (an exit)
        return own(draft)
    if hasattr(draft, "config") and callable(draft):
        return ModelDrafter(draft)
    raise ValueError(f"draft must be a transformers causal LM or a specviz Drafter, got {type(draft).__name__}")
