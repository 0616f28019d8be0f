#!/usr/bin/env python
"""Distil a fresh draft model from the target with forward KL (DistillSpec).

    python scripts/train/distill_draft.py --target assets/models/target --preset tiny \\
        --minutes 15 --out assets/models/draft-tiny

The draft architecture comes from the presets of ``train_lm.py``; it is trained
with :func:`specviz.drafts.distill.distill` on windows of the training split within a
wall-clock budget, then saved like ``train_lm.py`` does: float16 safetensors,
tokenizer, generation_config and a ``train_log.json`` (command, steps, wall time,
KL before/after on fixed validation windows, final training KL).
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

ROOT = Path(__file__).resolve().parents[2]

from train_lm import SIZES, build_model, count_params, grow, load_texts, save_model

from specviz.drafts.distill import distill, kl_loss, kl_on_batch, make_windows, tv_on_batch


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", type=Path, default=ROOT / "assets/models/target")
    ap.add_argument("--preset", choices=sorted(SIZES), default="tiny")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--minutes", type=float, default=15.0)
    ap.add_argument("--max-steps", type=int, default=100_000)
    ap.add_argument("--train", type=Path, default=ROOT / "data/corpus/train.jsonl")
    ap.add_argument("--valid", type=Path, default=ROOT / "data/corpus/valid.jsonl")
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=30, help="warmup steps")
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--generated-fraction", type=float, default=0.0, help="on-policy share of each batch")
    ap.add_argument("--target-share", type=float, default=0.3,
                    help="share of training windows that are text the target generated (from corpus prefixes)")
    ap.add_argument("--target-samples", type=int, default=256, help="how many target-generated windows to make")
    ap.add_argument("--generated", type=Path, nargs="*", default=[],
                    help="generate_target_text.py files: train on windows of the target's own text")
    ap.add_argument("--generated-share", type=float, default=0.8,
                    help="with --generated: share of training windows cut from that text (the rest: corpus)")
    ap.add_argument("--val-windows", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--init", type=Path, help="continue from this draft checkpoint instead of a fresh draft")
    ap.add_argument("--layers", type=int, help="override the preset's depth")
    ap.add_argument("--tv-weight", type=float, default=0.0, help="add this times the total variation (1 - beta) "
                    "to the forward KL (DistillSpec's TVD: acceptance itself)")
    ap.add_argument("--grow-from", type=Path, help="start from this shallower draft, each layer followed by copies "
                    "whose output projections are zero (train_lm.grow: the same function at step 0)")
    return ap.parse_args(argv)


@torch.no_grad()
def target_text(target, windows: torch.Tensor, n: int, seed: int, prefix: int = 32, batch: int = 64) -> torch.Tensor:
    """n windows whose first ``prefix`` tokens come from the corpus and the rest is sampled from the target (T = 1):
    the contexts a draft meets when it drafts for this target."""
    g = torch.Generator().manual_seed(seed)
    rows = windows[torch.randint(0, len(windows), (n,), generator=g)]
    torch.manual_seed(seed)
    out = [target.generate(rows[i:i + batch, :prefix], do_sample=True, top_k=0, top_p=1.0,
                           max_new_tokens=rows.shape[1] - prefix, min_new_tokens=rows.shape[1] - prefix)
           for i in range(0, n, batch)]
    print(f"generated {n} target windows", flush=True)
    return torch.cat(out)[:, : rows.shape[1]]


def generated_windows(files: list[Path], seq_len: int) -> torch.Tensor:
    """The first seq_len tokens of every generated row long enough: (N, seq_len) windows of the target's text."""
    rows = [r["ids"].long() for f in files for r in torch.load(f)["rows"]]
    return torch.stack([r[:seq_len] for r in rows if len(r) >= seq_len])


def mix(generated: torch.Tensor, corpus: torch.Tensor, share: float, seed: int) -> torch.Tensor:
    """All generated windows plus enough random corpus windows that generated ones make up ``share``."""
    n = min(len(corpus), round(len(generated) * (1 - share) / max(share, 1e-9)))
    pick = torch.randperm(len(corpus), generator=torch.Generator().manual_seed(seed))[:n]
    print(f"{len(generated):,} windows of target text + {n:,} corpus windows", flush=True)
    return torch.cat([generated, corpus[pick]])


def main(argv=None) -> dict:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    tokenizer = AutoTokenizer.from_pretrained(args.target)
    target = AutoModelForCausalLM.from_pretrained(args.target, dtype=torch.float32).eval()
    sizes = dict(SIZES[args.preset], **({"layers": args.layers} if args.layers else {}))
    draft = build_model(sizes, tokenizer, args.seed)
    if args.grow_from:
        grow(draft, AutoModelForCausalLM.from_pretrained(args.grow_from, dtype=torch.float32))
    if args.init:  # a second budget on a saved draft (same preset)
        draft.load_state_dict(AutoModelForCausalLM.from_pretrained(args.init, dtype=torch.float32).state_dict())
    print(f"target {count_params(target):,} params; draft {args.preset} {count_params(draft):,} params", flush=True)
    train = make_windows(load_texts(args.train), tokenizer, args.seq_len)
    held = make_windows(load_texts(args.valid), tokenizer, args.seq_len)[: args.val_windows]
    if args.generated:
        train = mix(generated_windows(args.generated, args.seq_len), train, args.generated_share, args.seed)
    elif args.target_share > 0:
        generated = target_text(target, train, args.target_samples, args.seed)
        repeat = max(1, round(args.target_share * len(train) / ((1 - args.target_share) * len(generated))))
        train = torch.cat([train, generated.repeat(repeat, 1)])
    kl_before = kl_on_batch(target, draft, held)
    tv_before = tv_on_batch(target, draft, held, args.temperature)
    print(f"{len(train):,} training windows; valid KL before {kl_before:.4f}", flush=True)
    start = time.time()
    result = distill(target, draft, train, steps=args.max_steps, seq_len=args.seq_len, batch_size=args.batch,
                     lr=args.lr, temperature=args.temperature, generated_fraction=args.generated_fraction,
                     max_seconds=args.minutes * 60, warmup=args.warmup, seed=args.seed, progress=True,
                     loss_fn=kl_loss(target, args.temperature, args.tv_weight) if args.tv_weight else None)
    kl_after = kl_on_batch(target, draft, held)
    tv_after = tv_on_batch(target, draft, held, args.temperature)
    tail = result.losses[-20:] or [math.nan]
    log = {"command": " ".join(sys.argv), "init": str(args.init) if args.init else None,
           "target": str(args.target), "preset": args.preset,
           "sizes": sizes, "grow_from": str(args.grow_from) if args.grow_from else None,
           "config": draft.config.to_dict(), "parameters": count_params(draft),
           "objective": "forward KL(p_target || q_draft), full distribution (DistillSpec)",
           "temperature": args.temperature, "target_share": args.target_share,
           "generated": [str(f) for f in args.generated], "generated_share": args.generated_share,
           "target_samples": args.target_samples, "generated_fraction": args.generated_fraction,
           "seq_len": args.seq_len, "batch": args.batch, "peak_lr": args.lr, "steps": result.steps,
           "tokens_seen": result.steps * args.batch * args.seq_len, "wall_seconds": round(time.time() - start, 1),
           "final_kl_loss": sum(tail) / len(tail), "valid_kl_before": kl_before, "valid_kl_after": kl_after,
           "tv_weight": args.tv_weight, "valid_tv_before": tv_before, "valid_tv_after": tv_after,
           "loss_history": result.losses[:: max(1, result.steps // 200)]}
    save_model(draft, tokenizer, args.out, log)
    print(f"held-out TV at T = {args.temperature} (1 - alpha): {tv_before:.4f} -> {tv_after:.4f}", flush=True)
    print(f"steps {result.steps}, final train KL {log['final_kl_loss']:.4f}, valid KL {kl_before:.4f} -> "
          f"{kl_after:.4f}; saved to {args.out}", flush=True)
    return log


if __name__ == "__main__":
    main()
