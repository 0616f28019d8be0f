"""Several rows of one Llama-family model on the lean forward's C layers (``native.layers_rows``): what batched
decoding runs on where the lean forward does for single runs, behind ``BatchLM``'s interface (``BatchLM(model, rows)``
gives one where ``runs_lean(model)``).

The cache is one pre-allocated block per layer, (2 nkv, B x capacity, hd): row b owns slots [b cap, (b + 1) cap),
its i-th cached token at slot b cap + i with position i. A forward hands every row's new tokens to ONE C call (no
padding computed: row b's tokens attend to its own slots only, causally), so ragged rows cost their real tokens.
Rollback is overwrite-by-position, as in ``LeanLlama``: a row's rejected drafts are forgotten by shortening the row,
and its next tokens overwrite their slots (no holes, nothing masked). The C stack computes each row with the same
arithmetic alone or among others, so a row's logits are the bits its single-prompt lean run gives.

Runs where ``runs_lean(model)``: a model ``lean_llama`` supports, float32 on the CPU, its layers built for C, and the
default forward not set to transformers' ("dynamic"); elsewhere ``BatchLM`` stays on transformers'
DynamicCache.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from . import lean_llama, native
from .batch_rows import Rows
from .lean_common import rope_for
from .lm import default_path
from .pruned_head import scatter

FIRST_CAPACITY = 64  # positions a row holds at first; doubled (to a power of two) whenever a row needs more


def runs_lean(model) -> bool:
    """Whether ``BatchLM(model, rows)`` runs on the lean forward's C layers (else on transformers' DynamicCache)."""
    if default_path() == "dynamic" or not native.enabled() or not lean_llama.supports(model):
        return False
    w = lean_llama.lean_weights(model)
    if w.embed.dtype != torch.float32 or w.embed.device.type != "cpu":
        return False
    rot = rope_for(model.model.rotary_emb, w.embed, torch.arange(FIRST_CAPACITY))[0].shape[-1]
    return native.supports_stack(list(w.blocks), torch.float32, head_dim(model.config), rot)


def head_dim(cfg) -> int:
    return getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads


class LeanBatchLM(Rows):
    """``BatchLM`` on the lean forward's C layers: the same rows, ``ids``, ``last``, ``feed``, ``extend``, ``sync``,
    ``keep_rows``, ``drop_last`` and ``compact``; ``mask`` and ``cols`` as ``BatchLM`` reads them (row b's tokens
    at columns 0..len(ids[b]) - 1: no holes, no padding)."""

    forward_name = "lean-c"

    def __init__(self, model, rows: int):
        self.model, self.device = model, torch.device("cpu")
        self.w, self.rotary = lean_llama.lean_weights(model), model.model.rotary_emb
        cfg = model.config
        self.nkv, self.hd = cfg.num_key_value_heads, head_dim(cfg)
        self.start_rows(rows)
        self._fed = [0] * rows  # tokens each row took in the last feed (what drop_last may undo)
        self.capacity, self.kv, self._stack = 0, None, None
        self._reserve(FIRST_CAPACITY)
        self.dims = native.Dims(self.w.embed.shape[1], cfg.num_attention_heads, self.nkv, self.hd,
                                cfg.intermediate_size, self.cos.shape[-1], cfg.rms_norm_eps, self.hd ** -0.5)

    @property
    def mask(self) -> torch.Tensor:
        """(B, T) 1 at each row's cached tokens' columns (0..len - 1), T the longest row."""
        lengths = torch.tensor([len(ids) for ids in self.ids])
        width = int(lengths.max()) if len(self.ids) else 0
        return (torch.arange(width) < lengths[:, None]).long()

    @property
    def cols(self) -> list[list[int]]:
        return [list(range(len(ids))) for ids in self.ids]

    @torch.inference_mode()
    def feed(self, chunks: list[list[int]]) -> torch.Tensor | None:
        """Append chunks[b] to row b; logits (B, W, V), W = the longest chunk, row b's right-aligned (its columns
        before them zeros: no pass computed them). ONE C call for every row's tokens (None if there are none)."""
        lengths = torch.tensor([len(c) for c in chunks])
        width = int(lengths.max())
        if width == 0:
            return None
        held = torch.tensor([len(ids) for ids in self.ids])
        self._reserve(int((held + lengths).max()))
        row = torch.repeat_interleave(torch.arange(len(chunks)), lengths)  # (n,) each new token's row
        step = torch.arange(len(row)) - torch.repeat_interleave(lengths.cumsum(0) - lengths, lengths)  # its index in its chunk
        positions = held[row] + step
        first = row * self.capacity
        tokens = torch.tensor([t for c in chunks for t in c], dtype=torch.long)
        w = self.w
        _, logits = native.layers_rows(F.embedding(tokens, w.embed), first + positions, first, positions, self._c_stack(),
                                       self.dims, self.cos, self.sin, (w.norm, w.head_t, w.head_b, 0))
        if w.head_ids is not None:  # a pruned head's logits placed in the full vocabulary
            logits = scatter(logits, w.head_ids, w.vocab)
        out = logits.new_zeros(len(chunks), width, logits.shape[-1])
        out[row, width - lengths[row] + step] = logits
        for b, chunk in enumerate(chunks):
            self.ids[b].extend(chunk)
            if chunk:
                self.last[b] = out[b, -1]
        self._fed = lengths.tolist()
        return out

    def _forget(self, b: int, keep: int) -> None:
        """Row b keeps its first ``keep`` tokens; its next ones overwrite the slots after them."""
        del self.ids[b][keep:]
        self.last[b] = None

    @torch.inference_mode()
    def keep_rows(self, rows: list[int]) -> None:
        """Keep only these rows (indices of the current rows, in this order): their regions copied to a new cache."""
        if rows == list(range(len(self.ids))):
            return
        index = torch.tensor(rows, dtype=torch.long)
        layers, width, _, hd = self.kv.shape
        regions = self.kv.view(layers, width, len(self.ids), self.capacity, hd)[:, :, index]
        self.kv, self._stack = regions.reshape(layers, width, len(rows) * self.capacity, hd).contiguous(), None
        self.ids, self.last = [self.ids[r] for r in rows], [self.last[r] for r in rows]
        self._synced, self._fed = [self._synced[r] for r in rows], [self._fed[r] for r in rows]

    def drop_last(self, width: int) -> None:
        """Undo the last ``feed`` of ``width`` tokens to every row (a timed pass, rolled back by position); the rows'
        last logits are forgotten."""
        if width <= 0 or any(fed < width for fed in self._fed):
            raise ValueError(f"drop_last({width}): every row's last {width} tokens must be the newest ones")
        for b in range(len(self.ids)):
            del self.ids[b][-width:]
            self.last[b] = None
            self._synced[b] = min(self._synced[b], len(self.ids[b]))
        self._fed = [fed - width for fed in self._fed]

    def compact(self) -> None:
        """Nothing to crop: rows hold no holes."""

    def _reserve(self, n: int) -> None:
        """Room for n positions a row, reallocated at a power of two (each row's region copied over)."""
        if n <= self.capacity:
            return
        cap, rows, layers = max(FIRST_CAPACITY, 1 << (n - 1).bit_length()), len(self.ids), len(self.w.blocks)
        kv = self.w.embed.new_empty(layers, 2 * self.nkv, rows, cap, self.hd)  # a slot is written before it is read
        if self.kv is not None:
            kv[:, :, :, : self.capacity] = self.kv.view(layers, 2 * self.nkv, rows, self.capacity, self.hd)
        self.capacity, self.kv, self._stack = cap, kv.view(layers, 2 * self.nkv, rows * cap, self.hd), None
        self.cos, self.sin = rope_for(self.rotary, self.w.embed, torch.arange(cap))

    def _c_stack(self) -> native.Stack:
        """The (block, cache) pairs as the C stack takes them, built once per cache."""
        if self._stack is None:
            self._stack = native.Stack(list(zip(self.w.blocks, self.kv)), self.dims)
        return self._stack
