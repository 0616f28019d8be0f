"""Several sequences of one Gemma-3 GGUF decoded together on the C stack: one pass takes rows of any of them
(``stack.c``'s ``sv_gemma_layers_rows``), so that text many samples long comes from passes of many rows, each row's
logits and features the very floats ``GemmaSequence.decode`` gives it alone (a row's floats do not depend on the
rows sharing its pass). For recording a target's own text in bulk (``scripts/train/gemma_own_text.py --batch``),
where one sequence at a time reads the 178 MB head once a token.

    rows = GemmaRows(seq, sequences=16, limit=256)   # seq: a GemmaSequence of the file, its weights shared
    last = rows.decode([0, 1], [[2, 651, 1234], [2, 818]])   # (2, vocab): each sequence's last row's logits
    rows.features(0)                                 # (3, d): sequence 0's features so far
"""
from __future__ import annotations

import ctypes

import numpy as np

from .gemma_sequence import GemmaSequence, rope_tables
from .native import build
from .native.build import need


class GemmaRows:
    """``sequences`` sequences of ``seq``'s file (its weights, threads and taps), each up to ``limit`` positions, in
    one cache: sequence b holds slots b * limit onward, one a position. ``decode`` appends tokens to any of them in
    one pass; ``reset`` empties one; ``features`` and ``tapped`` read one's rows so far."""

    def __init__(self, seq: GemmaSequence, sequences: int, limit: int):
        need(isinstance(seq, GemmaSequence), f"GemmaRows runs on a GemmaSequence's weights, not {type(seq).__name__}")
        need(isinstance(sequences, (int, np.integer)) and isinstance(limit, (int, np.integer)) and sequences > 0
             and limit > 0, f"sequences and limit must be positive integers, got {sequences!r} and {limit!r}")
        need(limit <= seq.limit, f"this model takes {seq.limit} positions; limit {limit} asked")
        self.seq, self.sequences, self.limit = seq, int(sequences), int(limit)
        cap, taps = self.sequences * self.limit, len(seq.taps)
        self.kv = np.zeros((len(seq.w.layers), 2 * seq.nkv, cap, seq.hd), dtype=np.float32)
        self.caches = (ctypes.c_void_p * len(self.kv))(*[self.kv[i].ctypes.data for i in range(len(self.kv))])
        self.hidden = np.zeros((cap, seq.d), dtype=np.float32)
        self.kept_taps = np.zeros((cap, taps, seq.d), dtype=np.float32)
        self.rope = {k: rope_tables(b, seq.hd, self.limit) for k, b in seq.bases.items()}
        self.lengths = np.zeros(self.sequences, dtype=np.int64)

    def reset(self, b: int) -> None:
        self._check_index(b)
        self.lengths[b] = 0

    def features(self, b: int) -> np.ndarray:
        """Sequence b's final normed hidden state at each position it holds, (length, d)."""
        self._check_index(b)
        return self.hidden[b * self.limit: b * self.limit + self.lengths[b]]

    def tapped(self, b: int) -> np.ndarray:
        """Sequence b's residual stream after each of the taps' layers at each position it holds, (length, taps, d)."""
        self._check_index(b)
        return self.kept_taps[b * self.limit: b * self.limit + self.lengths[b]]

    def decode(self, which, tokens) -> np.ndarray:
        """Append tokens[i] (ids, at least one) to sequence which[i], every sequence at most once, in one pass: the
        logits after each one's last new token, (len(which), vocab) float32."""
        which, rows = list(which), [np.asarray(t).reshape(-1) for t in tokens]
        need(len(which) == len(rows) > 0, "decode takes one run of tokens per sequence named, and at least one")
        for b in which:
            self._check_index(b)
        which = [int(b) for b in which]
        need(len(set(which)) == len(which), "a sequence may be named once a pass")
        slots, first = [], []
        for b, ids in zip(which, rows):
            need(len(ids) > 0 and ids.dtype.kind in "iu", "each run must hold integer ids, at least one")
            need(int(ids.min()) >= 0 and int(ids.max()) < self.seq.vocab,
                 f"token ids must lie in [0, {self.seq.vocab})")
            need(self.lengths[b] + len(ids) <= self.limit, f"sequence {b} holds {self.limit} positions; "
                                                            f"{self.lengths[b] + len(ids)} asked")
            base = b * self.limit
            slots.append(base + self.lengths[b] + np.arange(len(ids), dtype=np.int64))
            first.append(np.full(len(ids), base, dtype=np.int64))
        slots, first = np.concatenate(slots), np.concatenate(first)
        logits, h, taps = self._pass(np.concatenate(rows).astype(np.int64), slots, first)
        self.hidden[slots], self.kept_taps[slots] = h, taps
        for b, ids in zip(which, rows):
            self.lengths[b] += len(ids)
        return logits[np.cumsum([len(ids) for ids in rows]) - 1]

    def _pass(self, ids: np.ndarray, slots: np.ndarray, first: np.ndarray):
        """One call of sv_gemma_layers_rows: every row's logits, features and taps."""
        s, n = self.seq, len(ids)
        x = s.embed(ids)
        positions = slots - first
        h, logits = np.empty((n, s.d), np.float32), np.empty((n, s.vocab), np.float32)
        taps = np.empty((n, len(s.taps), s.d), np.float32)
        head = build.GHead(s.w.head, s.w.norm.ctypes.data, 1, s.vocab, 0, h.ctypes.data, logits.ctypes.data, 0.0,
                           s.taps.ctypes.data, len(s.taps), taps.ctypes.data)
        full = self.rope.get("full_attention") or self.rope["sliding_attention"]
        local = self.rope.get("sliding_attention") or full
        done = s.so.sv_gemma_layers_rows(ctypes.byref(s.dims), s.w.layers, self.caches, len(s.w.layers), x.ctypes.data,
                                         n, slots.ctypes.data, first.ctypes.data, positions.ctypes.data,
                                         self.kv.shape[2], full[0].ctypes.data, full[1].ctypes.data,
                                         local[0].ctypes.data, local[1].ctypes.data, s.window, ctypes.byref(head),
                                         s.threads)
        need(done != -2, "the C stack refused these rows (their slots, or this Gemma-3's shapes or types)")
        if done != 0:
            raise MemoryError("the C stack could not allocate its scratch memory")
        return logits, h, taps

    def _check_index(self, b) -> None:
        need(isinstance(b, (int, np.integer)) and 0 <= b < self.sequences,
             f"a sequence index must lie in [0, {self.sequences}), got {b!r}")
