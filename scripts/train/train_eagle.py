"""Train a feature draft (``specviz.drafts.eagle``: EAGLE's one decoder layer over the target's last hidden states) for a
target, with training-time test: the draft unrolled over its own features for ``--steps`` steps in each pass.

    python scripts/train/train_eagle.py --target assets/models/target \
        --generated data/gen24/greedy.pt data/gen24/t08.pt --minutes 60 --out assets/models/target

The target is frozen. Each step: the target's features and logits over a batch of windows (its own generated text
and the corpus), the draft unrolled, and the forward KL(p || q) of every step (weights 0.8^s) over the full
distributions. Saved as ``eagle.safetensors`` (8-bit rows, ``specviz.runtime.int8``) and ``eagle.json`` (command, steps,
held-out alpha per step at T = 0.8 and greedy, before and after, beside a reference draft's) in ``--out``; the app
then offers "TARGET+eagle". A checkpoint is written every ``--save-every`` minutes.
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from distill_draft import generated_windows, mix  # noqa: E402
from train_lm import load_texts  # noqa: E402

from specviz.drafts import eagle  # noqa: E402
from specviz.drafts.distill import make_windows, tv_on_batch  # noqa: E402
from specviz.models import load_model  # noqa: E402


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", type=Path, default=ROOT / "assets/models/target")
    ap.add_argument("--generated", type=Path, nargs="*", default=[])
    ap.add_argument("--generated-share", type=float, default=0.8)
    ap.add_argument("--train", type=Path, default=ROOT / "data/corpus/train.jsonl")
    ap.add_argument("--valid", type=Path, default=ROOT / "data/corpus/valid.jsonl")
    ap.add_argument("--held-generated", type=Path, help="held-out target text (default: the corpus' valid split)")
    ap.add_argument("--reference", type=Path, help="a draft model to report held-out alpha beside (e.g. lite)")
    ap.add_argument("--minutes", type=float, default=60)
    ap.add_argument("--steps", type=int, default=3, help="unrolled draft steps per window (training-time test)")
    ap.add_argument("--seq-len", type=int, default=192)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--temperature", type=float, default=1.0, help="the objective at this temperature")
    ap.add_argument("--objective", choices=("kl", "tv"), default="kl",
                    help="kl: forward KL(p || q); tv: the total variation 1 - alpha, what sampled acceptance loses "
                         "(DistillSpec), plus --kl-weight x KL at T = 1")
    ap.add_argument("--kl-weight", type=float, default=0.1, help="with --objective tv: the KL term's weight")
    ap.add_argument("--val-windows", type=int, default=24)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--init", type=Path, help="continue from this folder's eagle.safetensors")
    ap.add_argument("--save-every", type=float, default=10, help="minutes between checkpoints")
    ap.add_argument("--features", type=Path, help="the target's features of the training windows, computed once and "
                    "kept in this file (float16): each step then needs only the LM head over them, not the target")
    ap.add_argument("--out", type=Path, required=True)
    return ap.parse_args(argv)


def kl(p_logits: torch.Tensor, q_logits: torch.Tensor, temperature: float) -> torch.Tensor:
    log_p = F.log_softmax(p_logits.float() / temperature, -1)
    log_q = F.log_softmax(q_logits.float() / temperature, -1)
    return (log_p.exp() * (log_p - log_q)).sum(-1).mean()


def tv(p_logits: torch.Tensor, q_logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """Mean total variation between p and q at ``temperature``: 1 - alpha, the sampled rejection rate."""
    p = F.softmax(p_logits.float() / temperature, -1)
    q = F.softmax(q_logits.float() / temperature, -1)
    return 0.5 * (p - q).abs().sum(-1).mean()


def objective(args):
    """The loss of one unrolled step's logits: forward KL at --temperature, or TV there plus a little KL at T = 1."""
    if args.objective == "kl":
        return lambda p, q: kl(p, q, args.temperature)
    return lambda p, q: tv(p, q, args.temperature) + args.kl_weight * kl(p, q, 1.0)


def describe(args) -> str:
    what = (f"forward KL(p || q) at T = {args.temperature}" if args.objective == "kl" else
            f"TV(p, q) at T = {args.temperature} + {args.kl_weight} x forward KL at T = 1")
    return f"{what}, {args.steps} unrolled steps weighted 0.8^s"


@torch.no_grad()
def cached_features(target, train: torch.Tensor, path: Path, batch: int = 32) -> torch.Tensor:
    """The target's normed last hidden states over every training window, (N, T, d) float16, from ``path`` where it
    holds them for these windows, else computed (the target's one pass over the data) and saved there."""
    if path.is_file():
        saved = torch.load(path)
        if torch.equal(saved["ids"], train):
            return saved["features"]
    out = []
    for i in range(0, len(train), batch):
        out.append(target.model(input_ids=train[i:i + batch]).last_hidden_state.half())
        if i // batch % 20 == 0:
            print(f"features {i + batch}/{len(train)}", flush=True)
    features = torch.cat(out)
    torch.save({"ids": train, "features": features}, path)
    return features


def report(head, target, held, steps, reference=None) -> dict:
    out = {"T0.8": eagle.alpha_by_step(head, target, held, steps, 0.8)}
    if reference is not None:
        out["reference_alpha_T0.8"] = 1 - tv_on_batch(target, reference, held, 0.8)
    print("held-out: " + "; ".join(f"step {r['step']} alpha(0.8) {r['alpha']:.3f} greedy {r['greedy']:.3f}"
                                   for r in out["T0.8"])
          + (f"; reference alpha(0.8) {out['reference_alpha_T0.8']:.3f}" if reference is not None else ""), flush=True)
    return out


def _name(path: Path) -> str:
    """A bundled model's name for its folder in assets/models (load_model takes names or hub ids)."""
    return path.name if path.resolve().parent == (ROOT / "assets/models").resolve() else str(path)


def main(argv=None) -> dict:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    target, tokenizer = load_model(str(args.target), device="cpu")
    target = target.float().eval()
    for p in target.parameters():
        p.requires_grad_(False)
    head = eagle.load(target, args.init).float() if args.init else eagle.FeatureHead(target.config)
    head.train()
    train = make_windows(load_texts(args.train), tokenizer, args.seq_len)
    if args.held_generated:
        held = generated_windows([args.held_generated], args.seq_len)[-args.val_windows:]
    else:
        held = make_windows(load_texts(args.valid), tokenizer, args.seq_len)[: args.val_windows]
    if args.generated:
        train = mix(generated_windows(args.generated, args.seq_len), train, args.generated_share, args.seed)
    reference = load_model(_name(args.reference), device="cpu")[0].float().eval() if args.reference else None
    before = report(head.eval(), target, held, args.steps, reference)
    cache = cached_features(target, train, args.features) if args.features else None
    head.train()
    params = [p for n, p in head.named_parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.0, betas=(0.9, 0.95))
    weights, loss_of = [0.8 ** s for s in range(args.steps)], objective(args)
    g = torch.Generator().manual_seed(args.seed)
    start = last_save = time.time()
    budget, losses, step = args.minutes * 60, [], 0
    while time.time() - start < budget:
        frac = (time.time() - start) / budget
        for group in opt.param_groups:
            group["lr"] = args.lr * min(1.0, (step + 1) / 20) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))
        pick = torch.randint(0, len(train), (args.batch,), generator=g)
        ids = train[pick]
        with torch.no_grad():
            if cache is None:
                features, p_logits = eagle.target_features(target, ids)
            else:  # p from the kept features through the LM head: the target's own p, up to float16 rounding
                features = cache[pick].float()
                p_logits = target.lm_head(features)
        q_all = eagle.unroll(head, target, ids, features, args.steps)
        loss = sum(w * loss_of(p_logits[:, s:], q[:, s:]) for s, (w, q) in enumerate(zip(weights, q_all)))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        losses.append(float(loss.detach()))
        step += 1
        if step % 20 == 0:
            print(f"step {step} loss {sum(losses[-20:]) / 20:.4f} ({time.time() - start:.0f} s)", flush=True)
        if time.time() - last_save > args.save_every * 60:
            eagle.save(head, args.out, {"command": " ".join(sys.argv), "steps": step, "partial": True})
            last_save = time.time()
    head.eval()
    after = report(head, target, held, args.steps, reference)
    log = {"command": " ".join(sys.argv), "target": str(args.target), "init": str(args.init) if args.init else None,
           "parameters": sum(p.numel() for p in eagle.extra_parameters(head)),
           "objective": describe(args),
           "steps": step, "tokens_seen": step * args.batch * args.seq_len,
           "wall_seconds": round(time.time() - start, 1), "generated": [str(x) for x in args.generated],
           "held_out_before": before, "held_out_after": after, "loss_history": losses[:: max(1, step // 200)]}
    path = eagle.save(head, args.out, log)
    print(f"steps {step}; saved to {path}", flush=True)
    return log


if __name__ == "__main__":
    main()
