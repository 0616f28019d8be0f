"""Drafters: whatever proposes the next k tokens, a small LM or a model-free rule.

A drafter is a function of the committed context: ``propose(committed, k, generator)``
returns up to k token ids and the distribution q each was drawn from (None for a point mass,
i.e. a deterministic proposal). It keeps whatever cache it likes in step with ``committed``.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .config import DecodeConfig
from .lm import CachedLM, context_window
from .sampling import align_vocab, logits_to_probs, sample


@dataclass(frozen=True)
class Proposal:
    tokens: torch.Tensor  # (m,) m <= k
    q: torch.Tensor | None  # (m, V) the distributions the tokens were drawn from; None = point masses


class Drafter:
    """Base class: model-free drafters override ``propose``; ``start`` resets per-run state."""

    name = "drafter"
    window: int | None = None  # context positions the drafter can use (None: unbounded)

    def start(self, prompt: list[int], cfg: DecodeConfig, vocab_size: int, device) -> None:
        self.cfg, self.vocab_size, self.device = cfg, vocab_size, device

    def prefill(self, prompt: list[int]) -> None:
        """Called once, timed as prefill, before the first round."""

    def propose(self, committed: list[int], k: int, generator: torch.Generator | None) -> Proposal:
        raise NotImplementedError


class ModelDrafter(Drafter):
    """A causal LM drafting autoregressively with its own KV cache: x_i ~ q_i (greedy: argmax)."""

    def __init__(self, model, name: str | None = None):
        self.model = model
        self.name = name or getattr(model.config, "_name_or_path", "") or type(model).__name__
        self.window = context_window(model)

    def start(self, prompt, cfg, vocab_size, device):
        super().start(prompt, cfg, vocab_size, device)
        self.lm = CachedLM(self.model)
        self.n_embed = self.model.get_input_embeddings().weight.shape[0]

    def prefill(self, prompt):
        self.lm.feed(self._visible(prompt))  # its last logits are q_1 of the first round

    def _visible(self, ids: list[int]) -> list[int]:
        """Ids the draft cannot embed (a target's padded vocabulary rows) are shown to it as id 0.
        Any draft context keeps sampling lossless; only the acceptance rate can suffer."""
        if self.n_embed >= self.vocab_size:
            return ids
        return [i if i < self.n_embed else 0 for i in ids]

    def propose(self, committed, k, generator):
        cfg, tokens, qs = self.cfg, [], []
        logits = self.lm.extend(self._visible(committed), [])[-1]
        for i in range(k):
            if i:
                logits = self.lm.feed([tokens[-1]])[-1]
            q = logits_to_probs(align_vocab(logits, self.vocab_size), cfg.temperature, cfg.top_k, cfg.top_p)
            tokens.append(int(q.argmax()) if cfg.greedy else int(sample(q, generator)))
            qs.append(q)
            if q[tokens[-1]] < cfg.draft_stop:  # the draft doubts its own token: verify what it has
                break
        q = torch.stack(qs) if qs else None
        return Proposal(torch.tensor(tokens, dtype=torch.long, device=self.device), q)


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


def lookup_continuation(ids: list[int], k: int, max_ngram: int, min_ngram: int) -> list[int]:
    """Up to k tokens that followed the latest earlier occurrence of ids' last n-gram."""
    if k <= 0:
        return []
    t = torch.tensor(ids)
    for n in range(min(max_ngram, len(ids) - 1), min_ngram - 1, -1):
        windows = t[:-1].unfold(0, n, 1)  # (len-n, n): every n-gram that has a token after it
        hits = (windows == t[-n:]).all(dim=1).nonzero()
        if len(hits):
            start = int(hits[-1]) + n
            return ids[start:start + k]
    return []


def as_drafter(draft) -> Drafter:
    """Accept a Drafter as is, wrap a transformers causal LM."""
    if isinstance(draft, Drafter):
        return draft
    if hasattr(draft, "config") and callable(draft):
        return ModelDrafter(draft)
    raise ValueError(f"draft must be a transformers causal LM or a specviz Drafter, got {type(draft).__name__}")
