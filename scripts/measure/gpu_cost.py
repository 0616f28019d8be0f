"""Forward-pass costs on a GPU for random-init GPT-2-style targets of a few sizes (no downloads).

For each size, after a cached prefill of --context tokens: the time of a one-token forward (a decoding
step, and a draft step when the model drafts) and of a (k+1)-token forward (speculative verification),
median over --reps, with the cache cropped back after each. verify/step near 1 is what makes
speculative decoding pay; c = a small model's step / a large model's step is the draft cost ratio.

    python scripts/measure/gpu_cost.py --device cuda            # bf16, GPT-2 small .. XL shapes
    python scripts/measure/gpu_cost.py --device cpu --sizes 2x64,2x128 --dtype float32 --reps 3   # smoke run
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch
from transformers import GPT2Config, GPT2LMHeadModel

from specviz.runtime.lm import CachedLM

GPT2_SHAPES = "12x768,24x1024,36x1280,48x1600"  # layers x width of GPT-2 small, medium, large, XL


def build(layers: int, width: int, dtype, device) -> GPT2LMHeadModel:
    cfg = GPT2Config(n_layer=layers, n_embd=width, n_head=max(1, width // 64), n_positions=2048)
    with torch.device(device):
        return GPT2LMHeadModel(cfg).to(dtype).eval()


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def time_forward(model, context: int, tokens: int, reps: int, device: str) -> float:
    """Median seconds of a ``tokens``-token forward on top of a cached ``context``-token prefix
    (specviz's CachedLM: the cache the decoder uses, rolled back after each call)."""
    ids = torch.randint(0, model.config.vocab_size, (context + tokens,)).tolist()
    lm = CachedLM(model)
    lm.feed(ids[:context])
    times = []
    for _ in range(reps + 2):  # two warm-up calls
        sync(device)
        start = time.perf_counter()
        lm.feed(ids[context:])
        sync(device)
        times.append(time.perf_counter() - start)
        lm.rollback(context)
    return statistics.median(times[2:])


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    ap.add_argument("--sizes", default=GPT2_SHAPES, help="comma-separated LAYERSxWIDTH")
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--context", type=int, default=256)
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args(argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit("no CUDA device: run with --device cpu for a smoke run")
    dtype = getattr(torch, args.dtype)
    rows = []
    for shape in args.sizes.split(","):
        layers, width = (int(x) for x in shape.lower().split("x"))
        model = build(layers, width, dtype, args.device)
        params = sum(p.numel() for p in model.parameters())
        step = time_forward(model, args.context, 1, args.reps, args.device)
        verify = time_forward(model, args.context, args.k + 1, args.reps, args.device)
        rows.append((f"{layers}x{width}", params, step, verify))
        del model
        if args.device.startswith("cuda"):
            torch.cuda.empty_cache()
    name = torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu"
    print(f"device {name}, {args.dtype}, context {args.context}, k {args.k}, median of {args.reps}\n")
    print(f"| shape | parameters | 1-token forward (ms) | {args.k + 1}-token forward (ms) | verify / step | "
          f"c = smallest step / this step |")
    print("|---|---|---|---|---|---|")
    for shape, params, step, verify in rows:
        print(f"| {shape} | {params / 1e6:.0f}M | {step * 1e3:.2f} | {verify * 1e3:.2f} | {verify / step:.2f} | "
              f"{rows[0][2] / step:.3f} |")


if __name__ == "__main__":
    main()
