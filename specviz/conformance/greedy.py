"""Greedy (temperature 0) runs, speculation on against off: where they first differ, and why.

A greedy verify keeps the target's argmax, so on and off agree token for token unless the target's logits differ
between its one-row forward (off) and its batched verify pass (on). Batched kernels sum in another order: in
float32 a logit of size ~10 moves by ~1e-5 to 1e-4, in float16 / bfloat16 by ~1e-2. A first difference where the
off run's top-2 logprob margin is below ``NEAR_TIE`` (1e-3 nats: ten times float32's reordering noise) is a
near-tie (arithmetic, not a bug: raise the threshold for a half-precision engine); above it, a structural
divergence (the engine's speculative path emits what its plain path would not)."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

NEAR_TIE = 1e-3  # nats


@dataclass(frozen=True)
class Divergence:
    prompt_id: str
    position: int | None  # 1-based first position where on and off differ; None: identical
    token_on: int | None
    token_off: int | None
    margin: float | None  # the off run's top-1 minus top-2 logprob there (None: no logprobs given)
    kind: str  # "identical", "near-tie", "structural" or "unknown (no logprobs)"


def classify(prompt_id: str, on: Sequence[int], off: Sequence[int],
             off_top: Sequence[Sequence[tuple[int, float]]] | None, threshold: float = NEAR_TIE) -> Divergence:
    """The first difference between the on and off token lists, classified by the off run's top-2 margin there
    (``off_top``: per position, (token, logprob) pairs, best first)."""
    n = min(len(on), len(off))
    first = next((i for i in range(n) if on[i] != off[i]), None)
    if first is None:
        if len(on) == len(off):
            return Divergence(prompt_id, None, None, None, None, "identical")
        first = n  # one run ended earlier
    token_on = on[first] if first < len(on) else None
    token_off = off[first] if first < len(off) else None
    top = off_top[first] if off_top is not None and first < len(off_top) else None
    if not top or len(top) < 2:
        return Divergence(prompt_id, first + 1, token_on, token_off, None, "unknown (no logprobs)")
    values = sorted((float(v) for _, v in top), reverse=True)
    margin = values[0] - values[1]
    return Divergence(prompt_id, first + 1, token_on, token_off, margin,
                      "near-tie" if margin < threshold else "structural")
