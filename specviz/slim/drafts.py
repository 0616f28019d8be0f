"""What slim drafts with: prompt lookup (a point mass q) and a draft model on its own numpy forward (llama.cpp's
sequence of a draft GGUF, say), whose q is its distribution under the target's transforms. Each ``propose`` returns
the drafted tokens and what each was drawn from, (m, V) on the target's vocabulary (None: a point mass at each)."""
from __future__ import annotations

import os

import numpy as np

from ..config import DecodeConfig
from ..drafts.lookup import lookup_continuation
from ..drafts.pairing import PADDING, PADDING_ROWS
from . import sampling as S


def shared_prefix(held: list[int], committed: list[int]) -> int:
    """How many of a draft's cached tokens it keeps: the prefix they share with the committed text, but never the
    last committed token, which is fed again (its output gives the first q)."""
    n = 0
    for a, b in zip(held, committed):
        if a != b:
            break
        n += 1
    return min(n, len(committed) - 1)


class Lookup:
    """Prompt lookup (``specviz.PromptLookupDrafter``'s match, named as it): what followed the latest earlier match of
    the context's last n-gram, n from max_ngram down to min_ngram. Deterministic, so q is a point mass."""

    def __init__(self, max_ngram: int = 3, min_ngram: int = 1):
        if not 1 <= min_ngram <= max_ngram:
            raise ValueError(f"need 1 <= min_ngram <= max_ngram, got min_ngram={min_ngram}, max_ngram={max_ngram}")
        self.max_ngram, self.min_ngram = max_ngram, min_ngram
        self.name = f"prompt-lookup (n={min_ngram}..{max_ngram})"

    def fits(self, vocab: int) -> str | None:
        return None

    def propose(self, committed: list[int], k: int, cfg: DecodeConfig, rng) -> tuple[list[int], None]:
        return lookup_continuation(committed, k, self.max_ngram, self.min_ngram), None


class ModelDraft:
    """A draft model on ``forward`` (``decode``, ``crop``, ``vocab``): each round its cache is rolled back to the
    longest prefix it shares with the committed text, the rest fed in one pass, then k tokens drawn one pass each
    from q (the target's temperature, top-k and top-p; greedy or ``cfg.draft_greedy``: its argmax). Its logits are
    cut or padded with -inf to the target's vocabulary (padded embedding tables), as ``sampling.align_vocab`` does."""

    def __init__(self, forward, name: str | None = None):
        self.fwd = forward
        self.name = name or os.path.basename(str(getattr(forward, "path", ""))) or type(forward).__name__
        self.ids: list[int] = []  # the tokens in the draft's cache
        self.vocab = 0

    def fits(self, vocab: int) -> str | None:
        """Why this draft cannot draft for a target of ``vocab`` tokens (None: it can): tables whose sizes differ by
        more than padding, the rule ``drafts.pairing.check_fits`` applies to torch models."""
        mine = int(self.fwd.vocab)
        if abs(mine - vocab) > max(PADDING * max(mine, vocab), PADDING_ROWS):
            return (f"the draft {self.name!r} has a vocabulary of {mine:,} tokens and the target {vocab:,}: they "
                    "cannot share a tokenizer, so no draft would be accepted")
        self.vocab = vocab
        return None

    def propose(self, committed: list[int], k: int, cfg: DecodeConfig, rng) -> tuple[list[int], np.ndarray | None]:
        logits = self._sync(committed)
        xs, qs = [], []
        for i in range(k):
            q = S.logits_to_probs(logits[None], cfg.temperature, cfg.top_k, cfg.top_p)[0]
            x = int(logits.argmax()) if cfg.greedy or cfg.draft_greedy else S.sample(q, rng)
            xs.append(x)
            qs.append(q)
            if q[x] < cfg.draft_stop or i == k - 1:  # not sure enough to go on (transformers' 0.4 rule), or done
                break
            logits = self._feed([x])
        return xs, (np.stack(qs) if qs else np.zeros((0, self.vocab), dtype=np.float32))

    def _sync(self, committed: list[int]) -> np.ndarray:
        """The draft's cache rolled back to what it shares with ``committed`` and the rest fed: the logits after it."""
        n = shared_prefix(self.ids, committed)
        self.fwd.crop(n)
        del self.ids[n:]
        return self._feed(committed[n:])

    def _feed(self, tokens: list[int]) -> np.ndarray:
        logits = self.fwd.decode(np.asarray(tokens, dtype=np.int32))[-1]
        self.ids += tokens
        extra = self.vocab - logits.shape[-1]
        if extra < 0:
            return np.array(logits[: self.vocab])
        return np.concatenate([logits, np.full(extra, -np.inf, dtype=np.float32)]) if extra else np.array(logits)


class Hybrid:
    """Prompt lookup where the run's own text holds an earlier match of its last n-gram (n >= ``lookup.min_ngram``:
    a near-free proposal, no pass), ``draft`` (a ``ModelDraft`` or ``FeatureDraft``) in the other rounds. Each
    round's tokens come with the q they were drawn from (the lookup's: a point mass), so the rule stays exact.
    ``greedy_only``: the lookup in greedy runs only (sampled, its point mass is accepted with probability p(x), a model
    draft's q far more often). ``used`` counts the rounds each drafted."""

    def __init__(self, lookup: Lookup, draft, greedy_only: bool = True, name: str | None = None):
        if not isinstance(lookup, Lookup) or isinstance(draft, (Lookup, Hybrid)) or not hasattr(draft, "propose"):
            raise ValueError("a slim.Hybrid drafts with a slim.Lookup and a slim.ModelDraft or slim.FeatureDraft")
        self.lookup, self.draft, self.greedy_only = lookup, draft, greedy_only
        self.fwd = getattr(draft, "fwd", None)  # a draft model's forward: its limit is checked as the target's
        self.name = name or f"{draft.name} + {lookup.name}"
        self.used = {"lookup": 0, "draft": 0}

    def fits(self, vocab: int) -> str | None:
        return self.draft.fits(vocab)

    def propose(self, committed: list[int], k: int, cfg: DecodeConfig, rng) -> tuple[list[int], np.ndarray | None]:
        if cfg.greedy or not self.greedy_only:
            xs, _ = self.lookup.propose(committed, k, cfg, rng)
            if xs:
                self.used["lookup"] += 1
                return xs, None
        self.used["draft"] += 1
        return self.draft.propose(committed, k, cfg, rng)
