"""The distillation lab: train a draft towards a target with forward KL (``specviz.drafts.distill``) and, for
comparison, an identical draft with plain next-token cross-entropy, for the same number of optimiser steps on the
same batches (a KL step also runs the target, so it costs more seconds: seconds would hand cross-entropy more
steps), checkpointing each one's held-out KL(p || q) and its acceptance against the target at the same steps.

Notation: p the target, q the draft; alpha = E[sum_v min(p, q)], the expected acceptance rate, computed exactly at
every held-out position (the target's logits there computed once); the acceptance counted in speculative decoding
on a few prompts, where prompts are given, beside it. DistillSpec (Zhou et
al. 2023) trains on KL because a lower KL(p || q) tends to give a higher alpha; on a few steps of a tiny draft either
loss can come out ahead, and the lab's points say which did.
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
from ..drafts.distill import as_windows, forward_kl, iter_distill, total_variation
from ..runtime.lm import context_window
from ..runtime.threads import policy
from ..trace import Counts

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
               temperature: float = 1.0, p_logits: torch.Tensor | None = None) -> dict:
    """Held-out KL(p || q) and alpha, the mean of beta = sum_v min(p, q) over every held-out position (exact: the
    acceptance rate a draft sampled from q would have there, at ``temperature``); and the acceptance rate counted in
    speculative decoding on ``prompts`` (NaN where none are given). ``p_logits``: the target's logits on
    ``heldout``, computed once by the caller (else here)."""
    was_training = draft.training
    draft.eval()
    if p_logits is None:
        p_logits = target(input_ids=heldout).logits
    q_logits = draft(input_ids=heldout).logits
    kl = forward_kl(p_logits, q_logits, temperature).item()
    alpha = 1.0 - total_variation(p_logits, q_logits, temperature).item()
    cfg = DecodeConfig(k=k, max_new_tokens=new_tokens, temperature=temperature, seed=0)
    counts = sum((speculative_generate(target, draft, ids, cfg).counts() for ids in prompts), Counts())
    draft.train(was_training)
    return dict(heldout_kl=kl, alpha=alpha, acceptance=counts.acceptance_rate if prompts else float("nan"))


def _loops(target, drafts: dict, train: torch.Tensor, opts: dict) -> dict:
    """One (step, loss) loop per method, each on the same batches, optimiser and schedule."""
    loops = {}
    for method, draft in drafts.items():
        if method == KL:
            loops[method] = iter_distill(target, draft, train, **opts)
        elif method == CE:
            loops[method] = iter_distill(None, draft, train, loss_fn=ce_loss, **opts)  # same loop, plain CE
        else:
            raise ValueError(f"method must be {KL!r} or {CE!r}, got {method!r}")
    return loops


def _split(windows: torch.Tensor, heldout: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(training windows, the last ``heldout`` windows), a ValueError where too few are left to train on."""
    if len(windows) <= heldout:
        raise ValueError(f"only {len(windows)} windows of {windows.shape[1]} tokens: give more text to train on")
    return windows[:-heldout], windows[-heldout:]


def iter_distill_lab(target, drafts: dict, data, prompts: list, *, tokenizer=None, steps: int = 40,
                     eval_every: int = 10, seconds: float | None = None, seq_len: int = 32, batch_size: int = 4,
                     lr: float = 3e-3, heldout_windows: int = 4, seed: int = 0) -> Iterator[dict]:
    """Train every draft of ``drafts`` ({KL: model, CE: model}, in place) for ``steps`` optimiser steps, one step
    of each in turn, and yield points (POINT_COLUMNS): a loss per step, and checkpoints (held-out KL, acceptance)
    of every method at the same steps: 0, every ``eval_every`` and the last. ``seconds``: the lab's wall time, all
    methods and checkpoints together; where the next round of steps and the last checkpoints would not fit, every
    method stops at the same step (a checkpoint's cost measured by the first ones). ``seconds`` of a point: that
    method's training time so far."""
    if steps < 1 or eval_every < 1:
        raise ValueError(f"steps and eval_every must be at least 1, got {steps} and {eval_every}")
    train, heldout = _split(as_windows(data, tokenizer, seq_len), heldout_windows)
    loops = _loops(target, drafts, train, dict(steps=steps, seq_len=seq_len, batch_size=batch_size, lr=lr,
                                              warmup=min(10, max(1, steps // 10)), seed=seed))
    start, trained = time.perf_counter(), dict.fromkeys(drafts, 0.0)
    with torch.no_grad(), policy.team():
        p_logits = target.eval()(input_ids=heldout).logits  # the target's side of every checkpoint, once

    def checkpoints(step):
        with policy.team():
            return [dict(method=m, step=step, seconds=trained[m]) | checkpoint(target, d, prompts, heldout,
                                                                               p_logits=p_logits)
                    for m, d in drafts.items()]

    def one_round(step):  # one step of every method, on the threads the free cores allow (not while yielding)
        out = []
        with policy.team():
            for method, loop in loops.items():
                t0 = time.perf_counter()
                _, loss = next(loop)
                trained[method] += time.perf_counter() - t0
                out.append(dict(method=method, step=step, seconds=trained[method], loss=loss))
        return out

    yield from checkpoints(0)
    evals_s, step_s, done = time.perf_counter() - start, 0.0, 0  # what a round of checkpoints costs here
    try:
        while done < steps and (seconds is None or time.perf_counter() - start + step_s + evals_s < seconds):
            t_round = time.perf_counter()
            yield from one_round(done + 1)
            done, step_s = done + 1, time.perf_counter() - t_round
            if done % eval_every == 0 and done < steps:
                yield from checkpoints(done)
    finally:
        for loop in loops.values():
            loop.close()
    if done and (done % eval_every or done == steps):
        yield from checkpoints(done)


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
    """From a notebook: distil (and optionally CE-train) a draft for the same number of steps; see
    iter_distill_lab."""
    drafts = lab_drafts(target, start, compare_ce, seed)
    points = list(iter_distill_lab(target, drafts, data, prompts, seed=seed, **kwargs))
    return DistillLab(pd.DataFrame(points, columns=POINT_COLUMNS), drafts)
