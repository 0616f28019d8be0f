"""An n-gram draft: token counts from a corpus, smoothed into a real distribution q.

q(w | h) interpolates absolute-discounted counts down to an add-one unigram:
    q_n(w | h) = max(c(h, w) - D, 0) / c(h) + D * N1+(h) / c(h) * q_{n-1}(w | h[1:])
where N1+(h) is the number of distinct words seen after h (Ney et al. 1994); contexts never
seen fall through to the lower order. So q > 0 everywhere and sums to 1: it drives the exact
verify step like any draft model. Counts are stored as sorted sparse keys in safetensors.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from .drafters import Drafter, ModelDrafter, draft_loop, draft_q
from .sampling import point_mass


MEMO_SIZE = 65_536  # contexts whose log q an NGramModel keeps (cleared when full)


class NGramModel:
    """Counts of every order 1..n; ``keys[i]`` encodes an (i+1)-gram as a base-V integer, sorted."""

    def __init__(self, vocab_size: int, keys: list[torch.Tensor], counts: list[torch.Tensor], discount: float = 0.75):
        self.vocab_size, self.keys, self.counts, self.discount = vocab_size, keys, counts, discount
        self.order = len(keys)
        self._memo: dict[tuple[int, ...], torch.Tensor] = {}  # log q by context (see log_distribution)
        unigram = torch.ones(vocab_size, dtype=torch.float64).index_add_(0, keys[0], counts[0].double())
        self.unigram = unigram / unigram.sum()  # add-one smoothed

    @classmethod
    def fit(cls, tokens: torch.Tensor, vocab_size: int, order: int = 3, min_count: int = 1,
            discount: float = 0.75) -> "NGramModel":
        """tokens: 1-D LongTensor of the whole corpus; n-grams (n >= 2) seen < min_count times are pruned."""
        if order < 1:
            raise ValueError(f"order must be >= 1, got {order}")
        keys, counts = [], []
        for n in range(1, order + 1):
            grams = tokens.unfold(0, n, 1).long()  # (N - n + 1, n)
            code = torch.zeros(len(grams), dtype=torch.long)
            for j in range(n):
                code = code * vocab_size + grams[:, j]
            k, c = torch.unique(code, sorted=True, return_counts=True)
            if n > 1 and min_count > 1:
                k, c = k[c >= min_count], c[c >= min_count]
            keys.append(k)
            counts.append(c.to(torch.int32))
        return cls(vocab_size, keys, counts, discount)

    def log_distribution(self, context: list[int]) -> torch.Tensor:
        """log q(. | context), (V,) float32, memoised on the last order - 1 tokens (all that q reads): drafting
        meets the same contexts again and again (the target's loops), so most steps cost a dict lookup."""
        key = tuple(context[len(context) - self.order + 1:]) if self.order > 1 else ()
        logq = self._memo.get(key)
        if logq is None:
            if len(self._memo) >= MEMO_SIZE:
                self._memo.clear()
            logq = self._memo[key] = self.distribution(context).log()
        return logq

    def distribution(self, context: list[int]) -> torch.Tensor:
        """q(. | context), a (V,) float tensor summing to 1."""
        V, q = self.vocab_size, self.unigram
        for n in range(2, self.order + 1):
            if len(context) < n - 1:
                break
            h = 0
            for t in context[-(n - 1):]:
                h = h * V + t
            lo, hi = torch.searchsorted(self.keys[n - 1], torch.tensor([h * V, (h + 1) * V]))
            if hi == lo:
                continue  # unseen context: keep the lower order
            words = self.keys[n - 1][lo:hi] - h * V
            c = self.counts[n - 1][lo:hi].double()
            total, distinct = c.sum(), len(c)
            q = q * (self.discount * distinct / total)
            q.index_add_(0, words, torch.clamp(c - self.discount, min=0) / total)
        return q.float()

    def save(self, folder: str | Path, **meta) -> None:
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        tensors = {f"keys_{i + 1}": _compact(k, self.vocab_size ** (i + 1)) for i, k in enumerate(self.keys)} | {
            f"counts_{i + 1}": _narrow(c) for i, c in enumerate(self.counts)}
        save_file(tensors, folder / "ngram.safetensors")
        info = {"kind": "ngram", "vocab_size": self.vocab_size, "order": self.order, "discount": self.discount}
        (folder / "ngram.json").write_text(json.dumps(info | meta, indent=1))

    @classmethod
    def load(cls, folder: str | Path) -> "NGramModel":
        folder = Path(folder)
        info = json.loads((folder / "ngram.json").read_text())
        t = load_file(folder / "ngram.safetensors")
        order = info["order"]
        keys = [t[f"keys_{n}"].long() for n in range(1, order + 1)]
        counts = [t[f"counts_{n}"].int() for n in range(1, order + 1)]
        return cls(info["vocab_size"], keys, counts, info["discount"])


class NGramDrafter(Drafter):
    """Drafts x_i ~ q_i from an NGramModel, q processed by the run's temperature / top-k / top-p like any draft."""

    def __init__(self, model: NGramModel, name: str = "ngram"):
        self.model, self.name = model, name

    def propose(self, committed, k, generator):
        history = committed[max(0, len(committed) - self.model.order + 1):]  # all that q(. | h) reads

        def next_logits(drafted: list[int]) -> torch.Tensor:  # log q(. | history + drafted), (V,)
            return self.model.log_distribution(history + drafted).to(self.device)

        return draft_loop(next_logits, k, self.cfg, self.vocab_size, generator, self.device)

    def tree_start(self, committed):
        self.contexts = {-1: committed[max(0, len(committed) - self.model.order + 1):]}
        return draft_q(self.model.log_distribution(self.contexts[-1]).to(self.device), self.cfg, self.vocab_size)

    def tree_expand(self, nodes, tokens, parents):
        rows = []
        for n, t, parent in zip(nodes, tokens, parents):
            self.contexts[n] = self.contexts[parent] + [t]
            rows.append(self.model.log_distribution(self.contexts[n]).to(self.device))
        return draft_q(torch.stack(rows), self.cfg, self.vocab_size)


def _compact(keys: torch.Tensor, span: int) -> torch.Tensor:
    """int32 storage where every key fits (it halves the file), int64 otherwise."""
    return keys.int() if span < 2**31 else keys


def _narrow(counts: torch.Tensor) -> torch.Tensor:
    """16-bit storage where every count fits (most n-grams are seen a few times), int32 otherwise."""
    top = int(counts.max()) if counts.numel() else 0
    return counts.short() if top < 2**15 else counts.to(torch.uint16) if top < 2**16 else counts.int()


class HybridDrafter(Drafter):
    """Two drafts, position by position: the n-gram where it is confident (its top token has q >= confidence:
    a near-free step) and the model draft elsewhere. The choice reads only the context and the settings, and each
    token is drawn from the q of the draft that proposed it, which is the q verify uses: exact, as for any draft.
    ``greedy_only``: use the n-gram in greedy runs only (a table of the target's greedy text knows its greedy
    continuations, not its sampled distribution: sampled, its q is accepted far less often than the model's).
    ``model_steps``: at most this many of a round's drafts come from the model (then the round ends at the n-gram's
    next unsure step), so k can be large where the n-gram is sure (the target's loops) without costing model steps.
    ``lookup`` >= 1 (chains, in the runs that use the n-gram): before the n-gram, propose what followed the latest
    earlier occurrence in the run's own text of its last ``lookup`` tokens (prompt lookup, a point mass): the loops
    of this very run."""

    def __init__(self, table: NGramModel, model, confidence: float = 0.8, name: str | None = None,
                 greedy_only: bool = True, model_steps: int | None = None, lookup: int = 0):
        if not isinstance(lookup, int) or isinstance(lookup, bool) or lookup < 0:
            raise ValueError(f"lookup must be a whole number of tokens >= 0 (0 = off), got {lookup!r}")
        # a causal LM drafts with its own cache; a drafter with logits (a feature draft) is used as it is
        model_draft = model if isinstance(model, Drafter) else ModelDrafter(model)
        self.table, self.model_draft, self.confidence = table, model_draft, confidence
        self.greedy_only, self.model_steps = greedy_only, model_steps  # at most model_steps model drafts a round
        self.lookup, self._seen, self._done, self._last = lookup, {}, 0, None  # the run's grams -> their next token's index
        self.name = name or f"{self.model_draft.name}+ngram"
        self.window = self.model_draft.window

    def fresh(self):
        run = super().fresh()
        run.model_draft = self.model_draft.fresh()  # its cache is per run too
        return run

    def attach(self, target):
        self.model_draft.attach(target)

    def start(self, prompt, cfg, vocab_size, device):
        super().start(prompt, cfg, vocab_size, device)
        if cfg.tree is not None and not isinstance(self.model_draft, ModelDrafter):
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

        def next_logits(drafted: list[int]) -> torch.Tensor | None:
            nonlocal model_logits, used
            if use_table:
                if self.lookup and (token := self._lookup(committed, drafted)) is not None:
                    return point_mass(torch.tensor([token], device=self.device), self.vocab_size)[0].log()
                logq = self.table.log_distribution(history + drafted)
                if float(logq.max()) >= log_conf:
                    return logq.to(self.device)
            if used == self.model_steps:  # the round's model drafts are spent: k caps the near-free ones only
                return None
            used += 1
            model_logits = model_logits or md.stepper(committed)
            return model_logits(drafted)  # it feeds what the table drafted before it

        return draft_loop(next_logits, k, self.cfg, self.vocab_size, generator, self.device)

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
        self.model_draft.fed, self.committed, self.synced = {}, committed, False
        root = self._table_logq(-1, None)  # the model is asked (and its cache synced) only where the n-gram is unsure
        return draft_q(root if root is not None else self._model_root(), self.cfg, self.vocab_size)

    def _model_root(self) -> torch.Tensor:
        """The model draft's logits after committed: its cache synced to committed (once a round)."""
        md = self.model_draft
        self.synced = True
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
        """log q of the n-gram at a node where it is confident (greedy runs, unless greedy_only is off), else
        fallback (the model's logits, or None: not computed yet)."""
        if self.cfg.greedy or not self.greedy_only:
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
        for a in feed:
            md.fed[a] = len(md.fed)
        logits = md.lm.tree_forward([], md.visible([self.token_of[a] for a in feed]),
                                    [md.fed.get(self.parent_of[a], -1) for a in feed])
        return logits[[feed.index(n) for n in nodes]]
