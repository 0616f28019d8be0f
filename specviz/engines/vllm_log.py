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
Load: each interval's throughput line, printed just before its metrics line with the same timestamp (V1
vllm/v1/metrics/loggers.py: "Engine 000: Avg prompt throughput: %.1f tokens/s, Avg generation throughput: %.1f
tokens/s, Running: %d reqs, Waiting: %d reqs, GPU KV cache usage: %.1f%%, ..." then the SpecDecoding line; V0
vllm/engine/metrics.py: "Avg prompt throughput: ..., Running: %d reqs, Swapped: %d reqs, Pending: %d reqs, GPU KV
cache usage: %.1f%%, ..." then the Speculative line). A metrics line takes the last throughput line after the previous
metrics line of the same process; with data parallelism each engine prints its pair, so each interval keeps its own
engine's load.
Producers (``producers``): with data parallelism or several API servers, the lines of concurrent engines interleave.
Each interval keeps its producer: the process tag its line starts with ('(APIServer pid=N)'), a DP rank tag, and the
engine its throughput line names ('Engine 001:'; 'N Engines Aggregated:' names one logger for all). Totals sum every
producer's lines; V0's running totals are differenced within each producer. Where one producer printed several lines
at one moment (engines whose throughput lines are not in the log), that moment's lines are merged into one interval.
"""
from __future__ import annotations

import math
from dataclasses import replace

from .lines import count, counted, failed_at, first_number, marked_lines, named_fields, numbers, short_lines
from .means import MeanRun
from .nearest import closest
from .producers import engine_of, moment_of, process_of, producer_of, producers_note
from .rounding import checked_rates, counts_for, half_unit, recover_steps
from .run import EngineRun, Load, check_k, total

V1_MARKER, V0_MARKER = "SpecDecoding metrics:", "Speculative metrics:"
MARKERS = (V1_MARKER, V0_MARKER)
BARE_HEADS = ("Draft acceptance rate: ", "Mean acceptance length: ")  # a line pasted without its prefix starts so
BARE_NEEDS = ("Accepted: ", "Drafted: ")
V0_ONLY = ("Number of speculative tokens", "System efficiency", "Number of emitted tokens",
           "Number of emitted tokens tokens")  # fields early V1's 'Speculative metrics:' line never printed
SOURCE = "vLLM log"
LOAD_MARKER = "Avg prompt throughput:"
COUNT_FIELDS = ("Accepted", "Drafted", "Number of accepted tokens", "Number of draft tokens")  # V1, early V1 / V0


def vllm_lines(text: str) -> list[tuple[int, str, str]]:
    """(line number, line, fields text) of every vLLM metrics line: with its prefix, or the V1 field list pasted
    without it (a line that starts with one of BARE_HEADS and holds 'Accepted: ' and 'Drafted: ')."""
    out = marked_lines(text, MARKERS)
    marked = {n for n, _, _ in out}
    for n, line in enumerate(short_lines(text, MARKERS), 1):
        body = line.strip()
        if n not in marked and body.startswith(BARE_HEADS) and all(f in body for f in BARE_NEEDS):
            out.append((n, body, body))
    return sorted(out)


def is_v0(fields: dict[str, str]) -> bool:
    return any(name in fields for name in V0_ONLY)


def parse(text: str, check=None) -> EngineRun:
    """The log's metrics lines as one run; ``check()`` before each line (a request's budget). Each interval keeps
    the producer that printed it (``producers``): totals sum every producer's lines."""
    lines = [(n, line, named_fields(body)) for n, line, body in vllm_lines(text)]
    uncounted = without_counts(lines)
    if uncounted is not None:
        raise ValueError(uncounted)
    v0 = [line for line in lines if is_v0(line[2])]
    if v0 and len(v0) < len(lines):
        raise failed_at(v0[0][0], v0[0][1], ValueError("V0 lines (with 'Number of emitted tokens') and V1 lines "
                                                       "mixed: two engines' logs in one file?"))
    paired = paired_lines(text, [(n, line) for n, line, _ in lines])
    loads, names = _loads(paired), line_producers([(n, line) for n, line, _ in lines], paired)
    if v0:
        return _v0_run(v0, check, loads, names)
    runs = []
    for n, line, fields in lines:
        if check is not None:
            check()
        try:
            run = v1_interval(fields)
        except ValueError as error:
            raise failed_at(n, line, error) from error
        if run is not None:
            runs.append((moment_of(_prefix(line)), replace(run, load=loads.get(n), producer=names[n])))
    if not runs:
        raise ValueError("the vLLM log lines report no drafts (every interval was idle)")
    series, merged = merged_moments(runs)
    return total(series, SOURCE).with_notes(
        counted(len(runs), "logging interval") + "; totals are their sums", _version_note(lines),
        _load_note(loads, len(lines)), producers_note([r.producer for _, r in runs]), merged)


def without_counts(lines) -> str | None:
    """The refusal for metrics lines none of which carries a count (a paste that kept the means and throughputs
    and dropped 'Accepted: N tokens, Drafted: M tokens', in any build's field order), else None."""
    if not lines or any(name in fields for _, _, fields in lines for name in COUNT_FIELDS):
        return None
    means = [first_number(fields["Mean acceptance length"], "Mean acceptance length")
             for _, _, fields in lines if "Mean acceptance length" in fields]
    said = f"; here {counted(len(lines), 'line')}" + (f" with Mean acceptance length {min(means):.2f}" + (
        f" to {max(means):.2f}" if max(means) > min(means) else "") if means else "")
    n, line, _ = lines[0]
    return closest("vLLM 'SpecDecoding metrics' lines without their counts",
                   "they keep the means (Mean acceptance length = 1 + accepted / drafts, bonus included; Per-position "
                   "acceptance rate = accepted at i / drafts) and the throughputs (tokens per second over an interval "
                   "the line does not state) but not 'Accepted: N tokens, Drafted: M tokens', and no mean gives the "
                   "number of drafts back" + said, n, line,
                   "the whole 'SpecDecoding metrics:' lines as the server printed them, or its /metrics "
                   "(vllm:spec_decode_*)")


def _prefix(line: str) -> str:
    """The text before the line's marker ("" for a field list pasted without it)."""
    at = min((line.find(m) for m in MARKERS + (LOAD_MARKER,) if m in line), default=0)
    return line[:at]


def line_producers(metric_lines, paired: dict[int, tuple[int, str]]) -> dict[int, str | None]:
    """{metrics line number: its producer}: the line's own prefix (process, rank) and the engine its throughput line
    names ('Engine 001:'; the SpecDecoding line itself names none). A line whose throughput line is not in the log
    (cut above it, or filtered out) takes the one engine the other lines of its process name, if they name one."""
    own = {n: (producer_of(_prefix(line)), engine_of(_prefix(paired[n][1])) if n in paired else None)
           for n, line in metric_lines}
    engines: dict = {}
    for base, engine in own.values():
        engines.setdefault(base, set()).add(engine)
    out = {}
    for n, (base, engine) in own.items():
        named = engines[base] - {None}
        engine = engine or (next(iter(named)) if len(named) == 1 else None)
        out[n] = " ".join(p for p in (base, engine) if p) or None
    return out


def merged_moments(runs) -> tuple[list[EngineRun], str]:
    """The intervals, where one producer printed several lines at one moment (engines of one server whose throughput
    lines are not in the log, so they cannot be told apart) with each such moment's lines merged into one interval:
    concurrent lines summed, never read as successive. ``runs``: (moment or None, interval) in log order."""
    at: dict = {}
    for i, (moment, run) in enumerate(runs):
        at.setdefault((run.producer, moment) if moment else i, []).append(run)
    groups = [g for g in at.values() if len(g) > 1]
    if not groups:
        return [run for _, run in runs], ""
    series = [g[0] if len(g) == 1 else replace(total(g, keep_series=False), producer=g[0].producer)
              for g in at.values()]
    return series, (f"{sum(map(len, groups))} lines printed at one moment by one producer ({len(groups)} moments): "
                    "concurrent engines whose lines do not name them (their throughput lines are not in the log), so "
                    "each moment's lines are merged into one interval of the series (counts summed); that series is "
                    "the server's, so traffic moving between its engines moves it too")


def paired_lines(text: str, metric_lines: list[tuple[int, str]]) -> dict[int, tuple[int, str]]:
    """{metrics line number: (number, line) of the throughput line printed for the same interval}: the last one
    after the previous metrics line of the same process, where every line names its process ('(APIServer pid=N)':
    several servers' lines interleave), else of the whole log (see the module's docstring)."""
    found = [(n, line) for n, line, _ in marked_lines(text, (LOAD_MARKER,))]
    every = all(process_of(line) for _, line in found + metric_lines)
    def key(line):
        return process_of(line) if every else None
    out = {}
    for process in dict.fromkeys(key(line) for _, line in metric_lines):
        out |= _paired([f for f in found if key(f[1]) == process], [n for n, line in metric_lines
                                                                     if key(line) == process])
    return out


def _paired(found: list[tuple[int, str]], metric_lines: list[int]) -> dict[int, tuple[int, str]]:
    out, at, previous = {}, 0, 0
    for n in metric_lines:
        last = None
        while at < len(found) and found[at][0] < n:
            if found[at][0] > previous:
                last = found[at]
            at += 1
        if last is not None:
            out[n] = last
        previous = n
    return out


def _loads(paired: dict[int, tuple[int, str]]) -> dict[int, Load]:
    out = {}
    for n, (at, line) in paired.items():
        try:
            out[n] = load_of(line)
        except ValueError as error:
            raise failed_at(at, line, error) from error
    return out


def load_of(line: str) -> Load:
    """A throughput line's load, fields by name: Running, Waiting (V1) or Pending (V0), GPU KV cache usage, the
    prompt and generation throughputs."""
    fields = named_fields(line[line.find(LOAD_MARKER):])
    def whole(name):
        return count(fields[name], name) if name in fields else None
    def tps(name):
        return first_number(fields[name], name) if name in fields else None
    usage = first_number(fields["GPU KV cache usage"], "GPU KV cache usage") / 100 \
        if "GPU KV cache usage" in fields else None
    queued = whole("Waiting") if "Waiting" in fields else whole("Pending")
    return Load(running=whole("Running"), queued=queued, kv_usage=usage, prompt_tps=tps("Avg prompt throughput"),
                gen_tps=tps("Avg generation throughput"))


def _load_note(loads: dict, intervals: int) -> str:
    if not loads:
        return ""
    return (f"load: {len(loads)} of {counted(intervals, 'interval')} paired with the throughput line printed just "
            "before (Running = requests decoding, Waiting/Pending = queued, throughputs over the same interval)")


def _version_note(lines) -> str:
    fields = lines[0][2]
    if "Number of draft tokens" in fields:
        return ("read as an early V1 line (2025, before vLLM #15902): 'Speculative metrics:' is also V0's prefix, "
                "but the line has no 'Number of emitted tokens' or 'System efficiency', which V0 always prints; "
                "each line covers one logging interval")
    if "Mean acceptance length" not in fields:
        return ("read as a V1 line of vLLM #15902's form (rate, Accepted, Drafted): no mean length and no number "
                "of drafts, so steps are unknown; each line covers one logging interval")
    return ("read as V1 lines (fields by name: Accepted, Drafted, Mean acceptance length = 1 + accepted / drafts, "
            "bonus included); each line covers one logging interval")


def v1_interval(fields: dict[str, str]) -> EngineRun | None:
    """One V1 line as a run (None for an interval that drafted nothing: vLLM prints nan rates then)."""
    early = "Number of draft tokens" in fields  # early V1 (before #15902): V0's labels, per interval
    accepted = count(_field(fields, "Number of accepted tokens" if early else "Accepted"), "Accepted")
    drafted = count(_field(fields, "Number of draft tokens" if early else "Drafted"), "Drafted")
    mean = first_number(fields["Mean acceptance length"], "Mean acceptance length") \
        if "Mean acceptance length" in fields else None
    if drafted == 0 or (mean is not None and math.isnan(mean)):
        return None
    rates = checked_rates(numbers(fields.get("Per-position acceptance rate", ""), "Per-position acceptance rate"))
    _check_printed_rate(fields, accepted, drafted)
    if "Drafts" in fields:  # a build that prints the number of drafts: nothing to recover
        steps, note = count(fields["Drafts"], "Drafts"), "steps = the printed Drafts"
        per_pos = _rounded_counts(steps, rates, accepted)
    elif mean is None:
        steps, per_pos, note = None, None, "no mean acceptance length printed: steps unknown"
    else:
        found = recover_steps(accepted, mean, 2, rates, drafted)
        steps, per_pos, note = found.steps, found.accepted_per_pos, found.note
        if rates and steps is not None and steps * len(rates) < drafted:  # fewer steps than k drafts a step allow
            steps, per_pos, note = _steps_from_drafted(accepted, drafted, mean, rates)
    k_note = f"k = {len(rates)}, the number of per-position rates" if rates else ""
    return EngineRun(source=SOURCE, drafted=drafted, accepted=accepted, steps=steps, k=len(rates) or None,
                     accepted_per_pos=per_pos, notes=(note, k_note) if k_note else (note,))


def _steps_from_drafted(accepted: int, drafted: int, mean: float, rates) -> tuple[int | None, tuple | None, str]:
    """Steps = drafted / k where that fits the printed mean and every printed rate (each position's count may lie
    anywhere that prints as its rate); the per-position counts only where one choice sums to accepted."""
    k = len(rates)
    steps = drafted // k if drafted % k == 0 else None
    if steps is None or abs(1 + accepted / steps - mean) > half_unit(2) + 1e-9:
        return None, None, f"no whole number of steps fits the printed mean {mean} with {drafted} drafted at k = {k}"
    low = [math.ceil((r - half_unit(3)) * steps - 1e-9) for r in rates]
    high = [math.floor((r + half_unit(3)) * steps + 1e-9) for r in rates]
    if not sum(low) <= accepted <= sum(high):
        return None, None, f"the per-position rates fit no counts over drafted / k = {steps} steps"
    unique = tuple(low) if sum(low) == accepted else tuple(high) if sum(high) == accepted else None
    note = (f"steps = drafted / k = {drafted} / {k}: consistent with the printed mean {mean} and rates (rounding "
            "alone does not pin the step count nearer)")
    return steps, unique, note + ("" if unique else "; per-position counts not unique at 3 decimals, left unknown")


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


def _v0_run(lines, check=None, loads=None, names=None) -> EngineRun:
    """V0 lines are totals since their engine started: each producer's intervals are the differences between its
    own lines (another producer's line is no earlier total of it), and the run's totals add each producer's last."""
    loads, names = loads or {}, names or {}
    cumulative = []
    for n, line, fields in lines:
        if check is not None:
            check()
        try:
            cumulative.append(replace(_v0_totals(fields), load=loads.get(n), producer=names.get(n)))
        except ValueError as error:
            raise failed_at(n, line, error) from error
    intervals, last_of = [], {}
    for i, run in enumerate(cumulative):
        before = last_of.get(run.producer)
        intervals.append(run if before is None else replace(_difference(run, before, i + 1), load=run.load,
                                                            producer=run.producer))
        last_of[run.producer] = run
    lasts = list(last_of.values())
    last = lasts[0] if len(lasts) == 1 else total(lasts, keep_series=False)
    return EngineRun(source=SOURCE + " (V0 engine)", drafted=last.drafted, accepted=last.accepted, steps=last.steps,
                     k=last.k, emitted=last.emitted, series=tuple(intervals) if len(intervals) > 1 else (),
                     load=intervals[0].load if len(intervals) == 1 else None, producer=last.producer,
                     notes=last.notes + ("V0 lines are totals since the engine started: the series holds the "
                                         "differences between lines",)).with_notes(
        _load_note(loads, len(lines)), producers_note([r.producer for r in cumulative]))


def _v0_field(fields, name: str) -> int:
    """A V0 count by name; some V0 builds (around v0.5) print 'Number of draft tokens tokens:' (sic)."""
    return count(fields[name + " tokens"] if name + " tokens" in fields else _field(fields, name), name)


def _v0_totals(fields) -> EngineRun:
    """One V0 line. V0's 'Number of accepted tokens' counts every draft that matched, also after the first
    rejection (vllm#9565: [1,0,1,0] counts 2), so it is not the accepted prefix; emitted = prefix + one token a
    step, so the prefix is emitted - steps, with steps = draft tokens / k (V0 drafts k tokens a step)."""
    k = check_k(_v0_field(fields, "Number of speculative tokens"), "Number of speculative tokens")
    drafted = _v0_field(fields, "Number of draft tokens")
    matched = _v0_field(fields, "Number of accepted tokens")
    emitted = _v0_field(fields, "Number of emitted tokens")
    if drafted % k:
        raise ValueError(f"draft tokens ({drafted}) are not a multiple of k = {k}: V0 drafts k tokens a step, so "
                         "steps, and with them the accepted prefix, cannot be known")
    steps = drafted // k
    if not steps <= emitted <= steps * (k + 1):
        raise ValueError(f"{emitted} emitted tokens in {steps} steps (draft tokens / k): a step emits 1 to k + 1")
    _check_efficiency(fields, emitted, steps, k)
    return EngineRun(source=SOURCE + " (V0 engine)", drafted=drafted, steps=steps, k=k, accepted=emitted - steps,
                     emitted=emitted, notes=(
                         f"V0 semantics (the line prints 'Number of emitted tokens', which only V0 does): "
                         f"steps = draft tokens / k = {drafted} / {k}; accepted = emitted - steps = {emitted} - "
                         f"{steps} = {emitted - steps} (the accepted prefix); the printed accepted count "
                         f"{matched} counts every matching draft, also after the first rejection (vllm#9565)",))


def _check_efficiency(fields, emitted: int, steps: int, k: int) -> None:
    """V0's System efficiency = emitted / (steps x (k + 1)) must agree with the counts (else steps is not
    draft tokens / k and the line is not what it seems)."""
    if "System efficiency" not in fields or not steps:
        return
    printed = first_number(fields["System efficiency"], "System efficiency")
    if abs(printed - emitted / (steps * (k + 1))) > half_unit(3):
        raise ValueError(f"the printed System efficiency {printed} is not emitted / (steps x (k + 1)) = {emitted} / "
                         f"({steps} x {k + 1})")


def _difference(after: EngineRun, before: EngineRun, index: int) -> EngineRun:
    values = {}
    for name in ("drafted", "accepted", "steps", "emitted"):
        a, b = getattr(after, name), getattr(before, name)
        if a is not None and b is not None and a < b:
            raise ValueError(f"V0 line {index}: {name} fell from {b} to {a}: the engine restarted; read one "
                             "engine lifetime at a time")
        values[name] = None if a is None or b is None else a - b
    return EngineRun(source=after.source, k=after.k, **values)


def is_throughput_log(text: str) -> bool:
    """A vLLM log with throughput lines and no speculative-decoding line (a server run with speculation off)."""
    return bool(marked_lines(text, (LOAD_MARKER,))) and not vllm_lines(text)


def parse_throughput(text: str, check=None) -> MeanRun:
    """Each throughput line's load, as a run with speculation off (a MeanRun with no acceptance figure)."""
    parts = []
    for n, line, _ in marked_lines(text, (LOAD_MARKER,)):
        if check is not None:
            check()
        try:
            parts.append(MeanRun(source=SOURCE, load=load_of(line)))
        except ValueError as error:
            raise failed_at(n, line, error) from error
    return MeanRun(source=SOURCE, series=parts, notes=(
        f"{counted(len(parts), 'throughput line')} and no SpecDecoding line: read as a run with speculation off "
        "(its load and generation throughput per interval only)",))
