"""A causal LM with its KV cache: feed tokens, read logits, roll back.

Three forward paths behind one cache interface (``forward(ids)`` appends and returns logits,
``crop(keep)`` rolls back, ``get_seq_length()``): ``lean_llama.LeanLlama`` / ``lean_gemma.LeanGemma3`` (Llama,
Mistral, Qwen2/3, Phi-3 and Gemma-3, the fastest on a CPU; rollback by moving the write position), transformers'
forward with a DynamicCache (any other model; rollback by the cache's own crop), or llama.cpp's own
(``llamacpp.LlamaCppForward``, where asked for and installed).
"""
from __future__ import annotations

import inspect
import os
import time
import weakref

import torch

from . import lean_gemma, lean_llama, llamacpp
from .forwards import DynamicForward, model_device
from .timing import Stopwatch  # noqa: F401 (a run's timing, imported from here too)
from .tree_mask import tree_attention


def cache_kwarg(model) -> str:
    """The keyword the model's forward takes its KV cache by: ``cache`` where the installed transformers has it
    (``past_key_values`` is deprecated, to be removed in 5.40), else ``past_key_values``. Read from the class,
    so a wrapper that forwards ``**kwargs`` (as tests install on an instance) does not hide it."""
    forward = getattr(type(model), "forward", None) or model.forward
    return "cache" if "cache" in inspect.signature(forward).parameters else "past_key_values"


class CachedLM:
    """Wraps a transformers causal LM; ``ids`` are the tokens whose keys/values are in the cache and
    ``last_logits`` the logits after ids[-1] (kept until a rollback), so a fully cached context costs
    no forward pass: a prefill of the whole prompt serves the first round.

    ``path`` picks the forward pass and its cache (all give the same logits, up to float rounding):
    "dynamic" (transformers' forward, DynamicCache, rollback by crop), "lean" (``lean_llama.LeanLlama``: the
    model's weights re-laid out, no transformers code per call) or "llamacpp". "auto" (``DEFAULT_PATH``) takes "lean"
    where ``lean_llama.supports(model)`` (the families of ``lean_families``, on one device) or
    ``lean_gemma.supports(model)``, and "dynamic" otherwise."""

    def __init__(self, model, path: str | None = None, trees: bool = False):
        self.model = model
        self.device = model_device(model)
        default = default_path()
        if trees and default == "llamacpp":  # token trees need attention masks: the torch forward runs them
            default = "auto"
        self.path = choose_path(model, path or default, strict=path is not None)
        self.ids: list[int] = []
        self.last_logits: torch.Tensor | None = None
        self.tree_parents: list[int] = []  # a token tree cached after ids (tree_forward), until keep_path
        self.tree_tokens: list[int] = []
        self._synced = 0  # ids[:_synced] are known to match the committed sequence
        self._cache_kw = cache_kwarg(model)
        self.cache = make_cache(model, self.path, self._cache_kw)  # forward(ids), crop(keep), get_seq_length()

    @property
    def forward_name(self) -> str:
        """The forward as a trace records it: ``path``, or "lean-c" where the lean forward's layers run in C."""
        in_c = self.path == "lean" and callable(getattr(self.cache, "in_c", None)) and self.cache.in_c()
        return "lean-c" if in_c else self.path

    @property
    def vocab_size(self) -> int:
        return self.model.get_output_embeddings().weight.shape[0]

    @torch.inference_mode()
    def feed(self, ids: list[int]) -> torch.Tensor:
        """Append ids to the cache; return the logits after each of them, (len(ids), V)."""
        self.drop_tree()
        logits = self.cache.forward(torch.tensor(ids, dtype=torch.long, device=self.device))
        self.ids.extend(ids)
        self.last_logits = logits[-1]
        return logits

    def extend(self, committed: list[int], new: list[int]) -> torch.Tensor:
        """The logits after committed[-1] and after each of ``new``, (1 + len(new), V): the cache is synced
        to committed, then whatever it lacks (pending tokens and new) goes through ONE forward pass."""
        pending = self.sync(committed)
        if pending:
            return self.feed(pending + new)[len(pending) - 1:]
        last = self.last_logits[None]
        return torch.cat([last, self.feed(new)]) if new else last

    @torch.inference_mode()
    def tree_forward(self, prefix: list[int], tokens: list[int], parents: list[int]) -> torch.Tensor:
        """ONE forward over ``prefix`` (appended causally, as ``feed`` does) and tree nodes: ``tokens[i]`` under
        ``parents[i]`` (-1: the last token before the tree; else an earlier node of this tree, fed in this call or
        an earlier one). Each node attends to the cached sequence and its own ancestors, at position
        len(ids) + its depth. Nodes stay apart from ``ids`` until ``keep_path``. Returns the logits after each
        prefix token and each node, (len(prefix) + len(tokens), V)."""
        if prefix:
            self.drop_tree()
        elif not tokens:
            return torch.empty(0, self.vocab_size, device=self.device)
        start, first = self.cache.get_seq_length(), len(self.tree_parents)
        self.tree_parents += parents
        self.tree_tokens += tokens
        positions, visible = tree_attention(start, len(prefix), self.tree_parents, first, self.device)
        logits = self.cache.forward(torch.tensor(prefix + tokens, dtype=torch.long, device=self.device),
                                    positions, visible)
        if prefix:
            self.ids.extend(prefix)
            self.last_logits = logits[len(prefix) - 1]
        return logits

    def keep_path(self, path: list[int], last_logits: torch.Tensor | None) -> None:
        """Keep a cached tree's accepted path (node indices, root's child first) after ids, drop its other nodes.
        last_logits: the logits after the path's last node (None: not known; the next sync feeds it again)."""
        base = len(self.ids)
        if path == list(range(len(path))):  # nodes 0, 1, ... (a chain's accepted prefix): already in place
            self.cache.crop(base + len(path))
        else:
            self.cache.keep(base, [base + n for n in path])
        self.ids.extend(self.tree_tokens[n] for n in path)
        self.tree_parents, self.tree_tokens = [], []
        if path:
            self.last_logits = last_logits

    def drop_tree(self) -> None:
        """Forget a cached tree's nodes (the cache keeps ids only)."""
        if self.tree_parents:
            self.cache.crop(len(self.ids))
            self.tree_parents, self.tree_tokens = [], []

    def rollback(self, keep: int) -> None:
        """Drop every cached position from index ``keep`` on."""
        self.drop_tree()
        if len(self.ids) > keep:
            self.cache.crop(keep)
            del self.ids[keep:]
            self.last_logits = None

    def sync(self, committed: list[int]) -> list[int]:
        """Roll the cache back to the longest prefix it shares with ``committed``; return the pending
        tokens (in committed, not yet in the cache). Empty only when the cache holds exactly committed
        and its last logits are kept; otherwise at least committed[-1], whose logits the next step needs.
        """
        known = self._synced if self.ids[:self._synced] == committed[:self._synced] else 0  # a drafter shared by
        keep = common_prefix(self.ids, committed, known)  # a batch's rows is synced to another row's text in turn
        if keep == len(committed) and (keep < len(self.ids) or self.last_logits is None):
            keep -= 1  # the logits after committed[-1] are not kept: feed it again
        self.rollback(keep)
        self._synced = keep
        return committed[keep:]


def common_prefix(a: list[int], b: list[int], start: int = 0) -> int:
    """Length of the common prefix of a and b, known to be at least ``start``."""
    n, limit = min(start, len(a), len(b)), min(len(a), len(b))
    while n < limit and a[n] == b[n]:
        n += 1
    return n


PATHS = ("auto", "dynamic", "lean", "llamacpp")
DEFAULT_PATH = "auto"  # what CachedLM(model) uses; set to "dynamic" to run every model through transformers
PATH_ENV = "SPECVIZ_FORWARD"  # the default path from the environment (say llamacpp), where DEFAULT_PATH is "auto"


def default_path() -> str:
    """DEFAULT_PATH, or where it is "auto", SPECVIZ_FORWARD (checked: a readable error for an unknown one)."""
    path = DEFAULT_PATH if DEFAULT_PATH != "auto" else (os.environ.get(PATH_ENV) or "auto")
    if path not in PATHS:
        raise ValueError(f"{PATH_ENV} must be one of {PATHS}, got {path!r}")
    return path


BASELINE_ENV = "SPECVIZ_BASELINE"  # "fastest" (default): the baseline's forward is the fastest here; "same": the run's


def baseline_path(model) -> str | None:
    """The forward an autoregressive baseline runs on: one row a pass, on the fastest forward here. Where
    llama.cpp's forward can run ``model`` on the CPU, both it and the default path (the lean forward, its layers in C
    where ``native`` builds) are timed on a few one-row passes, once per model, thread count and default, and the
    faster is taken: None (the default path, as CachedLM picks it) or the other one ("llamacpp"; "auto" where
    llama.cpp's is the default). SPECVIZ_BASELINE=same keeps the default (a
    baseline on the run's own forward: the same kernels, so greedy text compares token for token). On the lean
    forward its passes take their threads as the speculative run's do (``threads.policy``, per call), so a speedup on
    a busy host is the algorithm's (llama.cpp's forward keeps its own count, dropped to one after stalled decodes)."""
    choice = os.environ.get(BASELINE_ENV) or "fastest"
    if choice not in ("fastest", "same"):
        raise ValueError(f"{BASELINE_ENV} must be 'fastest' or 'same', got {choice!r}")
    if choice == "same" or model_device(model).type != "cpu" or llamacpp.supports(model) is not None:
        return None
    default = default_path()
    other = "auto" if default == "llamacpp" else "llamacpp"  # llama.cpp's forward as the default: the lean one
    timed, key = _FASTEST.setdefault(model, {}), (torch.get_num_threads(), default)
    if key not in timed:
        costs = one_row_seconds(model, [other, default])
        timed[key] = other if costs[other] < costs[default] else None
    return timed[key]


_FASTEST: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> {(threads, default path): its baseline}


@torch.inference_mode()
def one_row_seconds(model, paths: list[str], passes: int = 12) -> dict[str, float]:
    """The fastest of ``passes`` one-row passes of ``model`` on each forward path, interleaved, after an 8-token
    prefill (other work on the host only adds time, so the fastest is the forward's own cost)."""
    lms = {path: CachedLM(model, path) for path in paths}
    vocab = next(iter(lms.values())).vocab_size
    for lm in lms.values():
        lm.feed([i % vocab for i in range(8)])
    times: dict[str, list[float]] = {path: [] for path in paths}
    for i in range(passes):
        for path, lm in (lms.items() if i % 2 else reversed(lms.items())):
            t0 = time.perf_counter()
            lm.feed([(8 + i) % vocab])
            times[path].append(time.perf_counter() - t0)
    return {path: min(ts[1:]) for path, ts in times.items()}  # the first pass of each warms it


def on_path(path: str, fn, *args):
    """fn(*args) with DEFAULT_PATH set to ``path`` (a benchmark's side-by-side forwards), then as it was."""
    global DEFAULT_PATH
    before, DEFAULT_PATH = DEFAULT_PATH, path
    try:
        return fn(*args)
    finally:
        DEFAULT_PATH = before


def choose_path(model, path: str, strict: bool = False) -> str:
    """The forward path for model: "auto" is "lean" where LeanLlama supports it, else "dynamic"; an
    explicit "lean" falls back to "dynamic" for models it cannot run (no error). "llamacpp"
    (``llamacpp.LlamaCppForward``) runs the models it supports; for others it is "auto" as a default and a
    ValueError saying why when asked for (``strict``: CachedLM(model, "llamacpp"))."""
    if path not in PATHS:
        raise ValueError(f"path must be one of {PATHS}, got {path!r}")
    if path == "llamacpp":  # stays: SPECVIZ_FORWARD=llamacpp (docs/LLAMACPP.md), and the baseline where it is faster
        reason = llamacpp.supports(model)
        if reason is None:
            return path
        if strict:
            raise ValueError(reason)
        path = "auto"
    if path in ("auto", "lean"):  # the default: lean where it runs the model, transformers' for every other model
        return "lean" if lean_llama.supports(model) or lean_gemma.supports(model) else "dynamic"
    return path  # "dynamic" asked for (SPECVIZ_FORWARD=dynamic): the reference the lean forwards are tested against


def make_cache(model, path: str, cache_kw: str):
    if path == "llamacpp":
        return llamacpp.LlamaCppForward(model)
    if path == "lean":
        return lean_gemma.LeanGemma3(model) if lean_gemma.supports(model) else lean_llama.LeanLlama(model)
    return DynamicForward(model, cache_kw)


def context_window(model) -> int | None:
    """The number of positions a model can attend over, or None if its config does not say."""
    cfg = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    for name in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
        value = getattr(cfg, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return None
