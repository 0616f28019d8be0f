"""An LM head over part of the vocabulary, for drafts that read a target's head (an early exit): the draft scores
only the tokens the target actually emits (the top 16-32k of its own text, say), and its logits outside them are
-inf, so q is a real distribution over its own support and zero elsewhere. The verify keeps the target's full
vocabulary: a token the draft cannot propose is left to the residual max(0, p - q), so the law stays exact.

At Gemma-3's 262,144 tokens the tied 640 x 262,144 head is most of an early exit's step; a head of 32k rows reads
an eighth of it. The rows are copied once (rows_t, (d, V'), contiguous for ``x @ W_t``): a model trained afterwards
needs its exit built again.
"""
from __future__ import annotations

from collections.abc import Iterable

import torch


class PrunedHead(torch.nn.Module):
    """``head`` restricted to the token ids ``ids``: (..., d) -> logits (..., V) over the full vocabulary, -inf
    outside ids. ``weight`` is the full head's own (shared, not copied), so sizes read off it stay the vocabulary's."""

    def __init__(self, head: torch.nn.Module, ids):
        super().__init__()
        vocab = head.weight.shape[0]
        ids = torch.as_tensor(ids, dtype=torch.long).flatten().unique()  # sorted, no repeats
        if ids.numel() == 0 or int(ids[0]) < 0 or int(ids[-1]) >= vocab:
            raise ValueError(f"a pruned head needs 1 or more token ids in [0, {vocab}); got {ids.numel()} ids "
                             f"from {int(ids[0]) if ids.numel() else None} to {int(ids[-1]) if ids.numel() else None}")
        self.weight = head.weight
        self.vocab_size = vocab
        w = head.weight.detach()
        self.register_buffer("ids", ids.to(w.device), persistent=False)
        self.register_buffer("rows_t", w[self.ids].t().contiguous(), persistent=False)  # (d, V')
        bias = getattr(head, "bias", None)
        self.register_buffer("rows_b", None if bias is None else bias.detach()[self.ids].contiguous(), persistent=False)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        out = h @ self.rows_t
        return scatter(out if self.rows_b is None else out + self.rows_b, self.ids, self.vocab_size)


def scatter(logits: torch.Tensor, ids: torch.Tensor, vocab: int) -> torch.Tensor:
    """Logits over ids (..., V') placed in the full vocabulary (..., V), -inf elsewhere."""
    full = logits.new_full((*logits.shape[:-1], vocab), float("-inf"))
    return full.index_copy_(-1, ids, logits)


def frequent_tokens(texts: Iterable, size: int, vocab: int, always: Iterable[int] = ()) -> torch.Tensor:
    """The ``size`` token ids seen most often in ``texts`` (token id lists or tensors: the target's own greedy text,
    a tokenized corpus), and the ids in ``always`` (EOS, say); sorted. Ties are broken by the lower id."""
    if size < 1:
        raise ValueError(f"a pruned vocabulary needs at least 1 token, got size={size}")
    counts = torch.zeros(vocab, dtype=torch.long)
    for ids in texts:
        ids = torch.as_tensor(ids, dtype=torch.long).flatten()
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= vocab):
            raise ValueError(f"token ids must lie in [0, {vocab}); got {int(ids.min())}..{int(ids.max())}")
        counts += torch.bincount(ids, minlength=vocab)
    seen = int((counts > 0).sum())
    top = torch.argsort(-counts, stable=True)[: min(size, seen)]
    return torch.cat([top, torch.as_tensor(list(always), dtype=torch.long)]).unique()
