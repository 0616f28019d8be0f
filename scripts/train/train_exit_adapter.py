"""Train an exit adapter: one decoder layer after the target's first L layers, so that the early exit "TARGET@L"
drafts closer to the full target (``specviz.drafts.early_exit``; LayerSkip's self-speculation with a small trained head).

    python scripts/train/train_exit_adapter.py --target assets/models/target --layers 4 \
        --generated data/gen24/greedy.pt data/gen24/t08.pt --minutes 20 --threads 1

The target is frozen; only the adapter (initialised as a copy of layer L + 1) learns, with the forward KL
KL(p_target || q_exit) over the full distributions (``specviz.drafts.distill``), on windows of the target's own text and
the corpus. Saved beside the target as ``exit_adapter_L.safetensors`` (8-bit rows, ``specviz.runtime.int8``) with
``exit_adapter_L.json`` (the command, steps, held-out KL before and after, and the untrained exit's KL at L for
reference); the app then offers "TARGET@L+adapter".
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
from safetensors.torch import save_file

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from distill_draft import generated_windows, mix  # noqa: E402
from train_lm import load_texts  # noqa: E402

from specviz.drafts.distill import distill, kl_on_batch, make_windows  # noqa: E402
from specviz.drafts.early_exit import adapter_file, early_exit, new_adapter  # noqa: E402
from specviz.models import load_model  # noqa: E402
from specviz.runtime import int8  # noqa: E402


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", type=Path, default=ROOT / "assets/models/target")
    ap.add_argument("--layers", type=int, required=True, help="the exit: the target's first L layers")
    ap.add_argument("--generated", type=Path, nargs="*", default=[])
    ap.add_argument("--generated-share", type=float, default=0.8)
    ap.add_argument("--train", type=Path, default=ROOT / "data/corpus/train.jsonl")
    ap.add_argument("--valid", type=Path, default=ROOT / "data/corpus/valid.jsonl")
    ap.add_argument("--minutes", type=float, default=20)
    ap.add_argument("--seq-len", type=int, default=192)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("--val-windows", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None, help="folder to save into (default: the target's)")
    return ap.parse_args(argv)


def main(argv=None) -> dict:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    target, tokenizer = load_model(str(args.target), device="cpu")
    for p in target.parameters():
        p.requires_grad_(False)  # frozen: only the adapter learns
    adapter = new_adapter(target, args.layers)
    for p in adapter.parameters():
        p.requires_grad_(True)
    draft = early_exit(target, args.layers, adapter)
    train = make_windows(load_texts(args.train), tokenizer, args.seq_len)
    held = make_windows(load_texts(args.valid), tokenizer, args.seq_len)[: args.val_windows]
    if args.generated:
        train = mix(generated_windows(args.generated, args.seq_len), train, args.generated_share, args.seed)
    plain = kl_on_batch(target, early_exit(target, args.layers), held, args.temperature)
    before = kl_on_batch(target, draft, held, args.temperature)
    print(f"valid KL at T = {args.temperature}: exit@{args.layers} {plain:.4f}; with the untrained adapter (the exit "
          f"at {args.layers + 1}) {before:.4f}", flush=True)
    start = time.time()
    result = distill(target, draft, train, steps=100_000, seq_len=args.seq_len, batch_size=args.batch, lr=args.lr,
                     temperature=args.temperature, max_seconds=args.minutes * 60, warmup=10, seed=args.seed,
                     progress=True)
    target.eval()
    after = kl_on_batch(target, draft, held, args.temperature)
    out = args.out or args.target
    save_file(int8.pack(adapter.state_dict()), str(adapter_file(out, args.layers)))  # 8 bits, as the family
    log = {"command": " ".join(sys.argv), "target": str(args.target), "layers": args.layers,
           "parameters": sum(p.numel() for p in adapter.parameters()), "steps": result.steps,
           "tokens_seen": result.steps * args.batch * args.seq_len, "wall_seconds": round(time.time() - start, 1),
           "temperature": args.temperature, "valid_kl_exit": plain, "valid_kl_before": before,
           "valid_kl_after": after, "generated": [str(g) for g in args.generated]}
    (Path(out) / f"exit_adapter_{args.layers}.json").write_text(json.dumps(log, indent=2) + "\n")
    print(f"steps {result.steps}; valid KL exit@{args.layers} {plain:.4f}, untrained adapter {before:.4f}, trained "
          f"{after:.4f}; saved to {adapter_file(out, args.layers)}", flush=True)
    return log


if __name__ == "__main__":
    main()
