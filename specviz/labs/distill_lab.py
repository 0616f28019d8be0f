"""The distillation lab: train a draft towards a target with forward KL (``specviz.drafts.distill``) for a short
wall-clock budget, checkpointing its held-out KL(p || q) and its acceptance rate against the target as
it goes; and, for comparison, an identical draft trained for the same budget with plain next-token
cross-entropy on the same batches.

Notation: p the target, q the draft; alpha = E[sum_v min(p, q)], the expected acceptance rate, which
falls as KL(p || q) rises (DistillSpec, Zhou et al. 2023).
"""
from __future__ import annotations

import copy
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pandas as pd
import torch
import torch.nn.functional as F
from transformers import LlamaConfig, LlamaForCausalLM

from ..config import DecodeConfig
from ..decoder import speculative_generate
from ..drafts.distill import as_windows, iter_distill, kl_on_batch
from ..runtime.lm import context_window

KL, CE = "distill (KL)", "cross-entropy"
FRESH_DRAFT = dict(hidden=128, layers=2, heads=4, kv_heads=2, intermediate=448)  # scripts/train/train_lm.py's "tiny"
POINT_COLUMNS = ["method", "step", "seconds", "loss", "heldout_kl", "acceptance", "alpha"]


def fresh_draft(target, sizes: dict = FRESH_DRAFT, seed: int = 0) -> LlamaForCausalLM:
    """A randomly initialised Llama draft on the target's vocabulary and special tokens."""
    tc = target.config.get_text_config() if hasattr(target.config, "get_text_config") else target.config
    cfg = LlamaConfig(
        vocab_size=target.get_output_embeddings().weight.shape[0], hidden_size=sizes["hidden"],
        num_hidden_layers=sizes["layers"], num_attention_heads=sizes["heads"], num_key_value_heads=sizes["kv_heads"],
        intermediate_size=sizes["intermediate"], max_position_embeddings=context_window(target) or 1024,
        tie_word_embeddings=True, rms_norm_eps=1e-5, bos_token_id=getattr(tc, "bos_token_id", None),
        eos_token_id=getattr(tc, "eos_token_id", None), pad_token_id=getattr(tc, "pad_token_id", None))
    torch.manual_seed(seed)
    return LlamaForCausalLM(cfg).float().eval()


def ce_loss(model, batch: torch.Tensor) -> torch.Tensor:
    """Next-token cross-entropy on windows (B, L): predict batch[:, 1:] from batch[:, :-1]."""
    logits = model(input_ids=batch).logits[:, :-1]
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), batch[:, 1:].reshape(-1))


@torch.no_grad()
def checkpoint(target, draft, prompts: list, heldout: torch.Tensor, k: int = 4, new_tokens: int = 16,
               temperature: float = 1.0) -> dict:
    """Held-out KL(p || q), and the acceptance rate and alpha of speculative decoding on ``prompts``."""
    was_training = draft.training
    draft.eval()
    kl = kl_on_batch(target, draft, heldout)
    cfg = DecodeConfig(k=k, max_new_tokens=new_tokens, temperature=temperature, seed=0)
    counts = sum(speculative_generate(target, draft, ids, cfg).counts() for ids in prompts)
    draft.train(was_training)
    return dict(heldout_kl=kl, acceptance=counts.acceptance_rate, alpha=counts.alpha)


def _budgeted(method: str, loop, seconds: float, evaluate, eval_every_s: float) -> Iterator[dict]:
    """Run a (step, loss) loop within ``seconds`` of wall time, checkpoints included: a checkpoint at the start,
    every ``eval_every_s`` of training and at the end, training stopping early enough to leave time for the last
    one (its cost measured by the first). Points carry ``seconds``: the training time so far."""
    start = time.perf_counter()
    trained, next_eval, step = 0.0, eval_every_s, 0
    first = dict(method=method, step=0, seconds=0.0) | evaluate()
    eval_s = time.perf_counter() - start  # what one checkpoint costs on this machine
    yield first
    try:
        while time.perf_counter() - start + eval_s < seconds:
            t0 = time.perf_counter()
            try:
                step, loss = next(loop)
            except StopIteration:
                break
            trained += time.perf_counter() - t0
            yield dict(method=method, step=step + 1, seconds=trained, loss=loss)
            if trained >= next_eval and time.perf_counter() - start + 2 * eval_s < seconds:
                next_eval += eval_every_s
                yield dict(method=method, step=step + 1, seconds=trained) | evaluate()
    finally:
        loop.close()
    yield dict(method=method, step=step + 1, seconds=trained) | evaluate()


def iter_distill_lab(target, drafts: dict, data, prompts: list, *, tokenizer=None, seconds: float = 30.0,
                     eval_every_s: float = 5.0, seq_len: int = 64, batch_size: int = 8, lr: float = 2e-3,
                     heldout_windows: int = 4, max_steps: int = 100_000, seed: int = 0) -> Iterator[dict]:
    """Train each of ``drafts`` ({KL: model, CE: model}, in place) within ``seconds`` each, checkpoints included
    (at least one checkpoint before and after), and yield points
    (columns POINT_COLUMNS): a loss per step, and checkpoints with held-out KL and acceptance."""
    windows = as_windows(data, tokenizer, seq_len)
    if len(windows) <= heldout_windows:
        raise ValueError(f"only {len(windows)} windows of {seq_len} tokens: give more text to train on")
    train, heldout = windows[:-heldout_windows], windows[-heldout_windows:]
    opts = dict(steps=max_steps, seq_len=seq_len, batch_size=batch_size, lr=lr, warmup=10, seed=seed)
    for method, draft in drafts.items():
        if method == KL:
            loop = iter_distill(target, draft, train, **opts)
        elif method == CE:
            loop = iter_distill(None, draft, train, loss_fn=ce_loss, **opts)  # same loop, plain CE
        else:
            raise ValueError(f"method must be {KL!r} or {CE!r}, got {method!r}")
        yield from _budgeted(method, loop, seconds, lambda d=draft: checkpoint(target, d, prompts, heldout), eval_every_s)


def lab_drafts(target, start=None, compare_ce: bool = True, seed: int = 0) -> dict:
    """Identical starting drafts, one per method: copies of ``start`` or fresh tiny Llamas."""
    make = (lambda: copy.deepcopy(start).float()) if start is not None else (lambda: fresh_draft(target, seed=seed))
    return {KL: make()} | ({CE: make()} if compare_ce else {})


@dataclass
class DistillLab:
    points: pd.DataFrame  # POINT_COLUMNS; training points have a loss, checkpoints the eval columns
    drafts: dict  # method -> the trained draft


def distill_lab(target, data, prompts: list, *, start=None, compare_ce: bool = True, seed: int = 0,
                **kwargs) -> DistillLab:
    """From a notebook: distil (and optionally CE-train) a draft for a budget; see iter_distill_lab."""
    drafts = lab_drafts(target, start, compare_ce, seed)
    points = list(iter_distill_lab(target, drafts, data, prompts, seed=seed, **kwargs))
    return DistillLab(pd.DataFrame(points, columns=POINT_COLUMNS), drafts)
