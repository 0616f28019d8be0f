"""Distil a draft model from a target model (DistillSpec, Zhou et al. 2023).

Notation: ``p`` is the TARGET model's next-token distribution, ``q`` is the
DRAFT model's. The draft is trained to minimise the forward KL divergence over
the full vocabulary at every position::

    KL(p || q) = sum_v p(v) * (log p(v) - log q(v)),   averaged over positions

with ``p = softmax(target_logits / T)`` and ``q = softmax(draft_logits / T)``
(``T`` = ``temperature``; the loss is not rescaled by ``T**2``). The target is
in eval mode under ``no_grad``; only the draft is updated (AdamW, linear
warmup then cosine decay). If the two vocabularies differ (e.g. padded
embeddings), logits are sliced to the shared range ``min(V_p, V_q)`` before the
softmax. A lower forward KL raises the expected acceptance rate of speculative
sampling, which is what DistillSpec optimises for.

Use :func:`distill` (returns a :class:`DistillResult`, optional ``callback`` for
live loss curves / early stop) or iterate :func:`iter_distill` directly.
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

__all__ = ["DistillResult", "distill", "iter_distill", "forward_kl", "total_variation", "kl_on_batch", "tv_on_batch",
           "make_windows"]


@dataclass
class DistillResult:
    """Loss history of a distillation run (one KL value per optimiser step)."""

    losses: list[float] = field(default_factory=list)
    seconds: float = 0.0
    stopped_early: bool = False

    @property
    def steps(self) -> int:
        return len(self.losses)


def forward_kl(p_logits: torch.Tensor, q_logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Mean over positions of KL(p || q); ``p_logits`` from the target, ``q_logits`` from the draft.

    Both are ``[..., V]``; the vocabulary is sliced to ``min(V_p, V_q)``.
    """
    shared = min(p_logits.size(-1), q_logits.size(-1))
    log_p = F.log_softmax(p_logits[..., :shared].float() / temperature, dim=-1)
    log_q = F.log_softmax(q_logits[..., :shared].float() / temperature, dim=-1)
    kl = (log_p.exp() * (log_p - log_q)).sum(-1)
    return kl.mean()


def total_variation(p_logits: torch.Tensor, q_logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Mean over positions of TV(p, q) = 0.5 sum |p - q| = 1 - sum min(p, q): one minus the acceptance rate
    beta that speculative sampling would have at that position (so minimising it maximises alpha directly)."""
    shared = min(p_logits.size(-1), q_logits.size(-1))
    p = F.softmax(p_logits[..., :shared].float() / temperature, dim=-1)
    q = F.softmax(q_logits[..., :shared].float() / temperature, dim=-1)
    return 0.5 * (p - q).abs().sum(-1).mean()


@torch.no_grad()
def tv_on_batch(target, draft, input_ids: torch.Tensor, temperature: float = 1.0) -> float:
    """TV(p_target, q_draft) on a fixed batch: 1 - the mean beta (alpha) the draft would have there."""
    was_training = draft.training
    draft.eval()
    target.eval()
    tv = total_variation(target(input_ids=input_ids).logits, draft(input_ids=input_ids).logits, temperature)
    draft.train(was_training)
    return tv.item()


@torch.no_grad()
def kl_on_batch(target, draft, input_ids: torch.Tensor, temperature: float = 1.0) -> float:
    """KL(p_target || q_draft) on a fixed batch, without training (for evaluation)."""
    was_training = draft.training
    draft.eval()
    target.eval()
    p_logits = target(input_ids=input_ids).logits
    q_logits = draft(input_ids=input_ids).logits
    draft.train(was_training)
    return forward_kl(p_logits, q_logits, temperature).item()


def make_windows(texts: Sequence[str], tokenizer, seq_len: int) -> torch.Tensor:
    """Tokenise documents as ``<bos> text <eos>``, concatenate, cut into ``[N, seq_len]`` windows."""
    bos, eos = tokenizer.bos_token_id, tokenizer.eos_token_id
    ids: list[int] = []
    for text in texts:
        body = tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"]
        ids += ([bos] if bos is not None else []) + body + ([eos] if eos is not None else [])
    n = len(ids) // seq_len
    if n == 0:
        raise ValueError(f"only {len(ids)} tokens: fewer than one window of {seq_len}")
    return torch.tensor(ids[: n * seq_len], dtype=torch.long).view(n, seq_len)


def as_windows(data, tokenizer, seq_len: int) -> torch.Tensor:
    """Accept texts (with a tokenizer), a 1-D token stream, or ``[N, L]`` windows."""
    if isinstance(data, torch.Tensor):
        if data.dim() == 2:
            return data.long()
        n = len(data) // seq_len
        return data[: n * seq_len].long().view(n, seq_len)
    if tokenizer is None:
        raise ValueError("texts given as strings need a tokenizer")
    return make_windows(list(data), tokenizer, seq_len)


def _lr_scale(step: int, steps: int, frac_time: float, warmup: int) -> float:
    """Linear warmup over ``warmup`` steps, then cosine to 10% by the end of steps/time budget."""
    if step < warmup:
        return (step + 1) / warmup
    progress = min(1.0, max((step - warmup) / max(1, steps - warmup), frac_time))
    return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress))


@torch.no_grad()
def _on_policy(draft, batch: torch.Tensor, n_rows: int, prompt_len: int) -> torch.Tensor:
    """Replace the first ``n_rows`` rows by draft samples continuing their first tokens."""
    if n_rows == 0:
        return batch
    draft.eval()
    out = draft.generate(batch[:n_rows, :prompt_len], max_new_tokens=batch.size(1) - prompt_len,
                         min_new_tokens=batch.size(1) - prompt_len, do_sample=True, top_k=0)
    draft.train()
    return torch.cat([out[:, : batch.size(1)], batch[n_rows:]])


def kl_loss(target, temperature: float = 1.0, tv_weight: float = 0.0) -> Callable:
    """The distillation objective as a loss function of (draft, batch): KL(p_target || q_draft), plus
    ``tv_weight`` times the total variation (1 - beta: what acceptance loses; DistillSpec's TVD)."""
    def loss(draft, batch):
        with torch.no_grad():
            p_logits = target(input_ids=batch).logits
        q_logits = draft(input_ids=batch).logits
        kl = forward_kl(p_logits, q_logits, temperature)
        return kl + tv_weight * total_variation(p_logits, q_logits, temperature) if tv_weight else kl
    return loss


def iter_distill(target, draft, data, *, steps: int = 200, seq_len: int = 128, batch_size: int = 8,
                 lr: float = 1e-3, temperature: float = 1.0, tokenizer=None, generated_fraction: float = 0.0,
                 max_seconds: float | None = None, warmup: int | None = None, weight_decay: float = 0.0,
                 seed: int = 0, loss_fn: Callable | None = None) -> Iterator[tuple[int, float]]:
    """Train ``draft`` towards ``target``; yield ``(step, kl)`` after each optimiser step.

    ``data``: texts (with ``tokenizer``), a 1-D token tensor or ``[N, L]`` windows.
    ``generated_fraction``: share of each batch replaced by draft samples (on-policy data).
    ``loss_fn(draft, batch)``: another objective on the same batches, optimiser and schedule (e.g. plain
    cross-entropy for a baseline; ``target`` may then be None). Default: :func:`kl_loss`.
    Stops after ``steps`` steps or ``max_seconds``; breaking out of the loop stops early.
    """
    windows = as_windows(data, tokenizer, seq_len)
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    if loss_fn is None:
        target.eval()
        loss_fn = kl_loss(target, temperature)
    draft.train()
    opt = torch.optim.AdamW(draft.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=weight_decay)
    warmup = max(1, steps // 20) if warmup is None else max(1, warmup)
    start = time.time()
    for step in range(steps):
        elapsed = time.time() - start
        if max_seconds is not None and elapsed >= max_seconds:
            return
        for group in opt.param_groups:
            group["lr"] = lr * _lr_scale(step, steps, elapsed / max_seconds if max_seconds else 0.0, warmup)
        batch = windows[torch.randint(0, len(windows), (batch_size,), generator=gen)]
        batch = _on_policy(draft, batch, round(generated_fraction * batch_size), max(1, batch.size(1) // 4))
        loss = loss_fn(draft, batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(draft.parameters(), 1.0)
        opt.step()
        yield step, loss.item()


def distill(target, draft, texts, *, steps: int = 200, seq_len: int = 128, batch_size: int = 8,
            lr: float = 1e-3, temperature: float = 1.0, tokenizer=None, generated_fraction: float = 0.0,
            max_seconds: float | None = None, seed: int = 0, progress: bool = True,
            callback: Callable[[int, float], bool | None] | None = None, **kwargs) -> DistillResult:
    """Minimise KL(p_target || q_draft) in place on ``draft``; return the loss history.

    ``callback(step, loss)`` is called after every step; if it returns ``False`` training
    stops early (``result.stopped_early``). ``progress`` shows a tqdm bar. Other keyword
    arguments (``warmup``, ``weight_decay``) go to :func:`iter_distill`.
    """
    from tqdm.auto import tqdm

    result, start = DistillResult(), time.time()
    bar = tqdm(total=steps, disable=not progress, desc="distill", unit="step")
    loop = iter_distill(target, draft, texts, steps=steps, seq_len=seq_len, batch_size=batch_size, lr=lr,
                        temperature=temperature, tokenizer=tokenizer, generated_fraction=generated_fraction,
                        max_seconds=max_seconds, seed=seed, **kwargs)
    try:
        for step, loss in loop:
            result.losses.append(loss)
            bar.update(1)
            bar.set_postfix(kl=f"{loss:.4f}")
            if callback is not None and callback(step, loss) is False:
                result.stopped_early = True
                break
    finally:
        loop.close()
        bar.close()
        result.seconds = time.time() - start
    return result
