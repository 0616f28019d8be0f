"""An n-gram draft: token counts from a corpus, smoothed into a real distribution q.

q(w | h) interpolates absolute-discounted counts down to an add-one unigram:
    q_n(w | h) = max(c(h, w) - D, 0) / c(h) + D * N1+(h) / c(h) * q_{n-1}(w | h[1:])
where N1+(h) is the number of distinct words seen after h (Ney et al. 1994); contexts never
seen fall through to the lower order. So q > 0 everywhere and sums to 1: it drives the exact
verify step like any draft model. Counts are stored as sorted sparse keys in safetensors.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from .drafter import Drafter, draft_loop, draft_q

MEMO_SIZE = 65_536  # contexts whose log q an NGramModel keeps (cleared when full)


class NGramModel:
    """Counts of every order 1..n; ``keys[i]`` encodes an (i+1)-gram as a base-V integer, sorted."""

    def __init__(self, vocab_size: int, keys: list[torch.Tensor], counts: list[torch.Tensor], discount: float = 0.75):
        self.vocab_size, self.keys, self.counts, self.discount = vocab_size, keys, counts, discount
        self.order = len(keys)
        self._memo: dict[tuple[int, ...], torch.Tensor] = {}  # log q by context (see log_distribution)
        self._seen: dict[tuple[int, int], tuple | None] = {}  # (n, context code) -> what followed it (``_after``)
        unigram = torch.ones(vocab_size, dtype=torch.float64).index_add_(0, keys[0], counts[0].double())
        self.unigram = unigram / unigram.sum()  # add-one smoothed

    @classmethod
    def fit(cls, tokens: torch.Tensor, vocab_size: int, order: int = 3, min_count: int = 1,
            discount: float = 0.75) -> NGramModel:
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
        """q(. | context), a (V,) float tensor summing to 1: absolute discounting backed off to the add-one unigram,
        q_n = q_{n-1} * m_n + max(c - d, 0) / total over the words seen after the (n-1)-token context (m_n = d *
        distinct / total), unrolled as unigram * prod(m) + each order's additions times the later orders' m: two
        vocabulary-sized operations in all, the rest on the few words seen, each context's counts looked up once
        (a new context mostly ends in shorter ones already seen: 0.03 against 0.2 ms a call, 2026-12-01)."""
        V, found = self.vocab_size, []
        for n in range(2, self.order + 1):
            if len(context) < n - 1:
                break
            h = 0
            for t in context[-(n - 1):]:
                h = h * V + t
            seen = self._seen.get((n, h), False)
            if seen is False:  # not looked up yet: the counts after this (n-1)-token context, or None
                if len(self._seen) >= MEMO_SIZE:
                    self._seen.clear()
                seen = self._seen[(n, h)] = self._after(n, h)
            if seen is not None:
                found.append(seen)
        later, words, mass = 1.0, [], []
        for w, add, m in reversed(found):  # an order's additions are scaled by every later order's m
            words.append(w)
            mass.append(add * later)
            later *= m
        q = self.unigram * later
        if words:
            q.index_add_(0, torch.cat(words), torch.cat(mass))
        return q.float()

    def _after(self, n: int, h: int) -> tuple[torch.Tensor, torch.Tensor, float] | None:
        """The words seen after the (n-1)-token context coded h, max(c - d, 0) / total for each, and m_n."""
        V = self.vocab_size
        lo, hi = torch.searchsorted(self.keys[n - 1], torch.tensor([h * V, (h + 1) * V])).tolist()
        if hi == lo:
            return None  # unseen context: keep the lower order
        c = self.counts[n - 1][lo:hi].double()
        total = float(c.sum())
        return self.keys[n - 1][lo:hi] - h * V, torch.clamp(c - self.discount, min=0) / total, self.discount * (hi - lo) / total

    def save(self, folder: str | Path, **meta) -> None:
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        tensors = {f"keys_{i + 1}": _compact(k, self.vocab_size ** (i + 1)) for i, k in enumerate(self.keys)} | {
            f"counts_{i + 1}": _narrow(c) for i, c in enumerate(self.counts)}
        save_file(tensors, folder / "ngram.safetensors")
        info = {"kind": "ngram", "vocab_size": self.vocab_size, "order": self.order, "discount": self.discount}
        (folder / "ngram.json").write_text(json.dumps(info | meta, indent=1))

    @classmethod
    def load(cls, folder: str | Path) -> NGramModel:
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
