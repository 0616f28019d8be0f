"""What a batch's rows share whatever cache holds them (``batch_lm.BatchLM``: transformers' DynamicCache;
``batch_lean.LeanBatchLM``: the lean forward's C layers): each row's cached ``ids``, the logits after its last one
(``last``), how far it is known to match its committed sequence, and the two steps built on a cache's ``feed`` and
``_forget``: ``extend`` (every row's missing tokens in ONE forward) and ``sync`` (roll a row back to its committed
prefix)."""
from __future__ import annotations

import torch


class Rows:
    """B rows of one model. A subclass keeps the cache: ``feed(chunks)`` appends chunks[b] to row b and returns the
    logits (B, W, V), right-aligned (None if every chunk is empty); ``_forget(b, keep)`` drops row b's tokens past
    ``keep`` from what it attends to."""

    forward_name = ""

    def start_rows(self, rows: int) -> None:
        self.ids: list[list[int]] = [[] for _ in range(rows)]
        self.last: list[torch.Tensor | None] = [None] * rows  # the logits after ids[b][-1] (None after a rollback)
        self._synced = [0] * rows  # ids[b][:_synced[b]] are known to match row b's committed sequence

    def feed(self, chunks: list[list[int]]) -> torch.Tensor | None:
        raise NotImplementedError

    def _forget(self, b: int, keep: int) -> None:
        raise NotImplementedError

    def extend(self, rows: list[tuple[list[int], list[int]] | None]) -> list[torch.Tensor | None]:
        """Per row, (committed, new) or None to leave the row out: the logits after committed[-1] and after
        each of new, (1 + len(new), V). Every row's missing tokens go through ONE batched forward."""
        pending = [None if r is None else self.sync(b, r[0]) for b, r in enumerate(rows)]
        kept = list(self.last)  # the logits after each row's cached tokens, before this forward
        chunks = [[] if r is None else p + r[1] for p, r in zip(pending, rows)]
        logits = self.feed(chunks)
        out = []
        for b, (p, chunk) in enumerate(zip(pending, chunks)):
            fed = logits[b, logits.shape[1] - len(chunk):] if chunk else None
            if p is None:
                out.append(None)
            elif p:
                out.append(fed[len(p) - 1:])
            else:
                out.append(kept[b][None] if fed is None else torch.cat([kept[b][None], fed]))
        return out

    def sync(self, b: int, committed: list[int]) -> list[int]:
        """Mask out row b's cached tokens past its longest prefix shared with ``committed``; return the
        pending tokens: empty only when row b holds exactly committed and its last logits are kept,
        otherwise at least committed[-1], whose logits the next step needs (as ``CachedLM.sync``)."""
        ids = self.ids[b]
        limit = min(len(ids), len(committed))
        keep = min(self._synced[b], limit)  # committed only grows, so the old agreement stands
        while keep < limit and ids[keep] == committed[keep]:
            keep += 1
        if keep == len(committed) and (keep < len(ids) or self.last[b] is None):
            keep -= 1  # the logits after committed[-1] are not kept: feed it again
        if keep < len(ids):
            self._forget(b, keep)
        self._synced[b] = keep
        return committed[keep:]
