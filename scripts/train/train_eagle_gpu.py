"""Train the feature draft (``specviz.drafts.eagle``) on a CUDA machine, on text the target generates there: minutes of a GPU
give what hours of this project's 2-core CPU give (``scripts/train/train_eagle.py``).

    python scripts/train/train_eagle_gpu.py --init assets/models/target --generate-minutes 2 --minutes 5 --out OUT

1. The target (bundled: the very weights the app serves) continues random corpus prefixes of 32 tokens to windows of
   ``--seq-len`` tokens, batched: by default half at T = 0.8, a quarter at T = 1 and a quarter greedy (``--modes``;
   its own distribution where the draft is used: DistillSpec's on-policy data), for ``--generate-minutes``.
2. The draft trains as ``train_eagle.py`` does (unrolled ``--steps`` steps over its own hidden states, forward KL at
   T = 1 on every step, or ``--objective tv``: the total variation at ``--temperature``, weights 0.8^s) on those
   windows and a ``--corpus-share`` of corpus windows, for ``--minutes``.
3. Held-out alpha per step (corpus validation windows) before and after; saved as ``eagle.safetensors`` and
   ``eagle.json`` in ``--out``. ``--device cpu`` with tiny budgets is a dry run of the same steps.
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from train_eagle import describe, objective, report  # noqa: E402
from train_lm import load_texts  # noqa: E402

from specviz.drafts import eagle  # noqa: E402
from specviz.drafts.distill import make_windows  # noqa: E402
from specviz.models import load_model  # noqa: E402

MODES = "0.8,1,0.8,greedy"  # the temperature of each generated batch, cycled ("greedy": argmax)


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="target")
    ap.add_argument("--init", type=Path, help="continue from this folder's eagle.safetensors")
    ap.add_argument("--train", type=Path, default=ROOT / "data/corpus/train.jsonl")
    ap.add_argument("--valid", type=Path, default=ROOT / "data/corpus/valid.jsonl")
    ap.add_argument("--generate-minutes", type=float, default=2.0)
    ap.add_argument("--gen-batch", type=int, default=512)
    ap.add_argument("--prefix", type=int, default=32)
    ap.add_argument("--modes", default=MODES, help="temperatures of the generated batches, cycled (greedy: argmax)")
    ap.add_argument("--minutes", type=float, default=5.0)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--seq-len", type=int, default=192)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--lr", type=float, default=5e-4)
    ap.add_argument("--objective", choices=("kl", "tv"), default="kl",
                    help="kl: forward KL at --temperature; tv: TV there + --kl-weight x KL at T = 1 (train_eagle.py)")
    ap.add_argument("--temperature", type=float, default=1.0, help="the objective's temperature")
    ap.add_argument("--kl-weight", type=float, default=0.1)
    ap.add_argument("--corpus-share", type=float, default=0.2)
    ap.add_argument("--val-windows", type=int, default=48)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, required=True)
    return ap.parse_args(argv)


@torch.no_grad()
def generate(target, corpus: torch.Tensor, args, g: torch.Generator) -> tuple[torch.Tensor, dict]:
    """Windows of the target's own text, (N, seq_len), continuing corpus prefixes; and how many of each mode."""
    out, counts, start, i = [], {}, time.time(), 0
    modes = [(0.0, False) if m == "greedy" else (float(m), True) for m in args.modes.split(",")]
    while time.time() - start < args.generate_minutes * 60 or not out:
        t, sampled = modes[i % len(modes)]
        pick = torch.randint(0, len(corpus), (args.gen_batch,), generator=g)
        prefix = corpus[pick, : args.prefix].to(args.device)
        new = args.seq_len - args.prefix
        options = dict(do_sample=True, temperature=t, top_k=0, top_p=1.0) if sampled else dict(do_sample=False)
        ids = target.generate(prefix, max_new_tokens=new, min_new_tokens=new, pad_token_id=0, **options)
        out.append(ids[:, : args.seq_len].cpu())
        key = f"T={t:g}" if sampled else "greedy"
        counts[key] = counts.get(key, 0) + len(ids)
        i += 1
    print(f"generated {sum(counts.values())} windows {counts} in {time.time() - start:.0f} s", flush=True)
    return torch.cat(out), counts


def main(argv=None) -> dict:
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    torch.backends.cuda.matmul.allow_tf32 = True
    g = torch.Generator().manual_seed(args.seed)
    target, tok = load_model(args.target, device=args.device, dtype=torch.float32)
    target = target.eval()
    for p in target.parameters():
        p.requires_grad_(False)
    head = (eagle.load(target, args.init) if args.init else eagle.FeatureHead(target.config)).float().to(args.device)
    corpus = make_windows(load_texts(args.train), tok, args.seq_len)
    held = make_windows(load_texts(args.valid), tok, args.seq_len)[: args.val_windows].to(args.device)
    before = report(head.eval(), target, held, args.steps)
    generated, counts = generate(target, corpus, args, g)
    n_corpus = int(len(generated) * args.corpus_share / (1 - args.corpus_share))
    data = torch.cat([generated, corpus[torch.randperm(len(corpus), generator=g)[:n_corpus]]])
    head.train()
    params = [p for p in head.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.0, betas=(0.9, 0.95))
    weights, losses, step, start = [0.8 ** s for s in range(args.steps)], [], 0, time.time()
    loss_of = objective(args)
    while time.time() - start < args.minutes * 60:
        frac = (time.time() - start) / (args.minutes * 60)
        for group in opt.param_groups:
            group["lr"] = args.lr * min(1.0, (step + 1) / 50) * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * frac)))
        ids = data[torch.randint(0, len(data), (args.batch,), generator=g)].to(args.device)
        with torch.no_grad():
            features, p_logits = eagle.target_features(target, ids)
        q_all = eagle.unroll(head, target, ids, features, args.steps)
        loss = sum(w * loss_of(p_logits[:, s:], q[:, s:]) for s, (w, q) in enumerate(zip(weights, q_all)))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        losses.append(float(loss.detach()))
        step += 1
        if step % 100 == 0:
            print(f"step {step} loss {sum(losses[-100:]) / 100:.4f} ({time.time() - start:.0f} s)", flush=True)
    after = report(head.eval(), target, held, args.steps)
    log = {"command": " ".join(sys.argv), "target": args.target, "init": str(args.init) if args.init else None,
           "device": torch.cuda.get_device_name() if args.device.startswith("cuda") else args.device,
           "generated_windows": counts, "corpus_windows": n_corpus, "steps": step,
           "tokens_seen": step * args.batch * args.seq_len, "wall_seconds": round(time.time() - start, 1),
           "objective": describe(args),
           "held_out_before": before, "held_out_after": after, "loss_history": losses[:: max(1, step // 200)]}
    args.out.mkdir(parents=True, exist_ok=True)
    path = eagle.save(head.cpu(), args.out, log)
    print(f"steps {step}; saved to {path}", flush=True)
    return log


if __name__ == "__main__":
    main()
