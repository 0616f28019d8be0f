"""TensorRT-LLM ``trtllm-bench`` decoding statistics: percentiles over requests, no totals.

tensorrt_llm/bench/dataclasses/reporting.py (0249976575050d2c624a5f285683c66de311a3b7), per request:
  [DT]  'Number of Draft Tokens' = max_draft_len x (decode iterations + 1): the configured maximum, an upper bound on
        what was drafted (TRT-LLM PR #14724's review);
  [ADT] 'Number of Accepted Draft Tokens' = output tokens - (decode iterations + 1);
  [DAR] 'Draft Acceptance Rate' = ADT / DT, so at most accepted / drafted;
  [AL]  'Acceptance Length' = output tokens / decode iterations (bonus and the context-phase token included);
each printed as "[XX] MINIMUM / MAXIMUM / AVERAGE / P50 / P90 / P95 / P99: %.2f" over the requests.
2025 builds printed the same per-request length under '[AR]' 'Acceptance Rate Details' (PR #4168's output: values
above 1; reporting.py then named output tokens / iterations 'acceptance rate'): '[AR]' values of at least 1 are read
as lengths, and '[AR]' values below 1 are ambiguous and kept as printed.
A block ends where a label's statistic repeats (several batch sizes pasted one after another): one MeanRun each.
``--report_json`` writes the same four statistics under "decoding_stats" ("mode", then num_draft_tokens_percentiles,
num_accepted_draft_tokens_percentiles, draft_acceptance_rate_percentiles, acceptance_length_percentiles: each
{"minimum", "maximum", "average", "p50", "p90", "p95", "p99"}), so that file carries no totals either: it is
refused, named (``report_refusal``).
"""
from __future__ import annotations

from .lines import counted, failed_at, first_number, short_lines
from .means import MeanRun, Spread
from .nearest import closest

SOURCE = "trtllm-bench decoding statistics"
LABELS = ("[AL]", "[AR]", "[DAR]", "[DT]", "[ADT]")
STATS = ("MINIMUM", "MAXIMUM", "AVERAGE")
REPORT_KEY = '"decoding_stats"'
REPORT_STATS = ("num_draft_tokens_percentiles", "num_accepted_draft_tokens_percentiles",
                "draft_acceptance_rate_percentiles", "acceptance_length_percentiles")


def rows(text: str) -> list[tuple[int, str, Spread]]:
    """(line number, line, Spread) of every '[XX] STAT: value' line with one of LABELS."""
    out = []
    for n, line in enumerate(short_lines(text), 1):
        body = line.strip()
        label, sep, rest = body.partition(" ")
        if label not in LABELS or not sep:
            continue
        stat, colon, value = rest.partition(":")
        stat = stat.strip()
        if colon and (stat in STATS or (stat[:1] == "P" and stat[1:].isdigit())):
            try:
                out.append((n, body, Spread(label, stat, first_number(value, f"{label} {stat}"))))
            except ValueError as error:
                raise failed_at(n, body, error) from error
    return out


def is_bench(text: str) -> bool:
    return bool(rows(text))


def parse(text: str, check=None) -> MeanRun:
    blocks, seen = [[]], set()
    for n, line, spread in rows(text):
        key = (spread.label, spread.stat)
        if key in seen:
            blocks.append([])
            seen = set()
        seen.add(key)
        blocks[-1].append((n, line, spread))
    runs = []
    for block in blocks:
        if check is not None:
            check()
        runs.append(_block(block))
    if len(runs) == 1:
        return runs[0]
    return MeanRun(source=SOURCE, series=tuple(runs), notes=(
        f"{counted(len(runs), 'block')} of percentiles (a statistic repeats where a block starts: several runs pasted "
        "together, e.g. batch sizes); each is kept apart, not pooled",) + runs[0].notes[1:])


def _block(block) -> MeanRun:
    spreads = tuple(s for _, _, s in block)
    average = {s.label: s.value for s in spreads if s.stat == "AVERAGE"}
    notes = ["percentiles over requests (no totals): drafted, accepted and step counts cannot be recovered"]
    length, rate, meaning = average.get("[AL]"), average.get("[DAR]"), None
    if "[AR]" in average:
        low = min(s.value for s in spreads if s.label == "[AR]")
        if low >= 1:
            length = average["[AR]"]
            notes.append("'[AR]' read as an acceptance LENGTH (2025 builds: output tokens / decode iterations per "
                         f"request, bonus included): its values are at least 1 (lowest {low}), which no rate is")
        else:
            n, line, _ = next(r for r in block if r[2].label == "[AR]")
            notes.append(f"'[AR]' is ambiguous (line {n}: {line!r}): 2025 builds printed an acceptance length under "
                         "that label, but a value below 1 is not one; kept as printed, not used")
    if length is not None:
        notes.append("mean length = the [AL] AVERAGE (or [AR]): per-request output tokens / decode iterations, "
                     "averaged over requests, not pooled over steps")
    if rate is not None:
        meaning = ("accepted drafts / (max_draft_len x iterations) per request, averaged over requests: the drafted "
                   "count is the configured maximum, so this is at most accepted / drafted")
        notes.append("acceptance rate = the [DAR] AVERAGE: " + meaning)
    if length is not None and not 1 <= length <= 65:
        n, line, _ = block[0]
        raise failed_at(n, line, ValueError(f"an acceptance length of {length} is not one (1 to 65)"))
    return MeanRun(source=SOURCE, mean_length=length, acceptance_rate=rate, rate_meaning=meaning, spreads=spreads,
                   notes=tuple(notes))


def report_refusal(text: str, records) -> str | None:
    """The refusal for trtllm-bench --report_json's "decoding_stats" (percentiles over requests, no totals), naming
    what it holds and the line of its key; None where no record holds one."""
    stats = next((obj["decoding_stats"] for _, obj in records if isinstance(obj.get("decoding_stats"), dict)
                  and any(key in obj["decoding_stats"] for key in REPORT_STATS)), None)
    at = text.find(REPORT_KEY)
    if stats is None or at < 0:
        return None
    start = text.rfind("\n", 0, at) + 1
    line = text[start:text.find("\n", at) if "\n" in text[at:] else len(text)]
    shown = line if len(line) <= 120 else line[at - start:]
    length = (stats.get("acceptance_length_percentiles") or {}).get("average")
    said = f"; here mode {stats.get('mode')!r}" + (
        f", acceptance length AVERAGE {length:.2f}" if isinstance(length, (int, float)) else "")
    return closest("TensorRT-LLM trtllm-bench --report_json 'decoding_stats'",
                   "it holds percentiles over requests (minimum to p99) of the draft tokens (the configured maximum x "
                   "decode iterations, an upper bound), accepted draft tokens, acceptance rate and acceptance length "
                   "(bonus included), with no totals: drafted, accepted and step counts cannot be recovered" + said,
                   text.count("\n", 0, at) + 1, shown,
                   "the responses with their per-choice speculative_decoding object, or trtllm-serve's iteration "
                   "stats (/metrics JSON with specDecodingStats)")
