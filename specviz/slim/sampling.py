"""The sampling math of ``specviz.sampling`` in numpy, for one position at a time (p target, q draft, u uniform,
beta = sum min(p, q)); tests pin each function to its torch twin on the same inputs. Over a vocabulary larger than
``NATIVE_FROM`` ids a row's softmax at a temperature, residual and inverse CDF run in the C stack where it is built
(``runtime/native/stack.c``: one or two passes each; on 262,144 ids the softmax 0.15 ms against numpy's 0.29, the
inverse CDF 0.05 ms against 0.10, on an EPYC core, 2026-12-05; tests pin them to these numpy forms)."""
from __future__ import annotations

import ctypes
from dataclasses import dataclass

import numpy as np

from ..runtime.native import build

RESIDUAL_TOP = 8  # as specviz.sampling: how many residual tokens a round records for the replay
CDF_BLOCK = 1024  # ids a block of the inverse CDF: numpy's float64 cumulative sum costs ~9 ns an id (2.4 ms on 262k)
NATIVE_FROM = 4 * CDF_BLOCK  # rows longer than this sample in C where the C stack is built


def native(n: int):
    """The C stack for a row of n ids, or None (a short row, or no C stack here: numpy then)."""
    return build.lib() if n > NATIVE_FROM else None


def _floats(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float32)


def softmax(logits: np.ndarray) -> np.ndarray:
    """softmax over the last axis, in float32 as torch's CPU softmax of float32 logits (-inf entries: 0)."""
    z = logits - logits.max(axis=-1, keepdims=True)
    e = np.exp(z, dtype=np.float32)
    return e / e.sum(axis=-1, keepdims=True)


def process_logits(logits: np.ndarray, temperature: float, top_k: int = 0, top_p: float = 1.0) -> np.ndarray:
    """Temperature, then top-k, then top-p (as transformers' warpers); removed entries become -inf. (..., V)."""
    logits = logits.astype(np.float32) / np.float32(temperature)
    if 0 < top_k < logits.shape[-1]:
        kth = np.partition(logits, -top_k, axis=-1)[..., -top_k:].min(axis=-1, keepdims=True)
        logits = np.where(logits < kth, np.float32(-np.inf), logits)
    if top_p < 1.0:
        order = np.argsort(logits, axis=-1, kind="stable")
        cumulative = np.cumsum(softmax(np.take_along_axis(logits, order, axis=-1)), axis=-1)
        remove_sorted = cumulative <= (1 - top_p)
        remove_sorted[..., -1:] = False  # always keep the most likely token
        remove = np.empty_like(remove_sorted)
        np.put_along_axis(remove, order, remove_sorted, axis=-1)
        logits = np.where(remove, np.float32(-np.inf), logits)
    return logits


def logits_to_probs(logits: np.ndarray, temperature: float, top_k: int = 0, top_p: float = 1.0) -> np.ndarray:
    """The distribution generation samples from; greedy (temperature 0) reports the plain softmax. Long rows at a
    temperature without top-k or top-p: in C where the stack is built."""
    if temperature == 0:
        so = native(logits.shape[-1])
        return softmax(logits.astype(np.float32)) if so is None else softmax_in_c(so, logits, 1.0)
    if top_k == 0 and top_p >= 1.0 and (so := native(logits.shape[-1])) is not None:
        return softmax_in_c(so, logits, temperature)
    return softmax(process_logits(logits, temperature, top_k, top_p))


def softmax_in_c(so, logits: np.ndarray, temperature: float) -> np.ndarray:
    """softmax(logits / temperature) over the last axis, row by row in the C stack (``sv_softmax_t``)."""
    rows = _floats(logits).reshape(-1, logits.shape[-1])
    p = np.empty_like(rows)
    for row, out in zip(rows, p):
        if so.sv_softmax_t(row.ctypes.data, len(row), 1.0 / temperature, out.ctypes.data) != 0:
            raise ValueError("these logits hold a NaN or +inf, or no finite entry: no distribution to sample from")
    return p.reshape(logits.shape)


def invert_cdf(probs: np.ndarray, u: float) -> int:
    """The first id of probs (V,) whose cumulative probability (float64) exceeds u * total: over a vocabulary of many
    blocks, found by the blocks' sums first and then within the one block (never an id of zero probability)."""
    v = probs.shape[-1]
    if (so := native(v)) is not None:
        w = _floats(probs)
        i = so.sv_invert_cdf(w.ctypes.data, v, ctypes.c_double(u))
        if i < 0:
            raise ValueError(f"no id to draw: u = {u} outside [0, 1), or weights negative, non-finite or all zero")
        return i
    if v <= 4 * CDF_BLOCK:
        cdf = np.cumsum(probs, dtype=np.float64)
        return min(int(np.searchsorted(cdf, u * cdf[-1], side="right")), v - 1)
    starts = np.arange(0, v, CDF_BLOCK)
    sums = np.add.reduceat(probs, starts, dtype=np.float64)
    before = np.cumsum(sums)
    target = u * before[-1]
    b = min(int(np.searchsorted(before, target, side="right")), int(np.flatnonzero(sums)[-1]))
    block = probs[starts[b]: starts[b] + CDF_BLOCK]
    inner = (before[b - 1] if b else 0.0) + np.cumsum(block, dtype=np.float64)
    # the sums of blocks and the running sum within one round apart: never past the block's last id with mass
    i = min(int(np.searchsorted(inner, target, side="right")), int(np.flatnonzero(block)[-1]))
    return int(starts[b]) + i


def sample(probs: np.ndarray, rng: np.random.Generator) -> int:
    return invert_cdf(probs, float(rng.random()))


def point_mass(tokens, vocab_size: int) -> np.ndarray:
    """q of a model-free drafter: one-hot rows, (m,) -> (m, V)."""
    q = np.zeros((len(tokens), vocab_size), dtype=np.float32)
    q[np.arange(len(tokens)), np.asarray(tokens, dtype=np.int64)] = 1.0
    return q


def beta(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """sum_v min(p, q) per position: (m, V) -> (m,) (long rows in C: ``sv_overlap``)."""
    if p.ndim == 2 and p.shape == q.shape and (so := native(p.shape[-1])) is not None:
        p, q = _floats(p), _floats(q)
        return np.asarray([so.sv_overlap(a.ctypes.data, b.ctypes.data, p.shape[-1]) for a, b in zip(p, q)],
                          dtype=np.float32)
    return np.minimum(p, q).sum(axis=-1)


@dataclass(frozen=True)
class DraftQ:
    """q's rows of a draft whose vocabulary is some of the target's ids: ``values`` (m, len(ids)) over ``ids``
    (ascending, in [0, vocab)), zero elsewhere. The accept step reads it as the dense (m, vocab) rows (``dense``)
    without writing them: q at a draft (``at``) and the residual over the ids (``residual_over``)."""

    ids: np.ndarray
    values: np.ndarray
    vocab: int

    def __post_init__(self):
        ids, values = self.ids, self.values
        if ids.ndim != 1 or values.ndim != 2 or values.shape[1] != len(ids) or values.dtype != np.float32:
            raise ValueError(f"DraftQ: values must be float32 (m, {len(ids)}), one column an id; got {values.shape} "
                             f"{values.dtype}")
        if len(ids) and (int(ids[0]) < 0 or int(ids[-1]) >= self.vocab or not bool(np.all(np.diff(ids) > 0))):
            raise ValueError(f"DraftQ: the ids must ascend within [0, {self.vocab})")

    def __len__(self) -> int:
        return len(self.values)

    def at(self, i: int, x: int) -> np.float32:
        """q of row i at token x (0 off the ids)."""
        j = int(np.searchsorted(self.ids, x))
        return self.values[i, j] if j < len(self.ids) and self.ids[j] == x else np.float32(0.0)

    def dense(self) -> np.ndarray:
        rows = np.zeros((len(self), self.vocab), dtype=np.float32)
        rows[:, self.ids] = self.values
        return rows


def residual(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """norm(max(0, p - q)) over the full vocabulary; where it has no mass, p itself."""
    if (so := native(p.shape[-1])) is not None and p.shape == q.shape and p.ndim == 1:
        p, q = _floats(p), _floats(q)
        r = np.empty_like(p)
        total = so.sv_residual(p.ctypes.data, q.ctypes.data, len(p), r.ctypes.data)
        return _normed_in_c(r, total, p)
    r = np.maximum(p - q, 0)
    total = r.sum()
    return r / total if total > 0 else p


def _normed_in_c(r: np.ndarray, total: float, p: np.ndarray) -> np.ndarray:
    """A residual the C stack wrote and summed (in double), times the reciprocal of its sum in place; p itself where
    it has no mass."""
    return np.multiply(r, np.float32(1.0 / total), out=r) if total > 0 else p


def residual_over(p: np.ndarray, q: DraftQ, i: int) -> np.ndarray:
    """``residual(p, q.dense()[i])`` without the dense row: the same floats (in C where built, ``sv_residual_over``)."""
    so = native(p.shape[-1])
    if so is None or p.ndim != 1 or len(p) != q.vocab:
        return residual(p, q.dense()[i])
    p, ids, vals = _floats(p), np.ascontiguousarray(q.ids, dtype=np.int32), _floats(q.values[i])
    r = np.empty_like(p)
    total = so.sv_residual_over(p.ctypes.data, len(p), ids.ctypes.data, vals.ctypes.data, len(ids), r.ctypes.data)
    if total < 0:
        raise ValueError("the C stack refused the draft's ids for the residual")
    return _normed_in_c(r, total, p)


def residual_top(r: np.ndarray | None, p: np.ndarray, q: np.ndarray | None) -> tuple:
    """The residual's top tokens as (token, residual, p, q), those with residual > 0, largest first."""
    if r is None:
        return ()
    n = min(RESIDUAL_TOP, r.shape[-1])
    if (so := native(r.shape[-1])) is not None:  # one pass in C (sv_top_k), not a partition of the vocabulary
        r, top = _floats(r), np.empty(n, dtype=np.int32)
        if so.sv_top_k(r.ctypes.data, len(r), n, top.ctypes.data) != n:
            raise ValueError("the C stack refused the residual's top ids")
    else:
        top = np.argpartition(-r, n - 1)[:n]  # the n largest, then in order: no sort of the whole vocabulary
        top = top[np.argsort(-r[top], kind="stable")]
    return tuple((int(t), float(r[t]), float(p[t]), float(q[t]) if q is not None else 0.0) for t in top if r[t] > 0)


@dataclass(frozen=True)
class Verdict:
    """One round's accept step: drafts before n_accepted kept, the one at it rejected (if any), then next_token."""

    n_accepted: int
    next_token: int
    accept_prob: np.ndarray  # (m,) min(1, p/q) at each draft (greedy: 1.0 or 0.0)
    u: np.ndarray | None  # (m,) the uniform draws (None: greedy)
    residual: np.ndarray | None  # (V,) norm(max(0, p_n - q_n)) at the rejection, else None

    @property
    def rejected(self) -> bool:
        return self.n_accepted < len(self.accept_prob)


def verify(p: np.ndarray, q: np.ndarray, drafted: np.ndarray, rng: np.random.Generator) -> Verdict:
    """Speculative sampling (Leviathan et al. 2023, Algorithm 1): p (m+1, V), q (m, V), drafted (m,)."""
    m, q = len(drafted), q.dense() if isinstance(q, DraftQ) else q
    idx = np.arange(m)
    accept_prob = np.minimum(p[idx, drafted] / q[idx, drafted], np.float32(1.0))
    return walk(lambda i: p[i], q, drafted, rng, accept_prob)


def verify_rows(logits: np.ndarray, q: np.ndarray, drafted: np.ndarray, rng: np.random.Generator, temperature: float,
                top_k: int = 0, top_p: float = 1.0, *, threads: int = 1, keep: bool = True) -> Verdict:
    """``verify`` on the logits (m+1, V), each row's p computed only when the walk reaches it: the same uniforms
    drawn, the same floats (p of a row does not depend on the others), the same verdict; the accept probabilities
    past a rejection, never needed, are NaN. For runs that keep no record of p. ``keep`` False (a run that records
    nothing, q a ``DraftQ`` or no drafts at all): each row's p read at its draft from the row's normaliser
    (``RowProbs``, its blocks on ``threads``) and the token after the kept drafts drawn from the row's exponentials in
    C where it can (``draw_kept``, Leviathan's residual being block verification's with P = 1): the same verdict, its
    residual None."""
    if keep or not (isinstance(q, DraftQ) or len(drafted) == 0):
        return walk(lambda i: logits_to_probs(logits[i: i + 1], temperature, top_k, top_p)[0], q, drafted, rng,
                    np.full(len(drafted), np.nan, dtype=np.float32))
    rows, m = RowProbs(logits, temperature, top_k, top_p, threads), len(drafted)
    u, accept_prob = rng.random(m, dtype=np.float32), np.full(m, np.nan, dtype=np.float32)
    for i in range(m):
        accept_prob[i] = min(rows.at(i, drafted[i: i + 1])[0] / q.at(i, drafted[i]), np.float32(1.0))
        if not u[i] < accept_prob[i]:
            return Verdict(i, draw_after(rows, q, i, rng), accept_prob, u, None)
    return Verdict(m, draw_after(rows, q, m, rng), accept_prob, u, None)


def draw_after(rows: RowProbs, q: DraftQ, n: int, rng: np.random.Generator) -> int:
    """The token after n kept drafts, token by token: from norm(max(0, p_n - q_n)) (n < m) or p_m, one uniform drawn;
    from the row's exponentials in C where it can (``draw_kept``), else from the row written."""
    if (token := draw_kept(rows, q, n, 1.0, rng)) is not None:
        return token
    p = rows.full(n)
    return sample(residual_over(p, q, n) if n < len(q) else p, rng)


def walk(p_row, q: np.ndarray, drafted: np.ndarray, rng: np.random.Generator, accept_prob: np.ndarray) -> Verdict:
    """The accept step over p_row(i) (row i's p): m uniforms drawn, drafts kept while u < min(1, p/q) (each row's
    accept probability written into accept_prob as it is reached), then a token from the residual at the first
    rejection or the bonus from the last row."""
    m, sparse = len(drafted), isinstance(q, DraftQ)
    u = rng.random(m, dtype=np.float32)
    for i in range(m):
        p = p_row(i)
        x = drafted[i]
        accept_prob[i] = min(p[x] / (q.at(i, x) if sparse else q[i, x]), np.float32(1.0))
        if not u[i] < accept_prob[i]:
            r = residual_over(p, q, i) if sparse else residual(p, q[i])
            return Verdict(i, sample(r, rng), accept_prob, u, r)
    return Verdict(m, sample(p_row(m), rng), accept_prob, u, None)


class RowProbs:
    """p's rows from a verify pass's logits (m+1, V), each computed when first read, in full (``full``) or at a few
    ids (``at``). Long rows at a temperature alone take their normalisers in C, several rows in one call on
    ``threads`` (``normalise``: ``sv_softmax_norms``, which keeps each row's exponentials), and p from them: the floats
    ``logits_to_probs`` gives, without a row's second pass of exponentials."""

    def __init__(self, logits: np.ndarray, temperature: float, top_k: int = 0, top_p: float = 1.0, threads: int = 1,
                 probs: np.ndarray | None = None):
        """``probs``: the rows' p where the caller has them already (a recorded run's, from ``logits_to_probs``)."""
        self.logits, self.settings, self.threads = _floats(logits), (temperature, top_k, top_p), max(int(threads), 1)
        self.so = native(logits.shape[-1]) if temperature > 0 and top_k == 0 and top_p >= 1.0 else None
        self._full = {} if probs is None else dict(enumerate(probs))
        self._norms, self._exps = {}, {}

    def normalise(self, rows: int) -> None:
        """The first ``rows`` rows' normalisers (those not taken yet) in one call where the C stack takes them."""
        if self.so is None or (start := len(self._norms)) >= rows or all(i in self._full for i in range(rows)):
            return
        n, v = rows - start, self.logits.shape[-1]
        m, total, e = np.empty(n, np.float32), np.empty(n, np.float64), np.empty((n, v), np.float32)
        if self.so.sv_softmax_norms(self.logits[start].ctypes.data, n, v, 1.0 / self.settings[0], m.ctypes.data,
                                    total.ctypes.data, e.ctypes.data, self.threads) != 0:
            raise ValueError("these logits hold a NaN or +inf, or no finite entry: no distribution to sample from")
        for i in range(n):
            scale = np.float32(1.0 / total[i])
            self._norms[start + i], self._exps[start + i] = (float(m[i]), scale, float(total[i]) * float(scale)), e[i]

    def full(self, i: int) -> np.ndarray:
        if i not in self._full:
            if i in self._exps:  # e times the scale: sv_softmax_t's floats
                self._full[i] = np.multiply(self._exps.pop(i), self._norms[i][1])
            else:
                self._full[i] = logits_to_probs(self.logits[i: i + 1], *self.settings)[0]
        return self._full[i]

    def at(self, i: int, ids: np.ndarray) -> np.ndarray:
        """p of row i at ids (n,), float32."""
        if self.so is None or i in self._full:
            return self.full(i)[ids]
        self.normalise(i + 1)
        (m, scale, _), row = self._norms[i], self.logits[i]
        ids, out = np.ascontiguousarray(ids, dtype=np.int32), np.empty(len(ids), np.float32)
        if self.so.sv_softmax_at(row.ctypes.data, len(row), 1.0 / self.settings[0], m, scale, ids.ctypes.data,
                                 len(ids), out.ctypes.data) != 0:
            raise ValueError(f"ids outside the row's {len(row)}")
        return out

    def kept(self, i: int) -> tuple[np.ndarray, np.float32] | None:
        """Row i's exponentials and scale (p = e times it) where ``normalise`` kept them and ``full`` has not used
        them; else None."""
        self.normalise(i + 1)
        return (self._exps[i], self._norms[i][1]) if i in self._exps else None

    def mass(self, i: int) -> float:
        """The sum of row i's p in double (1 up to its floats' rounding)."""
        if self.so is None or i in self._full:
            return float(self.full(i).sum(dtype=np.float64))
        self.normalise(i + 1)
        return self._norms[i][2]


def block_weights(p_x, q_x) -> list[float]:
    """Block verification's P_0..P_m (``specviz.sampling.block_weights``), in double."""
    weights = [1.0]
    for a, b in zip(p_x, q_x):
        weights.append(min(1.0, weights[-1] * float(a) / float(b)))
    return weights


def block_stop(weight: float, residual_mass: float) -> float:
    """h_i = R_i / (R_i + 1 - P_i) (``specviz.sampling.block_stop``); 1 where both vanish."""
    rest = residual_mass + 1.0 - weight
    return residual_mass / rest if rest > 0 else 1.0


def residual_mass(rows: RowProbs, q, i: int, weight: float) -> float:
    """R_i = sum_v max(0, P p_i(v) - q_i(v)) in double: over q's ids alone where q is a ``DraftQ`` (elsewhere q is 0,
    so the row's mass there is P p), else over the full rows."""
    if isinstance(q, DraftQ):
        p = rows.at(i, q.ids).astype(np.float64) * weight
        return weight * rows.mass(i) - float(np.minimum(p, q.values[i]).sum())
    return float(np.maximum(rows.full(i).astype(np.float64) * weight - q[i], 0).sum())


def block_residual(p: np.ndarray, q, i: int, weight: float) -> np.ndarray:
    """norm(max(0, P p - q_i)) over the full vocabulary (``specviz.sampling.block_residual``); P_0 = 1: Leviathan's
    residual, the same floats; where it has no mass, p itself."""
    if weight >= 1.0:
        return residual_over(p, q, i) if isinstance(q, DraftQ) else residual(p, q[i])
    scaled = p * np.float32(weight)
    r = residual_over(scaled, q, i) if isinstance(q, DraftQ) else residual(scaled, q[i])
    return p if r is scaled else r


def verify_block(rows: RowProbs, q, drafted: np.ndarray, rng: np.random.Generator, keep: bool = True) -> Verdict:
    """Block verification (Sun et al. 2024, Algorithm 2; ``specviz.sampling.verify_block``) over p's rows as the
    accept step reads them: m uniforms drawn as ``walk`` draws them, each row's p read at its draft, the stop
    chances h_i taken from the last draft down until one keeps (those below it, never needed, NaN), then one draw.
    ``keep`` False (a run that records nothing): the draw from the row's exponentials in C where it can
    (``draw_kept``), the verdict's residual then None."""
    m, sparse = len(drafted), isinstance(q, DraftQ)
    u = rng.random(m, dtype=np.float32)
    rows.normalise(m)  # every draft's row is read: their normalisers in one call
    p_x = [rows.at(i, drafted[i: i + 1])[0] for i in range(m)]
    weights = block_weights(p_x, [q.at(i, x) if sparse else q[i, x] for i, x in enumerate(drafted)])
    h, n = np.full(m, np.nan, dtype=np.float32), 0
    for i in range(m, 0, -1):
        stop = weights[m] if i == m else block_stop(weights[i], residual_mass(rows, q, i, weights[i]))
        h[i - 1] = stop
        if float(u[i - 1]) < stop:
            n = i
            break
    if not keep and sparse and (token := draw_kept(rows, q, n, weights[n], rng)) is not None:
        return Verdict(n, token, h, u, None)
    if n == m:
        return Verdict(m, sample(rows.full(m), rng), h, u, None)
    r = block_residual(rows.full(n), q, n, weights[n])
    return Verdict(n, sample(r, rng), h, u, r)


def draw_kept(rows: RowProbs, q: DraftQ, n: int, weight: float, rng: np.random.Generator) -> int | None:
    """The token ``verify_block`` draws after keeping n drafts, from row n's exponentials in C (``sv_residual_draw``):
    the id ``sample(block_residual(...))`` (n < m) or ``sample(p_m)`` (n = m: q's ids are not read, and q may be any
    rows, as many as the drafts) gives, one uniform drawn, no row written. None where row n has no exponentials kept
    (numpy's or top-k's rows; n = m with no C stack)."""
    if rows.so is None or (kept := rows.kept(n)) is None:
        return None
    (e, scale), bonus = kept, n == len(q)
    ids = np.zeros(0, np.int32) if bonus else np.ascontiguousarray(q.ids, dtype=np.int32)
    vals = _floats(q.values[n] if not bonus else np.zeros(0, np.float32))  # held: a copy where q's rows are strided
    token = rows.so.sv_residual_draw(e.ctypes.data, len(e), scale, 1.0 if bonus else weight, ids.ctypes.data,
                                     vals.ctypes.data, -1 if bonus else len(ids), float(rng.random()))
    if token < 0:
        raise ValueError("the C stack refused the residual's draw: no id with mass, or the draft's ids out of order")
    return token


def verify_greedy(logits: np.ndarray, drafted: np.ndarray) -> Verdict:
    """Keep drafts while each is the target's argmax, then append the target's argmax. logits (m+1, V)."""
    m = len(drafted)
    best = logits.argmax(axis=-1)
    match = (best[:m] == drafted).astype(np.float32)
    misses = np.flatnonzero(match == 0)
    n = int(misses[0]) if len(misses) else m
    return Verdict(n, int(best[n]), match, None, None)
