"""Several rows of one causal LM on one padded time axis: what batched decoding (``specviz.batch``) runs its
target and draft model on. The cache is transformers' DynamicCache, append-only: rejected drafts become masked
columns (holes), padding is masked, each row's position ids count its real tokens only."""
from __future__ import annotations

import torch
from transformers import DynamicCache

from .batch_lean import LeanBatchLM, runs_lean
from .batch_rows import Rows
from .lm import cache_kwarg, model_device

PAD = 0  # the id fed at padded columns (always masked out, so any id the model can embed)


class BatchLM(Rows):
    """A causal LM over B rows on one padded time axis. ``ids[b]`` are row b's cached tokens, kept at
    columns ``cols[b]``; ``mask`` (B, T) is 1 exactly at those columns; ``last[b]`` the logits after
    ids[b][-1] (None once a rollback masked columns of row b).

    ``BatchLM(model, rows)`` gives a ``batch_lean.LeanBatchLM`` instead (the same ``Rows`` on the lean forward's C
    layers, as single runs use) where ``batch_lean.runs_lean(model)``; ``forward_name`` says which, as a trace records
    it. ``extend`` and ``sync`` are ``Rows``' (``batch_rows``)."""

    forward_name = "dynamic"  # transformers' forward over a DynamicCache

    def __new__(cls, model, rows: int):
        if cls is BatchLM and runs_lean(model):
            return LeanBatchLM(model, rows)  # not a BatchLM: returned as built, its own __init__ run
        return super().__new__(cls)

    def __init__(self, model, rows: int):
        self.model, self.device = model, model_device(model)
        self.cache = DynamicCache(config=model.config)
        self.mask = torch.zeros(rows, 0, dtype=torch.long, device=self.device)
        self.start_rows(rows)
        self.cols: list[list[int]] = [[] for _ in range(rows)]
        self._cache_kw = cache_kwarg(model)

    def feed(self, chunks: list[list[int]]) -> torch.Tensor | None:
        """Append chunks[b] to row b, right-aligned; logits (B, W, V), W = the longest chunk (None if 0)."""
        width, start = max(map(len, chunks)), self.mask.shape[1]
        if width == 0:
            return None
        B = len(chunks)
        x = torch.full((B, width), PAD, dtype=torch.long)
        new = torch.zeros(B, width, dtype=torch.long)
        pos = torch.zeros(B, width, dtype=torch.long)  # pads get position 0: masked, never read
        for b, chunk in enumerate(chunks):
            if chunk:
                n, lo = len(chunk), width - len(chunk)
                x[b, lo:], new[b, lo:] = torch.tensor(chunk), 1
                pos[b, lo:] = torch.arange(len(self.ids[b]), len(self.ids[b]) + n)  # real tokens before it
                self.ids[b].extend(chunk)
                self.cols[b].extend(range(start + lo, start + width))
        self.mask = torch.cat([self.mask, new.to(self.device)], dim=1)  # (B, T + W)
        with torch.inference_mode():  # (the mask is built outside it: sync edits it in place)
            out = self.model(input_ids=x.to(self.device), attention_mask=self.mask, position_ids=pos.to(self.device),
                             use_cache=True, **{self._cache_kw: self.cache})
        self.cache = getattr(out, "cache", None) or out.past_key_values
        fed = out.logits[new.bool().to(self.device)]
        if fed.isnan().any() or fed.isposinf().any():  # -inf is a token the model rules out (a pruned head's), no fault
            raise ValueError(f"{type(self.model).__name__} returned non-finite logits for a padded batch (an eager "
                             "attention that fully masked padding rows, as Gemma 2's and BLOOM's do): decode its "
                             "prompts one at a time")
        for b, chunk in enumerate(chunks):
            if chunk:
                self.last[b] = out.logits[b, -1]
        return out.logits

    def _forget(self, b: int, keep: int) -> None:
        """Row b keeps its first ``keep`` tokens; the others' columns become holes: kept, masked out forever."""
        self.mask[b, self.cols[b][keep:]] = 0
        del self.ids[b][keep:], self.cols[b][keep:]
        self.last[b] = None

    def keep_rows(self, rows: list[int]) -> None:
        """Keep only these rows (indices of the current rows, in this order); the others leave the batch."""
        if rows == list(range(len(self.ids))):
            return
        index = torch.tensor(rows, dtype=torch.long, device=self.device)
        self.cache.batch_select_indices(index)
        self.mask = self.mask[index]
        self.ids, self.cols = [self.ids[r] for r in rows], [self.cols[r] for r in rows]
        self.last, self._synced = [self.last[r] for r in rows], [self._synced[r] for r in rows]

    def drop_last(self, width: int) -> None:
        """Undo the last ``feed`` of ``width`` tokens to every row (a timed pass, rolled back by the cache's own
        crop); the rows' last logits are forgotten."""
        if width <= 0 or any(len(c) < width or c[-1] != self.mask.shape[1] - 1 for c in self.cols):
            raise ValueError(f"drop_last({width}): every row's last {width} columns must be the newest ones")
        self.cache.crop(-width)
        self.mask = self.mask[:, :-width]
        for b in range(len(self.ids)):
            del self.ids[b][-width:], self.cols[b][-width:]
            self.last[b] = None
            self._synced[b] = min(self._synced[b], len(self.ids[b]))

    def compact(self) -> None:
        """Crop the columns past the furthest column any row still uses (the cache's own crop)."""
        used = max((c[-1] + 1 for c in self.cols if c), default=0)
        drop = self.mask.shape[1] - used
        if drop > 0 and used > 0:
            self.cache.crop(-drop)  # transformers 5: a negative count removes that many positions
            self.mask = self.mask[:, :used]
