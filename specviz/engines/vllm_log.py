"""vLLM's periodic speculative-decoding log line: one per logging interval, a time series.

V1 engine, vllm/v1/spec_decode/metrics.py, SpecDecodingLogging.log(), over the interval since the last line (the
logger resets after each):
  "SpecDecoding metrics: Mean acceptance length: %.2f, Accepted throughput: %.2f tokens/s, Drafted throughput:
  %.2f tokens/s, Accepted: %d tokens, Drafted: %d tokens, Per-position acceptance rate: %s, Avg Draft acceptance
  rate: %.1f%%"   with mean = 1 + accepted / num_drafts and rate_i = accepted_at_i / num_drafts ("%.3f" each,
  one per speculative token: k = how many). The number of drafts (steps) is not printed: it is recovered
  (``specviz.engines.rounding``). Fields are read by name, so builds that order them otherwise, or print a
  "Drafts: N" field, read too.
V0 engine, vllm/engine/metrics.py, LoggingStatLogger._format_spec_decode_metrics_str(): "Speculative metrics: Draft
  acceptance rate: %.3f, System efficiency: %.3f, Number of speculative tokens: %d, Number of accepted tokens: %d,
  Number of draft tokens: %d, Number of emitted tokens: %d." - totals since the engine started, so the intervals
  are the differences between lines.
"""
from __future__ import annotations

import math

from .lines import count, counted, failed_at, first_number, marked_lines, named_fields, numbers
from .rounding import checked_rates, counts_for, half_unit, recover_steps
from .run import EngineRun, total

V1_MARKER, V0_MARKER = "SpecDecoding metrics:", "Speculative metrics:"
MARKERS = (V1_MARKER, V0_MARKER)
SOURCE = "vLLM log"


def parse(text: str, check=None) -> EngineRun:
    """The log's marked lines as one run; ``check()`` before each line (a request's budget)."""
    lines = marked_lines(text, MARKERS)
    v0 = [line for line in lines if V0_MARKER in line[1]]
    if v0 and len(v0) < len(lines):
        raise failed_at(v0[0][0], v0[0][1], ValueError("V0 ('Speculative metrics') and V1 ('SpecDecoding "
                                                       "metrics') lines mixed: two engines' logs in one file?"))
    if v0:
        return _v0_run(v0, check)
    runs = []
    for n, line, body in lines:
        if check is not None:
            check()
        try:
            run = v1_interval(named_fields(body))
        except ValueError as error:
            raise failed_at(n, line, error) from error
        if run is not None:
            runs.append(run)
    if not runs:
        raise ValueError("the vLLM log lines report no drafts (every interval was idle)")
    return total(runs, SOURCE).with_notes(counted(len(runs), "logging interval") + "; totals are their sums")


def v1_interval(fields: dict[str, str]) -> EngineRun | None:
    """One V1 line as a run (None for an interval that drafted nothing: vLLM prints nan rates then)."""
    accepted = count(_field(fields, "Accepted"), "Accepted")
    drafted = count(_field(fields, "Drafted"), "Drafted")
    mean = first_number(_field(fields, "Mean acceptance length"), "Mean acceptance length")
    if drafted == 0 or math.isnan(mean):
        return None
    rates = checked_rates(numbers(fields.get("Per-position acceptance rate", ""), "Per-position acceptance rate"))
    _check_printed_rate(fields, accepted, drafted)
    if "Drafts" in fields:  # a build that prints the number of drafts: nothing to recover
        steps, note = count(fields["Drafts"], "Drafts"), "steps = the printed Drafts"
        per_pos = _rounded_counts(steps, rates, accepted)
    else:
        found = recover_steps(accepted, mean, 2, rates, drafted)
        steps, per_pos, note = found.steps, found.accepted_per_pos, found.note
    k_note = f"k = {len(rates)}, the number of per-position rates" if rates else ""
    return EngineRun(source=SOURCE, drafted=drafted, accepted=accepted, steps=steps, k=len(rates) or None,
                     accepted_per_pos=per_pos, notes=(note, k_note) if k_note else (note,))


def _field(fields: dict[str, str], name: str) -> str:
    if name not in fields:
        raise ValueError(f"no '{name}:' field (read: {', '.join(fields) or 'none'})")
    return fields[name]


def _check_printed_rate(fields, accepted: int, drafted: int) -> None:
    """The printed acceptance rate must agree with the printed counts (else the line is not what it seems)."""
    for name in ("Avg Draft acceptance rate", "Draft acceptance rate"):
        if name in fields:
            printed = first_number(fields[name], name)
            scale = 100.0 if "%" in fields[name] or printed > 1 else 1.0
            decimals = max(len(fields[name].split()[0].rstrip("%").partition(".")[2]), 0)
            if abs(printed / scale - accepted / drafted) > half_unit(decimals) / scale + 1e-6:
                raise ValueError(f"the printed {name} ({fields[name]}) disagrees with Accepted / Drafted = "
                                 f"{accepted} / {drafted}")


def _rounded_counts(steps, rates, accepted):
    return counts_for(steps, rates, accepted) if rates and steps else None


def _v0_run(lines, check=None) -> EngineRun:
    cumulative = []
    for n, line, body in lines:
        if check is not None:
            check()
        fields = named_fields(body)
        try:
            cumulative.append(_v0_totals(fields))
        except ValueError as error:
            raise failed_at(n, line, error) from error
    intervals = [cumulative[0]] + [_difference(b, a, i + 2) for i, (a, b) in
                                   enumerate(zip(cumulative, cumulative[1:]))]
    last = cumulative[-1]
    return EngineRun(source=SOURCE + " (V0 engine)", drafted=last.drafted, accepted=last.accepted, steps=last.steps,
                     k=last.k, emitted=last.emitted, series=tuple(intervals) if len(intervals) > 1 else (),
                     notes=last.notes + ("V0 lines are totals since the engine started: the series holds the "
                                         "differences between lines",))


def _v0_totals(fields) -> EngineRun:
    k = count(_field(fields, "Number of speculative tokens"), "Number of speculative tokens")
    drafted = count(_field(fields, "Number of draft tokens"), "Number of draft tokens")
    steps = drafted // k if k and drafted % k == 0 else None
    note = "steps = draft tokens / k (V0 proposes k tokens per sequence and step)" if steps is not None else \
        "draft tokens are not a multiple of k: steps unknown"
    return EngineRun(source=SOURCE + " (V0 engine)", drafted=drafted, steps=steps, k=k or None,
                     accepted=count(_field(fields, "Number of accepted tokens"), "Number of accepted tokens"),
                     emitted=count(_field(fields, "Number of emitted tokens"), "Number of emitted tokens"),
                     notes=(note,))


def _difference(after: EngineRun, before: EngineRun, index: int) -> EngineRun:
    values = {}
    for name in ("drafted", "accepted", "steps", "emitted"):
        a, b = getattr(after, name), getattr(before, name)
        if a is not None and b is not None and a < b:
            raise ValueError(f"V0 line {index}: {name} fell from {b} to {a}: the engine restarted; read one "
                             "engine lifetime at a time")
        values[name] = None if a is None or b is None else a - b
    return EngineRun(source=after.source, k=after.k, **values)
