"""A feature draft (EAGLE, ``specviz.drafts.eagle``) for a Gemma-3 GGUF on specviz's C stack, in numpy: one Llama
layer over the target's own final normed hidden states, its matrices in 8 bits (Q8_0 blocks, rounded here when it
loads) on the C stack's 8-bit kernels, and a pruned head: the rows of the target's tied head (its Q8_0 bytes, as
shipped) for the draft vocabulary ``d2t``; or all of them rounded to Q5_0 (``weights="Q5_0"``), a little over half
the bytes to read each round. q is over those ids (0 elsewhere), under the target's transforms.

Its row at position t reads fc([f_{t-1}, e(x_t)]) (the target's feature before, the token's input embedding); drafting a
chain, the draft's own h stands in for the feature the target has not computed yet. Each round the committed positions
it has not seen are fed again with their true features (``GemmaSequence.features``), and its cache rolls back past
the drafted rows. Saved by ``save_draft`` as ``feature-draft.safetensors`` (the family's 8-bit storage: int8 rows and
their scales, rounded again to Q8_0 blocks when it loads) and ``feature-draft.json``.
"""
from __future__ import annotations

import copy
import ctypes
import json
import time
from pathlib import Path

import numpy as np

from ..config import DecodeConfig
from ..runtime.blocks import KINDS, rounded
from ..runtime.cpus import StallWatch
from ..runtime.gemma_sequence import STALL, STALLS
from ..runtime.gguf_header import BLOCKS
from ..runtime.native import build
from ..runtime.native.build import need
from . import sampling as S
from .drafts import shared_prefix

FILE, CONFIG = "feature-draft.safetensors", "feature-draft.json"
SCALE = ".int8_scale"  # runtime.int8's name for a matrix's row scales (not imported: that module needs torch)
MATRICES = ("fc", "qkv", "o", "gate_up", "down")
STALL_FLOOR = 0.002  # seconds: a draft step's call (about 0.2 ms) counts as stalled only past this too


def save_draft(head, d2t, config, folder: Path, log: dict, taps: tuple[int, ...] = ()) -> Path:
    """A trained ``eagle.FeatureHead`` (its fc, layer and norm; its fuse where it reads ``taps``, the target's layers
    whose outputs it fuses with the features) in the family's 8-bit storage (``runtime.int8``: int8 rows with a
    float16 scale each, vectors in float16), with its vocabulary d2t (ids ascending) and its Llama config, as
    ``FeatureDraft`` reads them."""
    import torch
    from safetensors.torch import save_file

    from ..runtime.int8 import pack

    if len(taps) != getattr(head, "taps", 0):
        raise ValueError(f"this draft fuses {getattr(head, 'taps', 0)} taps; {len(taps)} layers named")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    state = pack({k: v for k, v in head.state_dict().items() if not k.startswith("rotary.")})
    state["d2t"] = torch.as_tensor(np.asarray(d2t, dtype=np.int64))
    save_file(state, str(folder / FILE))
    meta = {"hidden_size": config.hidden_size, "num_attention_heads": config.num_attention_heads,
            "head_dim": config.head_dim, "intermediate_size": config.intermediate_size,
            "rms_norm_eps": config.rms_norm_eps, "rope_theta": config.rope_parameters["rope_theta"], "training": log}
    if taps:
        meta["taps"] = [int(t) for t in taps]
    (folder / CONFIG).write_text(json.dumps(meta, indent=2) + "\n")
    return folder / FILE


def draft_taps(*folders) -> tuple[int, ...]:
    """The target's layers the saved drafts in ``folders`` fuse with its features, all together, ascending: what
    their target must keep (``GemmaSequence(taps=...)``); () where none reads more than the features."""
    layers = set()
    for folder in folders:
        path = Path(folder) / CONFIG
        taps = json.loads(path.read_text()).get("taps", []) if path.is_file() else []
        need(isinstance(taps, list) and all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in taps),
             f"{path}: 'taps' must be a list of layer numbers")
        layers.update(taps)
    return tuple(sorted(layers))


def served_settings(folder) -> dict | None:
    """The settings a saved draft was measured fastest at, where its config records them (``serving``): {"greedy":
    (k, draft_stop), "sampled": (k, draft_stop), "measured": where and how}; None where it records none. A record
    that is not of that form is refused in words."""
    path = Path(folder) / CONFIG
    serving = json.loads(path.read_text()).get("serving") if path.is_file() else None
    if serving is None:
        return None
    need(isinstance(serving, dict) and isinstance(serving.get("measured"), str) and serving["measured"].strip(),
         f"{path}: 'serving' must say where it was measured ('measured': text)")
    out = {"measured": serving["measured"].strip()}
    for case in ("greedy", "sampled"):
        one = serving.get(case)
        need(isinstance(one, dict) and isinstance(one.get("k"), int) and not isinstance(one.get("k"), bool)
             and one["k"] >= 1 and isinstance(one.get("draft_stop"), (int, float)) and 0 <= one["draft_stop"] < 1,
             f"{path}: 'serving'.{case} must be {{'k': a whole number >= 1, 'draft_stop': a number in [0, 1)}}")
        out[case] = (one["k"], float(one["draft_stop"]))
    return out


def stored(raw: dict) -> dict:
    """The weights of the file, as float32 numpy (an int8 matrix times its rows' scales; d2t as it is)."""
    out = {}
    for name, t in raw.items():
        if name.endswith(SCALE):
            continue
        out[name] = t if name == "d2t" else (t.astype(np.float32) * raw[name + SCALE].astype(np.float32)
                                             if name + SCALE in raw else t.astype(np.float32))
    return out


class FeatureDraft:
    """The saved draft in ``folder``, bound to its target ``GemmaSequence`` (whose features and head rows it reads).
    ``weights``: "Q8_0" (the layer's matrices rounded to Q8_0, the head the file's rows as shipped) or "Q5_0" (both
    rounded to Q5_0: 7 MB read a round instead of 12, at some cost in acceptance)."""

    def __init__(self, target, folder, name: str | None = None, threads: int | None = None, weights: str = "Q8_0"):
        from safetensors.numpy import load_file

        folder = Path(folder)
        need((folder / FILE).is_file() and (folder / CONFIG).is_file(),
             f"{folder} holds no feature draft ({FILE} and {CONFIG}): train one with "
             "scripts/train/train_gemma_feature_draft.py")
        need(hasattr(target, "features") and hasattr(target, "w"), "a feature draft drafts for a GemmaSequence (it "
                                                                    "reads the target's features and head rows)")
        need(weights in KINDS, f"a feature draft's weights are {' or '.join(KINDS)}, not {weights!r}")
        meta, state = json.loads((folder / CONFIG).read_text()), stored(load_file(str(folder / FILE)))
        self.target, self.so, self.name = target, target.so, name or (
            f"feature draft ({folder.name}{'' if weights == 'Q8_0' else ', ' + weights})")
        self.d, self.nh, self.hd = int(meta["hidden_size"]), int(meta["num_attention_heads"]), int(meta["head_dim"])
        self.eps = float(meta["rms_norm_eps"])
        self._check(state, int(meta["intermediate_size"]))
        self.d2t = np.ascontiguousarray(state["d2t"], dtype=np.int64)
        self.tap_at, self.fuse = self._taps(meta.get("taps", []), state, weights)
        self.norms = {k: np.ascontiguousarray(state[k], dtype=np.float32) for k in
                      ("layer.input_layernorm.weight", "layer.post_attention_layernorm.weight", "norm.weight")}
        L = "layer.self_attn.", "layer.mlp."
        mats = {"fc": state["fc.weight"],
                "qkv": np.concatenate([state[L[0] + n + "_proj.weight"] for n in "qkv"]),
                "o": state[L[0] + "o_proj.weight"],
                "gate_up": np.concatenate([state[L[1] + n + "_proj.weight"] for n in ("gate", "up")]),
                "down": state[L[1] + "down_proj.weight"]}
        self.mats = {k: self._qmat(rounded(v, weights), weights) for k, v in mats.items()}
        self.own_rows = target.w.embed_rows(self.d2t)  # the file's rows of the draft's ids: its input embeddings
        self.head = (self._qmat(self.own_rows, target.w.embed_kind)
                     if weights == "Q8_0" else
                     self._qmat(rounded(target.embed(self.d2t) / target.scale, weights), weights))
        self.layer = build.DLayer(*[ctypes.addressof(self.mats[k][1]) for k in MATRICES],
                                  *[self.norms[k].ctypes.data for k in ("layer.input_layernorm.weight",
                                                                        "layer.post_attention_layernorm.weight",
                                                                        "norm.weight")])
        self.dims = build.Dims(self.d, self.nh, self.nh, self.hd, int(meta["intermediate_size"]), self.hd, self.eps,
                               self.hd ** -0.5)
        self.inv_freq = 1.0 / float(meta["rope_theta"]) ** (np.arange(0, self.hd, 2, dtype=np.float64) / self.hd)
        self.cache = np.zeros((2, self.nh, 0, self.hd), dtype=np.float32)  # keys and values, grown by doubling
        self.length = 0  # rows the cache holds: the committed ones between rounds, drafted ones while drafting
        self.ids: list[int] = []  # the committed tokens whose rows (true features) the draft's cache holds
        self.vocab = int(target.vocab)
        self.asked_threads = threads  # as given (None: the target's), for twins: self.threads may fall to one
        self.threads = int(threads or target.threads)
        self.head_seconds = 0.0  # the last proposal's time in the head
        self.chain_in_c = True  # False: every chain a step at a time (to measure sv_draft_chain against; the same
        # tokens)
        self.stalls = StallWatch(STALL, STALLS, STALL_FLOOR)  # a step's call waits at barriers: on a busy host two
        # threads can cost it many times one

    def _taps(self, layers, state: dict, weights: str):
        """(where each layer it fuses sits among the target's taps, its fuse rounded as its other matrices), or (None,
        None) for a draft that reads the features alone; refused where the target does not keep those layers."""
        if not layers:
            need("fuse.weight" not in state, "the feature draft has a fuse but its config names no taps")
            return None, None
        kept = [int(t) for t in getattr(self.target, "taps", ())]
        need(all(int(t) in kept for t in layers), f"this feature draft fuses the outputs of layers {list(layers)}: "
             f"its target must keep them (GemmaSequence(taps=...)), and keeps {kept}")
        w = state.get("fuse.weight")
        need(w is not None and w.shape == (self.d, (len(layers) + 1) * self.d),
             f"the feature draft's fuse.weight must be ({self.d}, {(len(layers) + 1) * self.d})")
        return np.asarray([kept.index(int(t)) for t in layers]), self._qmat(rounded(w, weights), weights)

    def _fused(self, a: int, b: int) -> np.ndarray:
        """The features the draft reads at positions a..b-1: the target's own, or fused with its taps there (each
        over its RMS), as ``eagle.fused`` fuses them."""
        f = self.target.features()[a:b]
        if self.tap_at is None:
            return f
        t = self.target.tapped()[a:b][:, self.tap_at].astype(np.float32)
        if not len(t):
            return f
        normed = t / np.sqrt(np.maximum((t * t).mean(-1, keepdims=True), np.float32(1e-30)))
        x = np.ascontiguousarray(np.concatenate([normed.reshape(len(t), -1), f], -1), dtype=np.float32)
        y, (_, mat) = np.empty((len(t), self.d), dtype=np.float32), self.fuse
        done = self.so.sv_qlinear8(x.ctypes.data, len(t), x.shape[1], ctypes.byref(mat), 1, None, None, y.ctypes.data,
                                   self.threads)
        need(done == 0, "the C stack's 8-bit kernel refused the feature draft's fuse")
        return y

    def twin(self, target) -> FeatureDraft:
        """The same draft (its rounded matrices and head shared, nothing rounded again) bound to ``target``, a twin of
        its own target (``GemmaSequence.twin``: the same weights), with an empty cache of its own: one per concurrent
        run."""
        need(getattr(target, "w", None) is self.target.w, "a feature draft's twin drafts for a twin of its own target "
                                                          "(GemmaSequence.twin: the same weights)")
        other = copy.copy(self)
        other.target, other.threads = target, int(self.asked_threads or target.threads)
        other.cache = np.zeros((2, self.nh, 0, self.hd), dtype=np.float32)
        other.length, other.ids = 0, []
        other.stalls = StallWatch(STALL, STALLS, STALL_FLOOR)
        return other

    def _check(self, state: dict, inter: int) -> None:
        d, w = self.d, self.nh * self.hd
        want = {"fc.weight": (d, 2 * d), "layer.self_attn.q_proj.weight": (w, d), "layer.self_attn.k_proj.weight": (w, d),
                "layer.self_attn.v_proj.weight": (w, d), "layer.self_attn.o_proj.weight": (d, w),
                "layer.mlp.gate_proj.weight": (inter, d), "layer.mlp.up_proj.weight": (inter, d),
                "layer.mlp.down_proj.weight": (d, inter), "layer.input_layernorm.weight": (d,),
                "layer.post_attention_layernorm.weight": (d,), "norm.weight": (d,)}
        wrong = [f"{k} {tuple(state[k].shape) if k in state else 'missing'} (want {s})" for k, s in want.items()
                 if k not in state or tuple(state[k].shape) != s]
        need(not wrong, "the feature draft's tensors do not fit its config: " + "; ".join(wrong))
        need(d == self.target.d, f"the feature draft reads features of {d}; the target's are {self.target.d}")
        need(all(n % 64 == 0 for n in (d, w, inter)), "the feature draft's widths must be whole chunks of 64")
        d2t = state.get("d2t")
        need(d2t is not None and d2t.ndim == 1 and len(d2t) > 0 and int(d2t.min()) >= 0 and
             int(d2t.max()) < self.target.vocab and bool(np.all(np.diff(d2t) > 0)),
             f"the feature draft's d2t must be ascending ids of the target's {self.target.vocab:,}")

    def _qmat(self, rows: np.ndarray, kind: str = "Q8_0"):
        """(its bytes, a QMat): regrouped by 16 rows where its type has that layout and they are whole groups."""
        rows = np.ascontiguousarray(rows)
        n, cols = rows.shape[0], rows.shape[1] // BLOCKS[kind][2] * BLOCKS[kind][1]
        if kind in build.REGROUPED and n % 16 == 0 and cols % build.REGROUPED[kind][1] == 0:
            out = np.empty(build.regrouped_bytes(kind, n, cols), dtype=np.uint8)
            build.regroup(kind, rows.ctypes.data, n, cols, out.ctypes.data)
            return out, build.QMat(out.ctypes.data, build.REGROUPED[kind][0], n)
        return rows, build.QMat(rows.ctypes.data, BLOCKS[kind][0], n)

    def fits(self, vocab: int) -> str | None:
        if vocab != self.vocab:
            return f"this feature draft was bound to a target of {self.vocab:,} tokens, not {vocab:,}"
        return None

    def _head(self, h: np.ndarray) -> np.ndarray:
        """The pruned head's logits of rows h (n, d), over the draft's ids."""
        rows, mat = self.head
        h = np.ascontiguousarray(h, dtype=np.float32)
        y = np.empty((len(h), mat.rows), dtype=np.float32)
        t0 = time.perf_counter()
        done = self.so.sv_qlinear8(h.ctypes.data, len(h), h.shape[1], ctypes.byref(mat), 1, None, None, y.ctypes.data,
                                   self.threads)
        self.head_seconds += time.perf_counter() - t0
        need(done == 0, "the C stack's 8-bit kernel refused the feature draft's head")
        return y

    @property
    def kv(self) -> np.ndarray:
        """The keys and values of the rows held, (2, heads, length, head_dim)."""
        return self.cache[:, :, : self.length]

    def _reserve(self, n: int) -> None:
        if n > self.cache.shape[2]:
            cap = max(n, 2 * self.cache.shape[2], 256)
            grown = np.zeros((2, self.nh, cap, self.hd), dtype=np.float32)
            grown[:, :, : self.length] = self.kv
            angles = np.outer(np.arange(cap, dtype=np.float64), self.inv_freq)
            self.cos, self.sin = (np.concatenate([f(angles)] * 2, -1).astype(np.float32) for f in (np.cos, np.sin))
            self.cache = grown

    def _layer(self, features: np.ndarray, ids: np.ndarray, embedded: np.ndarray | None = None) -> np.ndarray:
        """h for rows at the cache's next positions (their inputs: the feature before each, the token; ``embedded``:
        the tokens' input embeddings where the caller has them), appended; timed: once its calls stall (or the
        target's did), one thread, until ``StallWatch.threads`` tries the threads asked for again."""
        t0 = time.perf_counter()
        h = self._rows(features, ids, embedded)
        asked = min(int(self.asked_threads or self.target.threads), self.target.threads)
        self.threads = self.stalls.threads(len(ids), time.perf_counter() - t0, min(self.threads, self.target.threads),
                                           asked)
        return h

    def _rows(self, features: np.ndarray, ids: np.ndarray, embedded: np.ndarray | None = None) -> np.ndarray:
        """One call of the C stack's sv_draft_layer over [feature, embedding] of each row."""
        n, start = len(ids), self.length
        self._reserve(start + n)
        e = self._embed(ids.astype(np.int64)) if embedded is None else embedded
        x = np.ascontiguousarray(np.concatenate([features, e], -1), dtype=np.float32)
        h = np.empty((n, self.d), dtype=np.float32)
        done = self.so.sv_draft_layer(ctypes.byref(self.dims), ctypes.byref(self.layer), x.ctypes.data, n, start,
                                      self.cache.ctypes.data, self.cache.shape[2], self.cos.ctypes.data,
                                      self.sin.ctypes.data, h.ctypes.data, self.threads)
        need(done != -2, "the C stack refused the feature draft's layer")
        if done != 0:
            raise MemoryError("the C stack could not allocate the feature draft's scratch memory")
        self.length = start + n
        return h

    def _sync(self, committed: list[int]) -> np.ndarray:
        """The draft's cache rolled back to the committed rows it shares and the rest fed with their true features:
        h at the last committed token (standing in for its feature)."""
        n = shared_prefix(self.ids, committed)
        self.length = n
        del self.ids[n:]
        need(self.target.length >= len(committed) - 1, "the target holds fewer features than the committed text needs")
        before = self._fused(max(n - 1, 0), len(committed) - 1)  # the feature before each row fed (none before the first)
        if n == 0:
            before = np.concatenate([np.zeros((1, self.d), np.float32), before])
        h = self._layer(before, np.asarray(committed[n:]))
        self.ids += committed[n:]
        return h[-1:]

    def propose(self, committed: list[int], k: int, cfg: DecodeConfig, rng) -> tuple[list[int], S.DraftQ | None]:
        """k tokens (fewer where q of one falls below cfg.draft_stop) and the q each was drawn from, over the draft's
        ids (``S.DraftQ``: zero off them). A greedy run that keeps no record gets None (its argmax decides; q is never
        read). The chain runs in one call of the C stack (``sv_draft_chain``) where q's transforms are a temperature
        alone and its rows are long enough for C's sampling; else step by step here: the same tokens and floats."""
        self.head_seconds = 0.0  # this proposal's time in the pruned head (the round's record splits it out)
        h = self._sync(committed)
        want_q = cfg.record or not cfg.greedy
        need_q = want_q or cfg.draft_stop > 0 or not (cfg.greedy or cfg.draft_greedy)
        in_c = self.chain_in_c and cfg.top_k == 0 and cfg.top_p >= 1.0 and S.native(len(self.d2t)) is not None
        idx, q = (self._chain if in_c else self._steps)(h, k, cfg, rng, need_q)
        self.length = len(self.ids)  # the drafted rows go: next round feeds true features there
        return [int(self.d2t[j]) for j in idx], S.DraftQ(self.d2t, q, self.vocab) if want_q else None

    def _steps(self, h: np.ndarray, k: int, cfg: DecodeConfig, rng, need_q: bool):
        """The chain a step at a time: (the drawn ids' indices in d2t, q's rows over d2t or None)."""
        idx, rows = [], np.empty((k, len(self.d2t)), np.float32) if need_q else None
        for i in range(k):
            logits = self._head(h)[0]
            q_small = S.logits_to_probs(logits[None], cfg.temperature, cfg.top_k, cfg.top_p)[0] if need_q else None
            j = int(logits.argmax()) if cfg.greedy or cfg.draft_greedy else S.sample(q_small, rng)
            idx.append(j)
            if need_q:
                rows[i] = q_small
            if (need_q and q_small[j] < cfg.draft_stop) or i == k - 1:
                break
            h = self._layer(h, np.asarray([self.d2t[j]]), self._embed_own(j))
        return idx, None if rows is None else rows[: len(idx)]

    def _chain(self, h: np.ndarray, k: int, cfg: DecodeConfig, rng, need_q: bool):
        """The chain in one call of the C stack (sv_draft_chain): k uniforms drawn ahead, the generator put back to
        where the draws the chain used leave it (as ``_steps`` draws them, one a step)."""
        greedy = cfg.greedy or cfg.draft_greedy
        state = None if greedy else rng.bit_generator.state
        u = None if greedy else np.ascontiguousarray(rng.random(k), dtype=np.float64)
        self._reserve(self.length + k)
        (_, head), v, h = self.head, len(self.d2t), np.ascontiguousarray(h, dtype=np.float32)
        idx, q = np.empty(k, np.int32), np.empty((k, v), np.float32) if need_q else None
        head_s, t0 = ctypes.c_double(), time.perf_counter()
        n = self.so.sv_draft_chain(
            ctypes.byref(self.dims), ctypes.byref(self.layer), ctypes.byref(head), self.own_rows.ctypes.data,
            BLOCKS[self.target.w.embed_kind][0], float(self.target.scale), v, h.ctypes.data, self.length,
            self.cache.ctypes.data, self.cache.shape[2], self.cos.ctypes.data, self.sin.ctypes.data, k, int(greedy),
            1.0 / cfg.temperature if cfg.temperature > 0 else 1.0, cfg.draft_stop if need_q else 0.0,
            None if u is None else u.ctypes.data, idx.ctypes.data, None if q is None else q.ctypes.data,
            ctypes.byref(head_s), self.threads)
        need(n != -2, "the C stack refused the feature draft's chain")
        if n == -3:
            raise ValueError("the feature draft's logits hold a NaN or +inf: no distribution to draw from")
        if n < 1:
            raise MemoryError("the C stack could not allocate the feature draft's scratch memory")
        if state is not None and n < k:  # the generator as n draws leave it
            rng.bit_generator.state = state
            rng.random(n)
        self.head_seconds += head_s.value
        asked = min(int(self.asked_threads or self.target.threads), self.target.threads)  # a chain of n steps is
        # timed under the key -n, apart from the layer's calls of n rows
        self.threads = self.stalls.threads(-n, time.perf_counter() - t0, min(self.threads, self.target.threads), asked)
        return idx[:n].tolist(), None if q is None else q[:n]

    def _embed(self, ids: np.ndarray) -> np.ndarray:
        """The target's input embeddings of ids (n,): from the rows the draft keeps where every id is one of its own
        (the common case: the draft's ids cover most text), else the target's lookup of the file."""
        at = np.searchsorted(self.d2t, ids)
        if (at < len(self.d2t)).all() and np.array_equal(self.d2t[np.minimum(at, len(self.d2t) - 1)], ids):
            return self._embed_own(at)
        return self.target.embed(ids)

    def _embed_own(self, j) -> np.ndarray:
        """The input embeddings of the draft's own ids d2t[j] (an index or indices), (n, d): the target's (its file
        rows times sqrt(d)), read from the rows the draft keeps, not the file."""
        at = np.asarray(j, dtype=np.int64).reshape(-1)
        out = np.empty((len(at), self.d), dtype=np.float32)
        done = self.so.sv_qrows(self.own_rows.ctypes.data, BLOCKS[self.target.w.embed_kind][0], len(self.own_rows),
                                self.d, at.ctypes.data, len(at), out.ctypes.data)
        need(done == 0, "the C lookup refused the feature draft's embedding rows")
        return out * self.target.scale
