"""Speculative decoding on one screen, in the words of the paper (Leviathan et al. 2023, Algorithm 1).

Read this first. No KV cache, no timing, no recording: each model is simply called on the whole sequence.
``specviz.decoder`` runs the same algorithm with caches, a k policy and a trace; tests/test_reference.py pins
the two together token for token (same seed: the same draws in the same order). Notation as in
``specviz.sampling``: p is the target's distribution, q the draft's, both processed by the same temperature,
top-k and top-p. Here the draft is a causal LM with the target's vocabulary.
"""
from __future__ import annotations

import torch

from .config import DecodeConfig, eos_ids
from .sampling import logits_to_probs, sample, verify, verify_block, verify_greedy


@torch.inference_mode()
def speculative_decode(target, draft, prompt: list[int], cfg: DecodeConfig) -> list[int]:
    """The tokens speculative decoding of ``target`` with ``draft`` appends to ``prompt``."""
    device = next(target.parameters()).device
    generator = torch.Generator(device=device).manual_seed(cfg.seed)
    x, eos = list(prompt), eos_ids(target)

    def logits_after(model, ids: list[int]) -> torch.Tensor:  # (len(ids), V): after each of ids
        return model(torch.tensor([ids], device=device)).logits[0]

    def probs(logits: torch.Tensor) -> torch.Tensor:
        return logits_to_probs(logits, cfg.temperature, cfg.top_k, cfg.top_p)

    while len(x) - len(prompt) < cfg.max_new_tokens:
        k = min(cfg.k, cfg.max_new_tokens - (len(x) - len(prompt)) - 1)  # never draft past the budget
        # Step 1, draft: x_1..x_k from q, one draft call each (greedy: argmax); stop early if q(x_i) < draft_stop
        drafts, q = [], []
        for _ in range(k):
            q.append(probs(logits_after(draft, x + drafts)[-1]))
            drafts.append(int(q[-1].argmax()) if cfg.greedy else int(sample(q[-1], generator)))
            if q[-1][drafts[-1]] < cfg.draft_stop:
                break
        # Step 2, verify: ONE target call on x + drafts gives p_1..p_{m+1}, m = len(drafts)
        target_logits = logits_after(target, x + drafts)[len(x) - 1:]
        p = probs(target_logits)
        # Step 3, accept: x_i while u_i < min(1, p_i(x_i) / q_i(x_i)); at the first rejection n, a token from
        # norm(max(0, p_n - q_n)); all accepted: a bonus token from p_{m+1}. Greedy: while x_i = argmax p_i
        drafted = torch.tensor(drafts, dtype=torch.long, device=device)
        if cfg.greedy:
            verdict = verify_greedy(target_logits, drafted)
        else:
            rule = verify_block if cfg.verify == "block" else verify  # Step 3 as one block: Sun et al. 2024
            verdict = rule(p, torch.stack(q) if q else p[:0], drafted, generator)  # q: (m, V)
        # Step 4, commit: the accepted drafts and the drawn token, up to an EOS
        for token in drafts[: verdict.n_accepted] + [verdict.next_token]:
            x.append(token)
            if token in eos:
                return x[len(prompt):]
    return x[len(prompt):]
