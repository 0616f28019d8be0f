"""What the explorer's events run, without gradio: a decode as a throttled stream of traces, its
autoregressive baseline and the speedup's interleaved pairs, the theory explorer's curves, an opened run's form
values, and traces exported to and imported from files."""
from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import torch

from .. import theory
from ..config import DEFAULTS, DecodeConfig
from ..decoder import Decoding
from ..labs.sweep import baseline_run
from ..models import PROMPT_LOOKUP
from ..runtime import llamacpp, lm
from ..trace import Trace
from ..views import plots
from . import slim_route
from .budget import GRACE, Budget
from .forms import as_int, encode, make_config, number_in
from .store import ModelStore, user_pair
from .tempfiles import discard, fresh_folder

STREAM_EVERY_S = 0.25  # faster UI updates freeze the browser (gradio issue 6847)


def stream_run(store: ModelStore, prompt: str, target: str, draft: str, cfg: DecodeConfig,
               every_s: float = STREAM_EVERY_S, user_drafts: dict | None = None) -> Iterator[Trace]:
    """Speculative decoding as a stream of the growing trace: at most one yield per ``every_s``
    seconds, plus the finished trace. Token texts are filled in as rounds arrive. ``user_drafts``:
    this user's trained drafts, picked by name before the store's. Every round checks the run's pace against the
    server's budget (SPECVIZ_MAX_REQUEST_S): a run that would finish past it (with its grace) stops there, its
    tokens so far kept, ``stop_reason`` "budget"."""
    budget = Budget()
    run, tok = start_run(store, prompt, target, draft, cfg, user_drafts)
    last = started = time.perf_counter()
    before = budget.elapsed  # loading the models: spent once, not per token
    for _ in run:
        budget.check()  # stops here once the visitor has left (or far past the budget)
        pace = (time.perf_counter() - started) / max(len(run.trace.new_tokens), 1)
        if before + pace * cfg.max_new_tokens > budget.seconds * GRACE and len(run.trace.rounds) >= 2 \
                and len(run.trace.new_tokens) < cfg.max_new_tokens:
            run.trace.stop_reason = "budget"  # the tokens so far are kept and shown; the summary says why it ended
            break
        if time.perf_counter() - last >= every_s:
            last = time.perf_counter()
            yield run.trace.fill_texts(tok)
    yield run.trace.fill_texts(tok)



def start_run(store: ModelStore, prompt: str, target: str, draft: str, cfg: DecodeConfig,
              user_drafts: dict | None = None):
    """(the run, iterated for its rounds with its ``trace``; the tokenizer): on ``slim_route`` where it runs this pair
    and settings (a Gemma-3 GGUF with prompt lookup or a feature draft: the C stack's forward), else the torch
    decoder on ``run_forward``'s forward."""
    mine = isinstance(draft, str) and draft in (user_drafts or {})
    if not mine and (draft == PROMPT_LOOKUP or slim_route.is_feature_draft(draft)):
        model, tok = store.target(target)
        why = slim_route.why_not(model, draft, cfg)
        if why is None:
            ids = [int(t) for t in encode(tok, prompt)[0]]
            return slim_route.decoding(model, target, draft, ids, cfg), tok
        if slim_route.is_feature_draft(draft) and draft not in store.list_drafters():
            raise ValueError(slim_route.refusal(draft, why))
    model, tok, drafter = user_pair(store, target, draft, user_drafts)
    run = Decoding(model, drafter, encode(tok, prompt), cfg, target_name=target, draft_name=draft,
                   forward=run_forward(model, cfg))
    return run, tok


def run_forward(model, cfg: DecodeConfig) -> str | None:
    """The forward a run of the explorer (and /generate) takes: for a model loaded from a GGUF file (``llamacpp.source``)
    where the operator named no forward (SPECVIZ_FORWARD) and the run is a chain, the faster one-row forward here,
    the one its baseline takes (``lm.baseline_path``: llama.cpp's own forward of that file where llama-cpp-python
    runs it faster); else the default one, as the library's. A token tree needs the torch forward's masks."""
    if cfg.tree is not None or os.environ.get(lm.PATH_ENV) or llamacpp.source(model) is None:
        return None
    return "llamacpp" if lm.baseline_path(model) == "llamacpp" else None


def generate(store: ModelStore, prompt: str, target: str, draft: str, cfg: DecodeConfig,
             user_drafts: dict | None = None) -> Trace:
    """The whole run at once (the API endpoint)."""
    trace = None
    for trace in stream_run(store, prompt, target, draft, cfg, every_s=float("inf"), user_drafts=user_drafts):
        pass
    return trace


def baseline(store: ModelStore, trace: Trace) -> Trace:
    """The autoregressive run with the same target, prompt and settings: the speedup's denominator, on the fastest
    forward here for one row a pass (``lm.baseline_path``: the lean forward in C or llama.cpp's, whichever was timed
    faster; its trace says which)."""
    model, _ = store.target(trace.target_name)
    cfg = trace.config
    if trace.stop_reason == "budget":  # as many tokens as the run made before the server stopped it
        cfg = replace(cfg, max_new_tokens=max(len(trace.new_tokens), 1))
    if trace.forward == slim_route.FORWARD:  # a run of the slim route: its baseline on the same forward
        return slim_route.baseline(model, trace, cfg)
    return baseline_run(model, torch.tensor([trace.prompt_ids]), cfg, target_name=trace.target_name)


PAIRS, PAIRS_BUDGET_S = 3, 6.0  # interleaved (speculative, baseline) pairs for the speedup's spread, if they fit


def speed_pairs(store: ModelStore, trace: Trace, base: Trace, user_drafts: dict | None = None
                ) -> tuple[list[float], str | None]:
    """(speedups, why there is only one): speedups of interleaved pairs (the run and its baseline first, then reruns
    of each in turn, the same settings and seed) where they fit the time set aside for them: one noisy wall-clock
    number becomes a median and a range."""
    speedups = [trace.summary().tokens_per_s / base.summary().tokens_per_s]
    more = (trace.total_s + base.total_s) * (PAIRS - 1)
    if more > PAIRS_BUDGET_S:
        return speedups, (f"{PAIRS - 1} more pairs would take about {more:.0f} s, over the {PAIRS_BUDGET_S:.0f} s a run "
                          "sets aside for them: fewer new tokens give a median and range")
    for _ in range(PAIRS - 1):
        again = rerun(store, trace, user_drafts)
        slow = baseline(store, trace)
        speedups.append(again.summary().tokens_per_s / slow.summary().tokens_per_s)
    return speedups, None


def rerun(store: ModelStore, trace: Trace, user_drafts: dict | None = None) -> Trace:
    """The run again: the same target, draft, prompt, settings and seed, on the forward it took."""
    if trace.forward == slim_route.FORWARD:
        model, _ = store.target(trace.target_name)
        return slim_route.decoding(model, trace.target_name, trace.draft_name, list(trace.prompt_ids),
                                   trace.config).run()
    model, _, drafter = user_pair(store, trace.target_name, trace.draft_name, user_drafts)
    return Decoding(model, drafter, torch.tensor([trace.prompt_ids]), trace.config, target_name=trace.target_name,
                    forward=run_forward(model, trace.config)).run()


def chain_twin(store: ModelStore, trace: Trace, user_drafts: dict | None = None) -> Trace:
    """A tree run's chain counterpart: the same target, draft, prompt, seed and settings, drafting k in a row (a
    chain with siblings: its own chain, k = its depth)."""
    model, _, drafter = user_pair(store, trace.target_name, trace.draft_name, user_drafts)
    tree = trace.config.tree
    cfg = replace(trace.config, tree=None, k=tree.depth if tree is not None and tree.chained else trace.config.k)
    return Decoding(model, drafter, torch.tensor([trace.prompt_ids]), cfg, target_name=trace.target_name,
                    draft_name=trace.draft_name).run()


def form_values(trace: Trace, targets: list[str], drafts: list[str]) -> tuple:
    """An opened run's settings in the explorer form's order (links.FIELDS: prompt, target, draft, k, k policy,
    temperature, top-k, top-p, new tokens, seed, draft shape); None for a model this server does not offer."""
    cfg, ids = trace.config, list(trace.prompt_ids)
    if ids and trace.text(ids[0]).startswith("<|"):  # a special start token: the tokenizer adds it again
        ids = ids[1:]
    return ("".join(trace.text(t) for t in ids), trace.target_name if trace.target_name in targets else None,
            trace.draft_name if trace.draft_name in drafts else None, cfg.k, cfg.k_policy, cfg.temperature, cfg.top_k,
            cfg.top_p, cfg.max_new_tokens, cfg.seed, cfg.tree.label if cfg.tree is not None else "chain")


# the theory explorer's sliders: their ranges, which what_if checks and from_run fills within
SLIDERS = dict(alpha=(0.0, 1.0), k=(1, 16), c=(0.0, 5.0), v=(0.5, 5.0))
SLIDER_NAMES = dict(alpha="α", k="k", c="c", v="v")


def what_if(alpha, k, c, v, trace=None, base=None):
    """The theory explorer: Leviathan's curves for the sliders' alpha, k, c, v, with the run's measured point."""
    alpha, c, v = (number_in(x, SLIDER_NAMES[name], *SLIDERS[name]) for name, x in (("alpha", alpha), ("c", c), ("v", v)))
    k = as_int(number_in(k, "k", *SLIDERS["k"]), "k")
    point = None
    if trace is not None and trace.mode == "speculative" and base is not None and trace.config.tree is None:
        point = (theory.mean_k(trace), theory.measured_speedup(trace, base) or 0.0)
    return plots.theory_curves(alpha, k, c, v, point)


def from_run(trace, base) -> tuple:
    """The theory explorer's sliders set to what a run measured: (alpha, k, c, v, note), each value within its
    slider's range (SLIDERS); the note (Markdown, "" if none) gives the measured value of any the slider could not
    hold, and says when k counts a tree's nodes."""
    if trace is None or trace.mode != "speculative":
        raise ValueError("run speculative decoding first: its alpha, k, c and v fill the sliders")
    measured = dict(alpha=trace.summary().alpha, k=theory.mean_k(trace), c=theory.cost_ratio(trace, base),
                    v=theory.verify_cost(trace, base))
    held = {name: min(max(x, SLIDERS[name][0]), SLIDERS[name][1]) for name, x in measured.items()}
    notes = [f"{SLIDER_NAMES[name]} measured {measured[name]:.3g}: the slider stops at {held[name]:g}"
             for name in measured if round(held[name], 3) != round(measured[name], 3)]
    if trace.config.tree is not None:
        notes.insert(0, f"a tree run: k is its nodes per round ({measured['k']:.1f}) and the curves are a chain's "
                        "(the summary gives the tree's own prediction)")
    note = ("*This run*: " + "; ".join(notes) + ".") if notes else ""
    return (round(held["alpha"], 3), round(held["k"]), round(held["c"], 3), round(held["v"], 3), note)


def export_trace(trace: Trace | None, base: Trace | None = None) -> list[str]:
    """Write the trace as CSV (one row per token) and JSON (the full record, with its baseline run if there is
    one, so the import shows the speedup again) into a fresh temp dir."""
    if trace is None:
        raise ValueError("nothing to export yet: run a prompt or import a trace first")
    folder = fresh_folder("trace-")
    csv, js = folder / "trace.csv", folder / "trace.json"
    trace.to_frame().to_csv(csv, index=False)
    js.write_text(trace.to_json(baseline=base))
    return [str(csv), str(js)]


def import_trace(path) -> tuple[Trace, Trace | None]:
    """Read an uploaded JSON trace: (trace, its baseline run or None); ValueError with a readable reason if it is
    not one."""
    if not path:
        raise ValueError("no file uploaded")
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"could not read the uploaded file: {e}") from e
    finally:
        discard(path)  # an upload is deleted once read (anything else is left alone)
    trace, base = Trace.run_from_json(text)
    for r in trace.rounds:
        if not len(r.drafted) == len(r.p) == len(r.q) == len(r.u) == len(r.beta) == len(r.accept_prob):
            raise ValueError(f"malformed trace JSON: round {r.index}'s drafted, p, q, u, beta lengths differ "
                             "(traces recorded with record=False cannot be replayed)")
    return trace, base


def api_generate(store: ModelStore):
    """The /generate endpoint, its signature and defaults as gradio_client sees them."""
    def endpoint(prompt: str, target: str = store.default_target(), draft: str = store.default_draft(),
                 k: int = DEFAULTS.k, temperature: float = DEFAULTS.temperature, top_k: int = DEFAULTS.top_k,
                 top_p: float = DEFAULTS.top_p, max_new_tokens: int = DEFAULTS.max_new_tokens,
                 seed: int = DEFAULTS.seed, draft_stop: float = 0.0, tree: str = "chain",
                 tree_children: str = "auto") -> str:
        """Speculative decoding of `prompt`; returns the full trace as JSON (schema specviz.trace/1).
        `draft_stop` > 0 ends a round's drafting below that draft confidence (transformers' 0.4 rule).
        `tree`: "chain" (k drafts a round), a static tree "3,2,2,1" (children per depth) or "dynamic:10,8,3"
        (node budget, depth, width; "dynamic:12,10,2,0.3" adds a threshold); `tree_children`: auto, top, iid or distinct."""
        cfg = make_config(k, "fixed", temperature, top_k, top_p, max_new_tokens, seed, draft_stop, tree,
                          tree_children)
        return generate(store, prompt, target, draft, cfg).to_json()

    endpoint.__name__ = "generate"  # what gradio and its client call it
    return endpoint
