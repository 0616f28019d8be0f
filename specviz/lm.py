"""A causal LM with its KV cache: feed tokens, read logits, roll back.

One rollback mechanism for every architecture: transformers' own ``DynamicCache.crop``
(which, since transformers 5, takes a negative count of tokens to remove).
"""
from __future__ import annotations

import inspect
import time
from contextlib import contextmanager

import torch
from transformers import DynamicCache


def cache_kwarg(model) -> str:
    """The keyword the model's forward takes its KV cache by: ``cache`` where the installed transformers has it
    (``past_key_values`` is deprecated, to be removed in 5.40), else ``past_key_values``. Read from the class,
    so a wrapper that forwards ``**kwargs`` (as tests install on an instance) does not hide it."""
    forward = getattr(type(model), "forward", None) or model.forward
    return "cache" if "cache" in inspect.signature(forward).parameters else "past_key_values"


class CachedLM:
    """Wraps a transformers causal LM; ``ids`` are the tokens whose keys/values are in the cache and
    ``last_logits`` the logits after ids[-1] (kept until a rollback), so a fully cached context costs
    no forward pass: a prefill of the whole prompt serves the first round."""

    def __init__(self, model):
        self.model = model
        self.device = model_device(model)
        self.cache = DynamicCache(config=model.config)
        self.ids: list[int] = []
        self.last_logits: torch.Tensor | None = None
        self._synced = 0  # ids[:_synced] are known to match the committed sequence
        self._cache_kw = cache_kwarg(model)

    @property
    def vocab_size(self) -> int:
        return self.model.get_output_embeddings().weight.shape[0]

    @torch.inference_mode()
    def feed(self, ids: list[int]) -> torch.Tensor:
        """Append ids to the cache; return the logits after each of them, (len(ids), V)."""
        x = torch.tensor([ids], dtype=torch.long, device=self.device)
        out = self.model(input_ids=x, use_cache=True, **{self._cache_kw: self.cache})
        self.cache = getattr(out, "cache", None) or out.past_key_values
        self.ids.extend(ids)
        self.last_logits = out.logits[0, -1]
        return out.logits[0]

    def extend(self, committed: list[int], new: list[int]) -> torch.Tensor:
        """The logits after committed[-1] and after each of ``new``, (1 + len(new), V): the cache is synced
        to committed, then whatever it lacks (pending tokens and new) goes through ONE forward pass."""
        pending = self.sync(committed)
        if pending:
            return self.feed(pending + new)[len(pending) - 1:]
        last = self.last_logits[None]
        return torch.cat([last, self.feed(new)]) if new else last

    def rollback(self, keep: int) -> None:
        """Drop every cached position from index ``keep`` on."""
        drop = len(self.ids) - keep
        if drop > 0:
            self.cache.crop(-drop)
            del self.ids[keep:]
            self.last_logits = None

    def sync(self, committed: list[int]) -> list[int]:
        """Roll the cache back to the longest prefix it shares with ``committed``; return the pending
        tokens (in committed, not yet in the cache). Empty only when the cache holds exactly committed
        and its last logits are kept; otherwise at least committed[-1], whose logits the next step needs.
        """
        limit = min(len(self.ids), len(committed))
        keep = min(self._synced, limit)  # committed only grows, so the old agreement stands
        while keep < limit and self.ids[keep] == committed[keep]:
            keep += 1
        if keep == len(committed) and (keep < len(self.ids) or self.last_logits is None):
            keep -= 1  # the logits after committed[-1] are not kept: feed it again
        self.rollback(keep)
        self._synced = keep
        return committed[keep:]


def model_device(model) -> torch.device:
    return next(model.parameters()).device


def context_window(model) -> int | None:
    """The number of positions a model can attend over, or None if its config does not say."""
    cfg = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    for name in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
        value = getattr(cfg, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


class Stopwatch:
    """Wall-clock timing that waits for queued GPU work, so CUDA timings are honest."""

    def __init__(self, device: torch.device):
        self.sync = {"cuda": torch.cuda.synchronize, "mps": torch.mps.synchronize}.get(device.type, _no_sync)
        self.seconds = 0.0

    @contextmanager
    def running(self):
        """Adds the wall time of the with-block to ``seconds``."""
        self.sync()
        t0 = time.perf_counter()
        try:
            yield self
        finally:
            self.sync()
            self.seconds += time.perf_counter() - t0

    def take(self) -> float:
        """Returns the accumulated seconds and starts again from zero."""
        seconds, self.seconds = self.seconds, 0.0
        return seconds


def _no_sync() -> None:
    pass
