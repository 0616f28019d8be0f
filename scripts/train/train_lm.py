#!/usr/bin/env python
"""Train a small LlamaForCausalLM on the corpus with next-token cross-entropy.

Used for the target model, and reusable for a cross-entropy-trained draft::

    python scripts/train/train_lm.py --preset target --minutes 65 --out assets/models/target
    python scripts/train/train_lm.py --preset tiny --minutes 10 --out assets/models/draft-tiny-ce

Documents are wrapped in <|bos|> ... <|eos|>, concatenated, and random windows
of ``--seq-len`` tokens are drawn (batch ``--batch``). AdamW; the learning-rate
schedule is defined by the wall-clock budget: linear warmup over the first
``--warmup`` fraction of ``--minutes``, then cosine decay to ``--min-lr-ratio`` of
the peak at the end of the budget, when training stops. Validation perplexity
and a float16 checkpoint (model + tokenizer + train_log.json in ``--out``) are
written every ``--ckpt-minutes``, so a killed run still leaves a usable model.
"""
from __future__ import annotations

import argparse
import copy
import json
import math
import shutil
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig, LlamaConfig, LlamaForCausalLM

ROOT = Path(__file__).resolve().parents[2]
TOKENIZER_DIR = ROOT / "assets/models/tokenizer"

# Model sizes (vocab 4096, tied embeddings). Param counts are printed at start.
SIZES: dict[str, dict[str, int]] = {
    "target": dict(hidden=320, layers=8, heads=8, kv_heads=4, intermediate=864),
    "small": dict(hidden=192, layers=4, heads=6, kv_heads=2, intermediate=768),
    "tiny": dict(hidden=128, layers=2, heads=4, kv_heads=2, intermediate=448),
    # one layer, wider: on a CPU a forward costs per layer more than per width, so this drafts cheapest
    "lite": dict(hidden=256, layers=1, heads=4, kv_heads=2, intermediate=768),
}


def make_config(sizes: dict[str, int], tokenizer, max_positions: int = 1024) -> LlamaConfig:
    """LlamaConfig for ``sizes`` (keys as in SIZES) and the tokenizer's special ids."""
    return LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=sizes["hidden"], num_hidden_layers=sizes["layers"],
        num_attention_heads=sizes["heads"], num_key_value_heads=sizes["kv_heads"],
        intermediate_size=sizes["intermediate"], max_position_embeddings=max_positions,
        tie_word_embeddings=True, rms_norm_eps=1e-5, attention_dropout=0.0,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id)


def build_model(sizes: dict[str, int], tokenizer, seed: int = 0) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    return LlamaForCausalLM(make_config(sizes, tokenizer)).float()


def count_params(model: torch.nn.Module) -> int:
    """Unique parameters (tied embedding counted once)."""
    return sum(p.numel() for p in model.parameters())


def load_texts(path: Path) -> list[str]:
    with Path(path).open(encoding="utf-8") as f:
        return [json.loads(line)["text"] for line in f]


def encode_docs(tokenizer, texts: list[str]) -> torch.Tensor:
    """One 1-D LongTensor: <|bos|> doc <|eos|> <|bos|> doc <|eos|> ..."""
    backend = tokenizer.backend_tokenizer
    bos, eos = tokenizer.bos_token_id, tokenizer.eos_token_id
    ids: list[int] = []
    for enc in backend.encode_batch(texts, add_special_tokens=False):
        ids += [bos, *enc.ids, eos]
    return torch.tensor(ids, dtype=torch.long)


def random_batch(tokens: torch.Tensor, batch: int, seq_len: int, gen: torch.Generator) -> torch.Tensor:
    """``batch`` random windows of ``seq_len + 1`` tokens (inputs + shifted labels)."""
    starts = torch.randint(0, len(tokens) - seq_len - 1, (batch,), generator=gen)
    return torch.stack([tokens[s:s + seq_len + 1] for s in starts.tolist()])


def lm_loss(model, window: torch.Tensor) -> torch.Tensor:
    logits = model(input_ids=window[:, :-1]).logits
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), window[:, 1:].reshape(-1))


@torch.no_grad()
def evaluate(model, tokens: torch.Tensor, seq_len: int, max_windows: int, batch: int = 16) -> float:
    """Mean next-token loss over consecutive non-overlapping validation windows."""
    model.eval()
    n = min(max_windows, (len(tokens) - 1) // seq_len)
    windows = torch.stack([tokens[i * seq_len:(i + 1) * seq_len + 1] for i in range(n)])
    total = 0.0
    for chunk in windows.split(batch):
        total += lm_loss(model, chunk).item() * len(chunk)
    model.train()
    return total / n


def lr_at(frac: float, peak: float, warmup: float, min_ratio: float) -> float:
    """LR as a function of the elapsed fraction of the time budget."""
    if frac < warmup:
        return peak * max(frac / warmup, 0.01)
    progress = min(1.0, (frac - warmup) / max(1e-9, 1.0 - warmup))
    return peak * (min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


@torch.no_grad()
def sample_text(model, tokenizer, prompt: str = "ROMEO:\n", new_tokens: int = 40) -> str:
    model.eval()
    ids = tokenizer(prompt, return_tensors="pt")["input_ids"]
    out = model.generate(ids, max_new_tokens=new_tokens, do_sample=False)
    model.train()
    return tokenizer.decode(out[0], skip_special_tokens=True)


def save_model(model, tokenizer, out: Path, log: dict) -> None:
    """float16 safetensors + tokenizer + generation_config + train_log.json in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    half = copy.deepcopy(model).to(torch.float16)
    half.config.dtype = torch.float16
    half.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id)
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    half.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    (tmp / "train_log.json").write_text(json.dumps(log, indent=2) + "\n")
    for f in tmp.iterdir():  # replace files one by one; never leaves `out` empty
        f.replace(out / f.name)
    tmp.rmdir()


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", choices=sorted(SIZES), default="target")
    for key in ("hidden", "layers", "heads", "kv-heads", "intermediate"):
        ap.add_argument(f"--{key}", type=int, help="override the preset")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--minutes", type=float, default=60.0, help="wall-clock training budget")
    ap.add_argument("--train", type=Path, default=ROOT / "data/corpus/train.jsonl")
    ap.add_argument("--valid", type=Path, default=ROOT / "data/corpus/valid.jsonl")
    ap.add_argument("--tokenizer", type=Path, default=TOKENIZER_DIR)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=1.5e-3)
    ap.add_argument("--min-lr-ratio", type=float, default=0.1)
    ap.add_argument("--warmup", type=float, default=0.03, help="fraction of the budget")
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--ckpt-minutes", type=float, default=5.0)
    ap.add_argument("--val-windows", type=int, default=128, help="periodic eval size (final: all)")
    ap.add_argument("--log-every", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2, help="max torch threads")
    ap.add_argument("--adaptive-threads", type=int, default=1, help="1: periodically pick the faster of "
                    "1..--threads torch threads (CPU shared with other jobs); 0: always --threads")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--init", type=Path, help="start from this checkpoint's weights instead of random init")
    ap.add_argument("--grow-from", type=Path, help="start from this shallower checkpoint, each of its layers "
                    "followed by copies whose output projections are zero (the same function at step 0): "
                    "--layers must be a multiple of its depth")
    return ap.parse_args(argv)


def preset_sizes(args) -> dict[str, int]:
    sizes = dict(SIZES[args.preset])
    for key in sizes:
        value = getattr(args, key.replace("-", "_"), None)
        if value is not None:
            sizes[key] = value
    return sizes


def train(args) -> dict:
    torch.set_num_threads(args.threads)
    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    sizes = preset_sizes(args)
    model = build_model(sizes, tokenizer, args.seed)
    if args.init:  # continue from a saved checkpoint (same preset), e.g. after an interrupted run
        model.load_state_dict(AutoModelForCausalLM.from_pretrained(args.init, dtype=torch.float32).state_dict())
    if args.grow_from:
        grow(model, AutoModelForCausalLM.from_pretrained(args.grow_from, dtype=torch.float32))
    n_params = count_params(model)
    print(f"preset {args.preset} {sizes}: {n_params:,} parameters", flush=True)
    train_tok = encode_docs(tokenizer, load_texts(args.train))
    valid_tok = encode_docs(tokenizer, load_texts(args.valid))
    print(f"train tokens {len(train_tok):,}, valid tokens {len(valid_tok):,}", flush=True)
    opt = torch.optim.AdamW(_param_groups(model, args.weight_decay), lr=args.lr, betas=(0.9, 0.95))
    gen = torch.Generator().manual_seed(args.seed)
    log = {"command": " ".join(sys.argv), "preset": args.preset, "sizes": sizes,
           "config": model.config.to_dict(), "parameters": n_params, "seq_len": args.seq_len,
           "batch": args.batch, "peak_lr": args.lr, "budget_minutes": args.minutes,
           "train_tokens_available": len(train_tok), "history": []}
    budget, start = args.minutes * 60, time.time()
    last_ckpt, step, ema = start, 0, None
    threads = ThreadTuner(args.threads, enabled=bool(args.adaptive_threads))
    while (elapsed := time.time() - start) < budget:
        threads.before_step(step)
        for group in opt.param_groups:
            group["lr"] = lr_at(elapsed / budget, args.lr, args.warmup, args.min_lr_ratio)
        loss = lm_loss(model, random_batch(train_tok, args.batch, args.seq_len, gen))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        threads.after_step(step)
        step += 1
        ema = loss.item() if ema is None else 0.95 * ema + 0.05 * loss.item()
        if step % args.log_every == 0 or step == 1:
            tps = step * args.batch * args.seq_len / (time.time() - start)
            print(f"step {step} loss {loss.item():.4f} ema {ema:.4f} lr {opt.param_groups[0]['lr']:.2e} "
                  f"{tps:,.0f} tok/s elapsed {time.time() - start:.0f}s threads {torch.get_num_threads()}",
                  flush=True)
        if time.time() - last_ckpt > args.ckpt_minutes * 60:
            _checkpoint(model, tokenizer, args, log, step, ema, valid_tok, start, final=False)
            last_ckpt = time.time()
    return _checkpoint(model, tokenizer, args, log, step, ema, valid_tok, start, final=True)


@torch.no_grad()
def grow(deep, shallow) -> None:
    """Depth growth that keeps the function: deep layer i starts as shallow layer i // r (r = the depth
    ratio), and every copy after the first gets zero attention-output and MLP-down weights, so it adds
    nothing to the residual stream until training moves those weights (the other weights of a copy
    start as the original's, a better start than random)."""
    src, dst = shallow.model.layers, deep.model.layers
    if len(dst) % len(src):
        raise ValueError(f"--layers {len(dst)} is not a multiple of the checkpoint's {len(src)} layers")
    ratio = len(dst) // len(src)
    shared = {k: v for k, v in shallow.state_dict().items() if ".layers." not in k}
    deep.load_state_dict(shared, strict=False)
    for i, layer in enumerate(dst):
        layer.load_state_dict(src[i // ratio].state_dict())
        if i % ratio:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()


class ThreadTuner:
    """Re-measure step time with 1..max threads every ``period`` steps; keep the fastest.

    With 2 cores shared with other jobs, 2 OpenMP threads can be several times slower
    than 1 (threads wait on each other), so the choice is re-probed periodically.
    """

    def __init__(self, max_threads: int, enabled: bool = True, probe: int = 3, period: int = 60):
        self.options = list(range(max_threads, 0, -1)) if enabled else [max_threads]
        self.probe, self.period = probe, period
        self.best, self.times, self.t0 = max_threads, {}, 0.0
        torch.set_num_threads(max_threads)

    def _probing(self, step: int):
        k = step % self.period
        # step 0 of a period is a warm-up step for the first option, not timed
        idx = (k - 1) // self.probe if k >= 1 else None
        return self.options[idx] if idx is not None and idx < len(self.options) else None

    def before_step(self, step: int) -> None:
        option = self._probing(step) if len(self.options) > 1 else None
        torch.set_num_threads(option or (self.options[0] if step % self.period == 0 else self.best))
        self.t0 = time.perf_counter()

    def after_step(self, step: int) -> None:
        option = self._probing(step) if len(self.options) > 1 else None
        if option is None:
            return
        self.times.setdefault(option, []).append(time.perf_counter() - self.t0)
        if step % self.period == self.probe * len(self.options):  # last probe step
            self.best = min(self.times, key=lambda o: sorted(self.times[o])[len(self.times[o]) // 2])
            self.times = {}


def _param_groups(model, weight_decay: float) -> list[dict]:
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def _checkpoint(model, tokenizer, args, log, step, ema, valid_tok, start, final: bool) -> dict:
    windows = 10**9 if final else args.val_windows
    val = evaluate(model, valid_tok, args.seq_len, windows)
    wall = time.time() - start
    entry = {"step": step, "tokens_seen": step * args.batch * args.seq_len, "wall_seconds": round(wall, 1),
             "train_loss_ema": ema, "valid_loss": val, "valid_ppl": math.exp(val)}
    log["history"].append(entry)
    log.update(entry, status="final" if final else "checkpoint", steps=step,
               final_train_loss=ema, sample=sample_text(model, tokenizer))
    save_model(model, tokenizer, args.out, log)
    print(f"[{'final' if final else 'checkpoint'}] step {step} valid loss {val:.4f} ppl {math.exp(val):.2f} "
          f"saved to {args.out}\n  sample: {log['sample']!r}", flush=True)
    return log


if __name__ == "__main__":
    train(parse_args())
