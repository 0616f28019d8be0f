"""Prometheus text scrapes of an engine's /metrics, read with prometheus_client's own parser.

vLLM, vllm/v1/spec_decode/metrics.py, SpecDecodingProm (per engine, labels model_name and engine):
  vllm:spec_decode_num_drafts_total            verify steps      vllm:spec_decode_num_draft_tokens_total   drafted
  vllm:spec_decode_num_accepted_tokens_total   accepted          ..._accepted_tokens_per_pos_total{position="i"}
  (positions 0 .. num_speculative_tokens - 1), beside vllm:generation_tokens_total and vllm:request_success_total.
llama.cpp, tools/server/server-task.cpp, server_task_result_metrics::to_metrics(): the same names under
  llamacpp: (num_drafts = verification steps), per-position counters sized to the draft n_max, and
  llamacpp:tokens_predicted_total. It prints values through a C++ stream (six significant digits), so counts above
  a million arrive rounded.
TensorRT-LLM, tensorrt_llm/metrics/collector.py: trtllm_spec_decode_num_draft_tokens_total and
  ..._num_accepted_tokens_total (cumulative, no verify-step count), or in a build of PR #12545's first form the same
  names as per-iteration gauges, beside the trtllm_spec_decode_acceptance_length gauge: trtllm_prom.py reads each form
  with its meaning (a gauge build's scrape is one iteration, never a total).
Counters are summed over engines; several models need ``model=``. Several scrapes (files, or one text where a
metric's "# TYPE" line comes round again) give the counts between the first and the last, the deltas between
consecutive ones forming the series: each delta is one moment's counts of every engine merged (a scrape reads all
engines at once), so the series is successive intervals of the whole server, never one engine's after another's.
"""
from __future__ import annotations

import math

from prometheus_client.parser import text_string_to_metric_families

from . import trtllm_prom
from .lines import MAX_LINE, too_long
from .run import MAX_K, EngineRun

COUNTERS = {"spec_decode_num_drafts": "steps", "spec_decode_num_draft_tokens": "drafted",
            "spec_decode_num_accepted_tokens": "accepted", "spec_decode_num_accepted_tokens_per_pos": "per_pos"}
EXTRAS = {"vllm:generation_tokens": "emitted", "vllm:request_success": "requests",
          "llamacpp:tokens_predicted": "emitted"}
MODEL_LABELS = ("model_name", "model")


UI_SEPARATOR = " | "  # Prometheus's web UI table, copied: "series{labels} | value", a "-- | --" rule under the head


def is_ui_table(text: str) -> bool:
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return UI_SEPARATOR in first and "spec_decode_num_" in first.split("{", 1)[0]


def from_ui_table(text: str) -> str:
    """The table as text exposition: 'series value' a line under a '# TYPE NAME counter' line for each counter, the
    rule lines and the '_created' rows (timestamps the Prometheus server adds, not counts) dropped."""
    out, typed = [], set()
    for line in text.splitlines():
        series, sep, value = line.strip().rpartition(UI_SEPARATOR)
        name = series.split("{", 1)[0].strip()
        if not sep or not name.strip("- ") or name.endswith("_created"):
            continue
        if name not in typed:
            typed.add(name)
            out.append(f"# TYPE {name} counter")
        out.append(f"{series.strip()} {value.strip()}")
    return "\n".join(out) + "\n"


def is_scrape(text: str) -> bool:
    """A "# HELP" or "# TYPE" line, or a first line that is a spec_decode_num_ sample, or a web UI table of them."""
    if is_ui_table(text):
        return True
    first = None
    for line in text.splitlines():
        line = line.strip()
        if line.startswith(("# HELP ", "# TYPE ")):
            return True
        first = first or line
    return bool(first) and "spec_decode_num_" in first.split(" ", 1)[0]


def split_scrapes(text: str) -> list[str]:
    """One text per scrape: a scrape ends where a metric's "# TYPE" line comes round again. A line longer than
    MAX_LINE is refused before the parser sees it (an exporter's lines are short)."""
    chunks, current, seen = [], [], set()
    for n, line in enumerate(text.splitlines(), 1):
        if len(line) > MAX_LINE:
            raise too_long(n, line)
        if line.startswith("# TYPE "):
            name = line.split()[2] if len(line.split()) > 2 else ""
            if name in seen:
                chunks.append("\n".join(current))
                current, seen = [], set()
            seen.add(name)
        current.append(line)
    chunks.append("\n".join(current))
    return [c + "\n" for c in chunks if c.strip()]


def scrape_counts(text: str) -> dict[str, dict]:
    """{model: {field: value}} of one scrape; per_pos is {position: value}."""
    try:
        families = list(text_string_to_metric_families(text))
    except ValueError as error:
        raise ValueError(f"not a Prometheus text scrape ({error}); a log line or truncated scrape mixed in?") from error
    out: dict[str, dict] = {}
    prefixes = set()
    for family in families:
        field, prefix = _field_of(family.name)
        if field is None:
            continue
        prefixes.add(prefix)
        for sample in family.samples:
            if sample.name not in (family.name, family.name + "_total"):
                continue  # _created timestamps and the like
            model = next((sample.labels[k] for k in MODEL_LABELS if k in sample.labels), "")
            counts = out.setdefault(model, {"prefix": prefix})
            if trtllm_prom.is_trtllm(prefix):
                trtllm_prom.record(counts, field, family, sample)
            if field != "length":
                _add(counts, field, sample)
    if len(prefixes) > 1:
        raise ValueError(f"counters of several engines in one scrape ({', '.join(sorted(prefixes))}): mixed files?")
    return out


def _field_of(name: str) -> tuple[str | None, str]:
    """The field a family feeds and the engine's prefix; an untyped family keeps its "_total" in its name."""
    if name in EXTRAS:
        return EXTRAS[name], name.split(":")[0] + ":"
    name = name.removesuffix("_total")
    if name.endswith(trtllm_prom.LENGTH) and trtllm_prom.is_trtllm(name):
        return "length", name[: -len(trtllm_prom.LENGTH)]
    for suffix in sorted(COUNTERS, key=len, reverse=True):
        if name.endswith(suffix):
            return COUNTERS[suffix], name[: -len(suffix)]
    return None, ""


def _add(counts: dict, field: str, sample) -> None:
    value = sample.value
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{sample.name} = {value}: a counter is a finite count")
    if field == "per_pos":
        label = sample.labels.get("position", "")
        if not (label.isascii() and label.isdigit() and int(label) < MAX_K):
            raise ValueError(f"{sample.name} needs a position label from 0 to {MAX_K - 1}, got {sample.labels}")
        positions = counts.setdefault("per_pos", {})
        position = int(label)
        positions[position] = positions.get(position, 0) + value
    else:
        counts[field] = counts.get(field, 0) + value


def parse(texts, model: str | None = None, check=None) -> EngineRun:
    """The counts of one scrape (since the server started), or between the first and last of several; ``check()``
    before each scrape (a request's budget)."""
    ui = any(is_ui_table(text) for text in texts)
    scrapes = [chunk for text in texts for chunk in split_scrapes(from_ui_table(text) if is_ui_table(text) else text)]
    counts = []
    for i, chunk in enumerate(scrapes, 1):
        if check is not None:
            check()
        try:
            counts.append(scrape_counts(chunk))
        except ValueError as error:
            raise ValueError(f"scrape {i}: {error}") from error
    chosen = _model(counts, model)
    values = [c.get(chosen) for c in counts]
    if any(v is None or "accepted" not in v for v in values):
        raise ValueError("a scrape without spec_decode_num_accepted_tokens counters (speculative decoding off, or "
                         f"another model): accepted names end in {', '.join(COUNTERS)}")
    trtllm = trtllm_prom.is_trtllm(values[0]["prefix"])
    if trtllm and trtllm_prom.form(values) == "gauge":
        return trtllm_prom.gauge_run(values, chosen, "\n".join(scrapes))
    extra = trtllm_prom.counter_notes(values) if trtllm else ()
    runs = [counts_run(v, chosen) for v in values]
    if len(runs) == 1:
        return runs[0].with_notes("one scrape: counts since the server started", "read from a copy of Prometheus's "
                                  "web UI table (series | value); counters summed over engines" if ui else "", *extra)
    series = tuple(difference(b, a, i + 1) for i, (a, b) in enumerate(zip(runs, runs[1:]))) if len(runs) > 2 else ()
    return difference(runs[-1], runs[0], 0, series).with_notes(
        f"{len(runs)} scrapes: counts between the first and the last" + ("; the series holds each interval"
                                                                        if series else ""), *extra)


def _model(counts, model):
    models = sorted({m for c in counts for m in c})
    if model is not None:
        if model not in models:
            raise ValueError(f"no model {model!r} in the scrape (models: {', '.join(models) or 'none'})")
        return model
    if len(models) > 1:
        raise ValueError(f"the scrape holds several models ({', '.join(models)}): choose one with model=...")
    if not models:
        raise ValueError("no speculative-decoding counters in the scrape (names ending in "
                         f"{', '.join(COUNTERS)})")
    return models[0]


def counts_run(values: dict, model: str) -> EngineRun:
    prefix = values["prefix"]
    per_pos = values.get("per_pos") or {}
    if sorted(per_pos) != list(range(len(per_pos))):
        raise ValueError(f"per-position counters for positions {sorted(per_pos)}: expected 0 .. n-1")
    whole = {name: round(values[name]) if name in values else None
             for name in ("steps", "drafted", "accepted", "emitted", "requests")}
    notes = ["llama.cpp prints counters to six significant digits: counts above a million are rounded"] \
        if prefix == "llamacpp:" and max(v or 0 for v in whole.values()) >= 10**6 else []
    return EngineRun(source=f"Prometheus scrape ({prefix.rstrip(':_')})", model=model or None,
                     k=len(per_pos) or None, accepted_per_pos=tuple(round(per_pos[i]) for i in range(len(per_pos)))
                     if per_pos else None, notes=tuple(notes), **whole)


def difference(after: EngineRun, before: EngineRun, index: int, series=()) -> EngineRun:
    """The counts between two scrapes (a counter that fell means the server restarted in between)."""
    values = {}
    for name in ("drafted", "accepted", "steps", "emitted", "requests"):
        a, b = getattr(after, name), getattr(before, name)
        if a is not None and b is not None and a < b:
            where = f"between scrapes {index} and {index + 1}" if index else "between the first and last scrape"
            raise ValueError(f"{name} fell from {b} to {a} {where}: the server restarted; use scrapes of one "
                             "server lifetime")
        values[name] = None if a is None or b is None else a - b
    per_pos, earlier = after.accepted_per_pos, before.accepted_per_pos
    if earlier is None and before.accepted == 0:  # llama.cpp prints no per-position counters before it drafts
        earlier = (0,) * len(per_pos or ())
    if per_pos is not None and earlier is not None:
        per_pos = tuple(a - b for a, b in zip(per_pos, earlier))
    else:
        per_pos = None
    return EngineRun(source=after.source, model=after.model, k=after.k, accepted_per_pos=per_pos, series=series,
                     notes=after.notes, **values)
