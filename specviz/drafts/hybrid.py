"""The hybrid draft: a lookup of the run's own text and an n-gram table where they are sure (near-free steps), a
model or the feature draft elsewhere, position by position (chains) or node by node (token trees)."""
from __future__ import annotations

import math
from dataclasses import replace
from itertools import groupby

import torch

from ..sampling import point_mass
from ..trees.tree import ROOT
from .drafter import Drafter, ModelDrafter, draft_loop, draft_q
from .ngram import NGramModel


class HybridDrafter(Drafter):
    """Two drafts, position by position: the n-gram where it is confident (its top token has q >= confidence:
    a near-free step) and the model draft elsewhere. The choice reads only the context and the settings, and each
    token is drawn from the q of the draft that proposed it, which is the q verify uses: exact, as for any draft.
    ``greedy_only``: use the n-gram in greedy runs only (a table of the target's greedy text knows its greedy
    continuations, not its sampled distribution: sampled, its q is accepted far less often than the model's).
    ``model_steps``: in the runs that use the n-gram, at most this many of a round's drafts come from the model (then
    the round ends at the n-gram's next unsure step), so k can be large where the n-gram is sure (the target's loops)
    without costing model steps. A run without the n-gram (sampled, with ``greedy_only``) drafts from the model alone,
    up to k: there the cap would leave every k above it the same run (``draft_limit`` says which case applies).
    ``lookup`` >= 1 (chains and trees, in the runs that use the n-gram): before the n-gram, propose what followed the
    latest earlier occurrence in the run's own text of its last ``lookup`` tokens (prompt lookup, a point mass): the
    loops of this very run."""

    def __init__(self, table: NGramModel, model, confidence: float = 0.8, name: str | None = None,
                 greedy_only: bool = True, model_steps: int | None = None, lookup: int = 0):
        if not isinstance(lookup, int) or isinstance(lookup, bool) or lookup < 0:
            raise ValueError(f"lookup must be a whole number of tokens >= 0 (0 = off), got {lookup!r}")
        # a causal LM drafts with its own cache; a drafter with logits (a feature draft) is used as it is
        model_draft = model if isinstance(model, Drafter) else ModelDrafter(model)
        self.table, self.model_draft, self.confidence = table, model_draft, confidence
        if model_draft.own_vocab()[0] is not None and table.vocab_size != model_draft.own_vocab()[0]:
            raise ValueError(f"the hybrid's n-gram has {table.vocab_size:,} tokens and its model draft "
                             f"{model_draft.own_vocab()[0]:,}: both must draft in one vocabulary")
        self.greedy_only, self.model_steps = greedy_only, model_steps  # at most model_steps model drafts a round
        self.lookup, self._seen, self._done, self._last = lookup, {}, 0, None  # the run's grams -> their next token's index
        self.name = name or f"{self.model_draft.name}+ngram"
        self.window = self.model_draft.window
        self._feature = hasattr(self.model_draft, "tree_logits")  # a feature draft: trees a level per pass

    def fresh(self):
        run = super().fresh()
        run.model_draft = self.model_draft.fresh()  # its cache is per run too
        return run

    def attach(self, target):
        self.model_draft.attach(target)

    def own_vocab(self):
        own = self.model_draft.own_vocab()
        return own if own[0] is not None else (self.table.vocab_size, self.table.tokenizer)

    def start(self, prompt, cfg, vocab_size, device):
        super().start(prompt, cfg, vocab_size, device)
        level_trees = cfg.tree is not None and not cfg.tree.chained  # drafted a level per pass (a chain is not)
        if level_trees and not (isinstance(self.model_draft, ModelDrafter) or self._feature):
            raise ValueError(f"{self.name} drafts chains only: its {self.model_draft.name} alone drafts token trees")
        self.model_draft.start(prompt, cfg, vocab_size, device)
        self._seen, self._done = {}, 0

    def prefill(self, prompt):
        self.model_draft.prefill(prompt)

    def propose(self, committed, k, generator):
        history, md = committed[max(0, len(committed) - self.table.order + 1):], self.model_draft
        log_conf = math.log(self.confidence) if self.confidence > 0 else -math.inf

        use_table = self.cfg.greedy or not self.greedy_only
        model_logits, used = None, 0  # the model draft's stepper, made when it is first needed this round
        tree = self.cfg.tree
        siblings = tree is not None and tree.chained and self.cfg.greedy  # a lookup's sibling: the table's choice
        sources, others = [], []

        def next_logits(drafted: list[int]) -> torch.Tensor | None:
            nonlocal model_logits, used
            if use_table:
                if self.lookup and (token := self._lookup(committed, drafted)) is not None:
                    sources.append("lookup")
                    others.append(self.table.log_distribution(history + drafted) if siblings else None)
                    return point_mass(torch.tensor([token], device=self.device), self.vocab_size)[0].log()
                logq = self.table.log_distribution(history + drafted)
                if float(logq.max()) >= log_conf:
                    sources.append("table")
                    others.append(None)
                    return logq.to(self.device)
            if use_table and used == self.model_steps:  # the model's drafts are spent: k caps the near-free ones only
                return None
            used += 1
            model_logits = model_logits or md.stepper(committed)
            sources.append("model")
            others.append(None)
            return model_logits(drafted)  # it feeds what the table drafted before it

        proposal = draft_loop(next_logits, k, self.cfg, self.vocab_size, generator, self.device)
        m = len(proposal.tokens)
        return replace(proposal, sources=tuple(sources[:m]), others=tuple(others[:m]))

    def uses_table(self, temperature: float) -> bool:
        """Whether a run at ``temperature`` drafts from the n-gram (and the lookup) at all: greedy runs, or every run
        where ``greedy_only`` is off."""
        return temperature == 0 or not self.greedy_only

    def _lookup(self, committed: list[int], drafted: list[int]) -> int | None:
        """The token after the latest occurrence in committed of the last ``lookup`` tokens of committed + drafted.
        committed's grams are indexed once (a run's text only grows; another text is indexed anew)."""
        n, done = self.lookup, self._done
        if done > len(committed) or (done and committed[done - 1] != self._last):
            self._seen, done = {}, 0
        for end in range(max(done, n), len(committed)):  # the gram committed[end - n: end], its next token at end
            self._seen[tuple(committed[end - n: end])] = end
        self._done, self._last = len(committed), committed[-1]
        at = self._seen.get(tuple((committed[-n:] + drafted)[-n:]))
        return None if at is None else committed[at]

    # -- token trees: the same choice per node; the model draft sees a node (and the ancestors it has not seen)
    # only when the n-gram is unsure there, all of a level's such nodes in one pass
    def tree_start(self, committed):
        self.contexts = {-1: committed[max(0, len(committed) - self.table.order + 1):]}
        self.parent_of: dict[int, int] = {}
        self.token_of: dict[int, int] = {}
        self.model_draft.fed, self.committed, self.synced = {}, committed, False  # fed: the nodes it has seen
        root = self._table_logq(-1, None)  # the model is asked (and its cache synced) only where the n-gram is unsure
        return draft_q(root if root is not None else self._model_root(), self.cfg, self.vocab_size)

    def _model_root(self) -> torch.Tensor:
        """The model draft's logits after committed: its cache synced to committed (once a round)."""
        md = self.model_draft
        self.synced = True
        if self._feature:
            return md.tree_root_logits(self.committed)
        return md.lm.extend(md.visible(self.committed), [])[-1]

    def tree_expand(self, nodes, tokens, parents):
        rows = {}
        for n, t, parent in zip(nodes, tokens, parents):
            self.contexts[n], self.parent_of[n], self.token_of[n] = self.contexts[parent] + [t], parent, t
            rows[n] = self._table_logq(n, None)
        unsure = [n for n in nodes if rows[n] is None]
        if unsure:
            for n, logits in zip(unsure, self._model_logits(unsure)):
                rows[n] = logits
        return draft_q(torch.stack([rows[n] for n in nodes]), self.cfg, self.vocab_size)

    def tree_end(self, path):
        self.model_draft.tree_end(path)

    def _table_logq(self, node: int, fallback):
        """log q at a node from the lookup (a point mass) or the n-gram where it is confident (greedy runs, unless
        greedy_only is off), else fallback (the model's logits, or None: not computed yet)."""
        if self.cfg.greedy or not self.greedy_only:
            drafted = self.contexts[node][len(self.contexts[ROOT]):]  # the node's path below the root
            if self.lookup and (token := self._lookup(self.committed, drafted)) is not None:
                return point_mass(torch.tensor([token], device=self.device), self.vocab_size)[0].log()
            logq = self.table.log_distribution(self.contexts[node])
            if self.confidence <= 0 or float(logq.max()) >= math.log(self.confidence):
                return logq.to(self.device)
        return fallback

    def _model_logits(self, nodes: list[int]) -> torch.Tensor:
        """The model draft's logits at the given nodes, feeding them and any ancestors it has not seen."""
        md, feed = self.model_draft, []
        if not self.synced:
            self._model_root()
        for n in nodes:
            chain, a = [], n
            while a != -1 and a not in md.fed and a not in feed and a not in chain:
                chain.append(a)
                a = self.parent_of[a]
            feed += reversed(chain)
        feed.sort(key=lambda a: len(self.contexts[a]))  # parents before children
        if self._feature:
            return self._feature_logits(feed, nodes)
        for a in feed:
            md.fed[a] = len(md.fed)
        logits = md.lm.tree_forward([], md.visible([self.token_of[a] for a in feed]),
                                    [md.fed.get(self.parent_of[a], -1) for a in feed])
        return logits[[feed.index(n) for n in nodes]]

    def _feature_logits(self, feed: list[int], nodes: list[int]) -> torch.Tensor:
        """The feature draft's logits at ``nodes``: ``feed`` (they and their ancestors it has not seen, parents
        first) one depth at a time, each level in one pass from its parents' h."""
        md, out = self.model_draft, {}
        for _, group in groupby(feed, key=lambda a: len(self.contexts[a])):
            level = list(group)
            logits = md.tree_logits(level, [self.token_of[a] for a in level], [self.parent_of[a] for a in level])
            out.update(zip(level, logits))
        return torch.stack([out[n] for n in nodes])


def draft_limit(drafter, k: int, temperature: float) -> tuple[int, str]:
    """(the most drafts a chain round of ``drafter`` can make at k and temperature, why): k, except a hybrid with a
    model-step cap in a run that uses its n-gram, where k is reached only by the n-gram's sure steps."""
    if not isinstance(drafter, HybridDrafter) or drafter.model_steps is None or drafter.model_steps >= k:
        return k, f"up to k = {k} drafts a round"
    if not drafter.uses_table(temperature):
        return k, f"up to k = {k} drafts a round, all from {drafter.model_draft.name} (sampled: no n-gram)"
    return k, (f"up to k = {k} drafts a round, at most {drafter.model_steps} of them from {drafter.model_draft.name}: "
               "the rest only where the n-gram is sure")
