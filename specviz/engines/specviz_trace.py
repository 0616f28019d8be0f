"""specviz's own trace JSON (``specviz.trace.Trace.to_json``) as an engine run, so a specviz run and an engine's
can be read, diagnosed and advised the same way: steps are the rounds that drafted, per-position counts and the
histogram come from each round's n_accepted, k and the sampling settings from the run's DecodeConfig."""
from __future__ import annotations

from ..trace import Trace
from .run import EngineRun

SOURCE = "specviz trace"


def is_trace(obj: dict) -> bool:
    return str(obj.get("schema", "")).startswith("specviz.trace/")


def parse(text: str) -> EngineRun:
    return trace_run(Trace.from_json(text))


def trace_run(trace: Trace) -> EngineRun:
    drafting = [r for r in trace.rounds if r.drafted]
    depth = max((len(r.drafted) for r in drafting), default=0)
    histogram = [0] * (depth + 1)
    for r in drafting:
        histogram[r.n_accepted] += 1
    cfg = trace.config
    notes = ["steps = rounds that drafted at least one token"]
    k = cfg.k
    if cfg.k_policy != "fixed":
        k = max(cfg.max_k, depth)
        notes.append(f"an adaptive k policy ({cfg.k_policy}): k = its largest k, {k}")
    if any(r.tree is not None for r in drafting):
        k = None  # a tree verifies more nodes than its depth: no k bounds the drafted count
        notes.append("a tree run: drafted counts tree nodes; positions are depths along the accepted path")
    return EngineRun(
        source=SOURCE, drafted=sum(r.proposed for r in drafting), accepted=sum(r.n_accepted for r in drafting),
        steps=len(drafting), k=None if k is None else max(k, depth) or None, emitted=len(trace.new_tokens), requests=1,
        accepted_per_pos=tuple(sum(r.n_accepted > i for r in drafting) for i in range(depth)),
        histogram=tuple(histogram), temperature=float(cfg.temperature), top_p=float(cfg.top_p),
        top_k=int(cfg.top_k), model=trace.target_name or None, notes=tuple(notes))
