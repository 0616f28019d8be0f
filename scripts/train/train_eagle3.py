"""Train an EAGLE-3 draft for a target and save it in the speculators layout (config.json with
``speculators_model_type: "eagle3"``, model.safetensors with fc, layers.0.*, norm, lm_head, d2t and t2d), so that it
opens through the same path a downloaded one does (``specviz.load_drafter(folder)``, ``specviz.drafts.trained``).

    python scripts/train/train_eagle3.py --target target --tokens data/gen24/greedy.pt --draft-vocab 1024 \
        --steps 2000 --out assets/models/target-eagle3

The target is frozen. Its three tapped layers (the input of layers 2, L/2 and L-3, vLLM's reading) and its logits
come from one pass over each window of its own text (``--tokens``: a LongTensor of windows (N, T) saved with
torch.save; without it, windows the target samples itself from the example prompts). The draft vocabulary is the
``--draft-vocab`` ids most frequent in that text (t2d, d2t). Each update unrolls the draft ``--ttt`` steps (training-time
test, as speculators trains it: step s at row j reads the true states up to j and its own outputs after, and is fed the
token s places on) and minimises the forward KL from the target's p, restricted to the draft vocabulary, to q.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from specviz.config import EXAMPLE_PROMPTS, DecodeConfig  # noqa: E402
from specviz.decoder import speculative_generate  # noqa: E402
from specviz.drafts.trained.eagle3 import Eagle3Model  # noqa: E402
from specviz.drafts.trained.expect import eagle3_spec, eagle3_tensors  # noqa: E402
from specviz.drafts.trained.formats import Layout  # noqa: E402
from specviz.drafts.trained.load import load_trained, rotary_for  # noqa: E402
from specviz.drafts.trained.tap import Tap  # noqa: E402
from specviz.models import drafter_for, load_model  # noqa: E402


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="target")
    ap.add_argument("--tokens", type=Path, help="torch.save'd LongTensor (N, T) of the target's own text "
                    "(written there first where absent)")
    ap.add_argument("--draft-vocab", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--ttt", type=int, default=3)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--windows", type=int, default=10, help="windows of own text to generate without --tokens")
    ap.add_argument("--length", type=int, default=128, help="their length in tokens")
    ap.add_argument("--threads", type=int, default=1, help="torch threads")
    ap.add_argument("--minutes", type=float, help="stop at this wall time (whichever of it and --steps comes first)")
    ap.add_argument("--out", type=Path, required=True)
    return ap.parse_args(argv)


def config_for(target, draft_vocab: int) -> dict:
    """The speculators config.json: one Llama layer of the target's sizes, the target's three default taps."""
    c, n = target.config, target.config.num_hidden_layers
    layer = {"model_type": "llama", "hidden_size": c.hidden_size, "intermediate_size": c.intermediate_size,
             "num_attention_heads": c.num_attention_heads, "num_key_value_heads": c.num_key_value_heads,
             "head_dim": getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads,
             "num_hidden_layers": 1, "vocab_size": target.get_output_embeddings().weight.shape[0],
             "rms_norm_eps": c.rms_norm_eps, "max_position_embeddings": c.max_position_embeddings,
             "rope_parameters": getattr(c, "rope_parameters", None) or {"rope_type": "default", "rope_theta": 10000.0},
             "hidden_act": "silu", "attention_bias": False, "mlp_bias": False}
    return {"architectures": ["Eagle3DraftModel"], "speculators_model_type": "eagle3", "draft_vocab_size": draft_vocab,
            "eagle_aux_hidden_state_layer_ids": [2, n // 2, n - 3], "norm_before_residual": False,
            "norm_before_fc": False, "fc_norm": False, "norm_output": False, "target_hidden_size": None,
            "transformer_layer_config": layer,
            "speculators_config": {"algorithm": "eagle3", "default_proposal_method": "greedy",
                                   "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": 3}],
                                   "verifier": {"name_or_path": None, "architectures": [type(target).__name__]}}}


def vocab_maps(windows: torch.Tensor, vocab: int, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """t2d (vocab,) bool and d2t (size,) offsets: the ``size`` ids most frequent in the windows, ascending."""
    kept = torch.bincount(windows.flatten(), minlength=vocab).topk(size).indices.sort().values
    t2d = torch.zeros(vocab, dtype=torch.bool)
    t2d[kept] = True
    return t2d, kept - torch.arange(size)


def fresh_weights(layout: Layout, spec, target, kept: torch.Tensor, seed: int) -> dict[str, torch.Tensor]:
    """Every tensor the layout needs: norms at one, lm_head from the target's rows of the draft vocabulary, the rest
    small random; each a leaf that trains."""
    torch.manual_seed(seed)
    required, _ = eagle3_tensors(layout, spec)
    head = target.get_output_embeddings().weight.detach().float()
    out = {}
    for name, shape in required.items():
        if name in ("d2t", "t2d"):
            continue
        t = torch.ones(shape) if name.endswith("norm.weight") else 0.02 * torch.randn(shape)
        out[name] = t.requires_grad_()
    return out | {"lm_head.weight": head[kept].clone().requires_grad_()}


def unroll_mask(length: int, steps_so_far: int) -> torch.Tensor:
    """Step s (= steps_so_far) rows attend to step-0 rows up to their own and to their own row of every later step
    (speculators' combined causal + diagonal mask); (L, (s + 1) L)."""
    j = torch.arange(length)
    blocks = [j[None] <= j[:, None]] + [torch.eye(length, dtype=torch.bool) for _ in range(steps_so_far)]
    return torch.cat(blocks, dim=1)


def loss_on(window: torch.Tensor, target, model: Eagle3Model, tapped, ttt: int, cached=None) -> torch.Tensor:
    """Forward KL(p || q) over the draft vocabulary, mean over the unrolled steps, on one window (T,). Every step
    runs all L = T - 1 rows (row j: position j + 1 + s, the token s places on, zero past the end); step s at row j
    drafts the token after position j + 1 + s, whose p the target computed at that position. ``cached``: that
    window's (taps, log p) from ``features``."""
    L = len(window) - 1
    if cached is None:
        cached = features(window[None], target, model.ids, tapped)[0]
    taps, p = cached
    model.kv, model.length, total = [], 0, 0.0
    g = model.fuse(taps)
    for s in range(ttt):
        ids = torch.cat([window[1 + s:], window.new_zeros(s)])
        out, logits = model.forward(ids, g, torch.arange(1 + s, 1 + s + L), unroll_mask(L, s))
        q = torch.log_softmax(logits[: L - s, model.ids], -1)
        total = total + F.kl_div(q, p[1 + s:], log_target=True, reduction="batchmean")
        g = out
    return total / ttt


@torch.no_grad()
def own_text(target, target_name: str, tokenizer, windows: int = 10, length: int = 128) -> torch.Tensor:
    """Windows of the target's own text from the example prompts, written by specviz's exact speculative decoder
    with the feature draft (the target's own distribution, faster than decoding alone): even windows sampled at
    T = 0.8 (seed = the window's index), odd ones greedy from the first 16 tokens of the latest window; (windows,
    length)."""
    draft = drafter_for(target, target_name, "target+eagle")
    rows = []
    for i in range(windows):
        if i % 2 == 0:
            ids = tokenizer(EXAMPLE_PROMPTS[i // 2 % len(EXAMPLE_PROMPTS)], return_tensors="pt").input_ids
            cfg = DecodeConfig(k=5, temperature=0.8, max_new_tokens=length, seed=i, record=False)
        else:
            ids, cfg = rows[-1][None, :16], DecodeConfig(k=5, temperature=0, max_new_tokens=length - 16, record=False)
        row = torch.cat([ids[0], torch.tensor(speculative_generate(target, draft, ids, cfg).new_tokens)])[-length:]
        if len(row) == length:  # (one that stopped early at the end-of-text token is left out)
            rows.append(row)
        if i % 10 == 9:
            print(f"own text: {i + 1} of {windows} windows", flush=True)
    return torch.stack(rows)


@torch.no_grad()
def features(windows: torch.Tensor, target, ids: torch.Tensor, tapped, batch: int = 8) -> list[tuple[torch.Tensor, ...]]:
    """Per window (T,): the tapped states at its first T - 1 positions (transformers' ``hidden_states[i]``, the
    input of layer i, as ``Tap`` reads them) and the target's log p over the draft vocabulary at every position,
    computed once in batches (the target is frozen), so that each update runs only the draft."""
    out = []
    for rows in windows.split(batch):
        run = target(rows, output_hidden_states=True)
        taps = torch.cat([run.hidden_states[i] for i in tapped], dim=-1)[:, :-1].float()
        out += zip(taps, torch.log_softmax(run.logits.float()[..., ids], -1))
    first = Tap(target, tapped).states(windows[0].tolist())[: windows.shape[1] - 1].float()
    if not torch.allclose(first, out[0][0], atol=1e-3, rtol=1e-3):  # batched states = the states a run taps
        raise ValueError("the batched hidden states differ from the tapped ones: the taps would train on others")
    return out


def save(out: Path, config: dict, weights: dict, t2d: torch.Tensor, d2t: torch.Tensor, log: dict) -> None:
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().contiguous() for k, v in weights.items()} | {"t2d": t2d, "d2t": d2t}
    save_file(tensors, str(out / "model.safetensors"))
    (out / "config.json").write_text(json.dumps(config, indent=1) + "\n")
    (out / "train_log.json").write_text(json.dumps(log, indent=1) + "\n")


def main(argv=None) -> None:
    args = parse_args(argv)
    start = time.perf_counter()
    torch.set_num_threads(args.threads)
    target, tokenizer = load_model(args.target, dtype=torch.float32)
    for w in target.parameters():
        w.requires_grad_(False)
    if args.tokens and args.tokens.is_file():
        windows = torch.load(args.tokens)
    else:
        windows = own_text(target, args.target, tokenizer, args.windows, args.length)
        if args.tokens:
            torch.save(windows, args.tokens)
    vocab = target.get_output_embeddings().weight.shape[0]
    t2d, d2t = vocab_maps(windows, vocab, min(args.draft_vocab, vocab))
    config = config_for(target, len(d2t))
    layout = Layout("eagle3", args.out, config, {}, {})
    spec = eagle3_spec(layout)
    weights = fresh_weights(layout, spec, target, t2d.nonzero().flatten(), args.seed)
    model = Eagle3Model(spec, weights | {"d2t": d2t}, target.get_input_embeddings().weight.detach(),
                        rotary_for(spec, "cpu"))
    tapped = tuple(config["eagle_aux_hidden_state_layer_ids"])
    cached = features(windows, target, model.ids, tapped)
    print(f"{len(windows)} windows of {windows.shape[1]} tokens and their features: {time.perf_counter() - start:.0f} s",
          flush=True)
    opt = torch.optim.AdamW(list(weights.values()), lr=args.lr)
    gen, losses, steps = torch.Generator().manual_seed(args.seed), [], args.steps
    for step in range(args.steps):
        i = int(torch.randint(len(windows), (1,), generator=gen))
        loss = loss_on(windows[i], target, model, tapped, args.ttt, cached[i])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
        if step % 50 == 0 or step == args.steps - 1:
            print(f"step {step}: KL {loss:.4f} ({time.perf_counter() - start:.0f} s)", flush=True)
        if args.minutes and time.perf_counter() - start > 60 * args.minutes:
            steps = step + 1
            print(f"stopped at step {step} ({args.minutes} minutes)", flush=True)
            break
    save(args.out, config, {k: v.detach().half() for k, v in weights.items()}, t2d, d2t,
         {"command": " ".join(sys.argv), "steps": steps, "ttt": args.ttt, "windows": list(windows.shape),
          "draft_vocab": len(d2t), "minutes": round((time.perf_counter() - start) / 60, 1),
          "kl_first": losses[0], "kl_last_50": sum(losses[-50:]) / len(losses[-50:])})
    load_trained(args.out, target)  # the check a downloaded draft passes
    print(f"saved {args.out} (speculators layout, float16; checked against {args.target})")


if __name__ == "__main__":
    main()
