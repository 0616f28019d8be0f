"""The commit step every decoder shares (the torch one, the batch's rows, ``specviz.slim``): append a round's tokens,
cut after an end-of-generation token, which ends the run."""
from __future__ import annotations

from .trace import Trace


def commit(committed: list[int], tokens: list[int], trace: Trace) -> list[int]:
    """The commit step: append the round's tokens to committed, cut after an EOS (which ends the run:
    trace.stop_reason = "eos"); returns what was kept. Caches roll back to committed on their next sync."""
    for i, t in enumerate(tokens):
        if t in trace.eos_token_ids:
            tokens = tokens[: i + 1]
            trace.stop_reason = "eos"
            break
    committed.extend(tokens)
    return tokens
