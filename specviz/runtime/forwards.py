"""transformers' own forward behind the cache interface ``CachedLM`` uses (``forward(ids)`` appends and returns
logits, ``crop(keep)`` rolls back, ``get_seq_length()``, ``keep`` gathers a token tree's path), with a DynamicCache:
the path of every model the lean forwards (``lean_llama``, ``lean_gemma``) do not run.
"""
from __future__ import annotations

import threading
import time
from contextlib import contextmanager

import torch

from .timing import head_clock

_started = threading.local()


def specviz_head_started(module, args) -> None:
    _started.t0 = time.perf_counter()


def specviz_head_done(module, args, out) -> None:
    head_clock.add(time.perf_counter() - _started.t0)


HEAD_HOOKS = (specviz_head_started.__name__, specviz_head_done.__name__)  # lean_common.instrumented ignores them


@contextmanager
def timing_head(model):
    """For the with-block: hooks on ``model``'s LM head (its output embeddings) that add each of its forwards' wall
    time to ``head_clock``; removed after, so the model is left as it was."""
    head = model.get_output_embeddings()
    if head is None:
        yield
        return
    hooks = head.register_forward_pre_hook(specviz_head_started), head.register_forward_hook(specviz_head_done)
    try:
        yield
    finally:
        for hook in hooks:
            hook.remove()


class DynamicForward:
    """transformers' forward with a DynamicCache: keys/values appended by concatenation, rolled back
    with the cache's own crop (which, since transformers 5, takes a negative count to remove)."""

    def __init__(self, model, cache_kw: str):
        from transformers import DynamicCache  # imported here: the lean and llama.cpp paths never need it

        self.model, self.cache_kw = model, cache_kw
        self.kv = DynamicCache(config=model.config)
        self.kv.activate_past_recording()  # sliding-window layers keep what a rollback may need (else crop fails)

    def get_seq_length(self) -> int:
        return self.kv.get_seq_length()

    def crop(self, keep: int) -> None:
        if keep < self.get_seq_length():
            self.kv.crop(keep - self.get_seq_length())

    def forward(self, ids: torch.Tensor, positions=None, visible=None) -> torch.Tensor:
        """Append ids (n,); the logits after each, (n, V). A token tree passes positions (n,) and visible
        (n, length + n): a 4-D attention mask, which transformers' models take as given."""
        kw = {}
        if visible is not None:
            dtype = self.model.get_output_embeddings().weight.dtype
            mask = torch.zeros(visible.shape, dtype=dtype, device=visible.device)
            mask = mask.masked_fill_(~visible, torch.finfo(dtype).min)[None, None]
            kw = dict(position_ids=positions[None], attention_mask=mask)
        with timing_head(self.model):
            out = self.model(input_ids=ids[None], use_cache=True, **kw, **{self.cache_kw: self.kv})
        self.kv = getattr(out, "cache", None) or out.past_key_values
        return out.logits[0]

    def keep(self, start: int, slots: list[int]) -> None:
        """Keep positions [0, start) and then the given ones (a tree's accepted path), gathered."""
        idx = torch.tensor(slots, dtype=torch.long, device=self.kv.layers[0].keys.device)
        for layer in self.kv.layers:
            if type(layer).__name__ != "DynamicLayer":
                raise ValueError(f"token trees need a plain key/value cache; this model's has {type(layer).__name__}")
            layer.keys = torch.cat([layer.keys[..., :start, :], layer.keys[..., idx, :]], dim=-2)
            layer.values = torch.cat([layer.values[..., :start, :], layer.values[..., idx, :]], dim=-2)


def model_device(model) -> torch.device:
    return next(model.parameters()).device


def cache_layers(model) -> list:
    """The layers of the DynamicCache transformers builds for the model (plain, sliding-window, ...), empty where
    DynamicCache cannot read its config (the run itself will then say what is wrong)."""
    from transformers import DynamicCache

    cfg = model.config  # a GGUF's own config (gguf_shell.TextConfig) as transformers' class of its model type
    try:
        cfg = cfg.transformers_config() if hasattr(cfg, "transformers_config") else cfg
        return list(DynamicCache(config=cfg).layers)
    except Exception:
        return []


def sliding_window(model) -> int | None:
    """The smallest attention window among the model's cache layers (Mistral, Gemma 2/3, ...), or None where every
    layer attends to the whole context."""
    windows = [layer.sliding_window for layer in cache_layers(model) if getattr(layer, "is_sliding", False)]
    return min(windows) if windows else None


def check_columns(models, columns: int) -> None:
    """A ValueError where a batch's cache, at most ``columns`` wide (the padding and the holes rejected drafts leave
    included), could outgrow one of ``models``' sliding attention windows: the window would count those columns."""
    window = min((w for m in models if m is not None and (w := sliding_window(m))), default=None)
    if window is not None and columns >= window:
        raise ValueError(f"this model attends within a sliding window of {window} tokens, and batched decoding keeps "
                         f"padding and rejected drafts as masked cache columns (up to {columns} here), which the "
                         "window would count: lower max_new_tokens or k, or decode one prompt at a time")
