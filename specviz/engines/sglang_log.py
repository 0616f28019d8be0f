"""SGLang's scheduler log: one 'Decode batch' line per logging interval (--decode-log-interval, 40 decode steps by
default), with the load beside the speculative means.

python/sglang/srt/managers/scheduler_metrics_mixin.py, log_decode_stats():
  "Decode batch. #running-req: %d, #token: %d, token usage: %.2f, [accept len: %.2f, [accept rate: %.2f,]] cuda graph:
  %s, gen throughput (token/s): %.2f, #queue-req: %d"   2024-2025; 2026 builds print "Decode batch," and, with hybrid
  models, '#full token' / 'full token usage' for '#token' / 'token usage', and may add 'cap len' (the verify width,
  root token included) after 'accept rate'. Fields are read by name.
'accept len' = tokens emitted per verify step over the interval, bonus token included (the scheduler divides the
accepted tokens, bonus counted, by the verify forwards) in every version seen. 'accept rate' changed meaning:
  before sglang#11572 (2025-10-13): accept len / speculative_num_steps (it could exceed 1, which #11572 fixed);
  older builds after it: accept len / n, the bonus-inclusive tokens over the step width (speculative_num_steps + 1,
  or speculative_num_draft_tokens after sglang#13212), so rate = len / n for a whole n, not drafts accepted; a
  2026-03 build still printed it (sglang#21723: accept len 2.64, accept rate 0.66 with 4 draft tokens);
  later builds (2026-07 on): (accept len - 1) / (draft tokens - 1), accepted drafts per drafted token.
The line does not say its version: the definition is told from the printed figures (which one every line satisfies
for one whole n or k, within the printed rounding), and a line both fit, or neither, is said to be ambiguous.
Also read: 'accept len: X, accept rate: Y' fields pasted without their 'Decode batch' line (no load then), and lines
of several data-parallel ranks ('[DP3 TP3 EP3 ...]'), which are concurrent: each rank logs its own batch, and each
entry keeps its rank as its producer (``producers``), so no check reads one rank's line as following another's.
No counts: the lines are kept as a MeanRun, one entry per line, never pooled.
"""
from __future__ import annotations

import re
from dataclasses import replace

from .lines import count, counted, failed_at, first_number, marked_lines, named_fields, short_lines
from .means import MeanRun
from .producers import producer_of
from .run import Load

SOURCE = "SGLang Decode batch log"
MARKER = "Decode batch"
HALF = 0.005  # half the last printed digit of 'accept len' and 'accept rate' (%.2f)


FIELDS = "accept len:"  # a line that starts with it: a Decode batch line's fields pasted without the line
RANK = re.compile(r"\[(?:[^\]]{0,80}\s)?(DP\d{1,4})\s")  # "[DP3 TP3 EP3 ...]", "[2025-10-22 10:27:56 DP0 TP0]"


def is_decode_log(text: str) -> bool:
    return bool(decode_lines(text))


def decode_lines(text: str) -> list[tuple[int, str, dict[str, str]]]:
    """(line number, line, fields by name) of every Decode batch line, or else of every line of its fields."""
    found = [(n, line, named_fields(body.lstrip(".,").strip())) for n, line, body in marked_lines(text, (MARKER,))
             if "#running-req" in body]
    return found or field_lines(text)


def field_lines(text: str) -> list[tuple[int, str, dict[str, str]]]:
    """Lines that begin 'accept len: X, accept rate: Y' (the fields someone cut out of Decode batch lines)."""
    return [(n, line.strip(), named_fields(line.strip())) for n, line in enumerate(short_lines(text, (FIELDS,)), 1)
            if line.strip().startswith(FIELDS) and "accept rate:" in line]


def parse(text: str, check=None) -> MeanRun:
    lines = decode_lines(text)
    if not lines:
        raise ValueError("no SGLang 'Decode batch' line with '#running-req', and no 'accept len: X, accept rate: Y' "
                         "line")
    entries = []
    for n, line, fields in lines:
        if check is not None:
            check()
        try:
            entries.append(replace(_interval(fields), producer=producer_of(line[:max(line.find(MARKER), 0)])))
        except ValueError as error:
            raise failed_at(n, line, error) from error
    meaning, k, note = rate_meaning([e for e in entries if e.acceptance_rate is not None
                                     and e.mean_length is not None], lines)
    if k is not None or meaning is not None:
        entries = [_with(e, meaning, k) for e in entries]
    speculative = sum(e.mean_length is not None for e in entries)
    notes = [counted(len(entries), "Decode batch line") + " (one logging interval each); "
             + (f"{speculative} with 'accept len' = tokens per verify step, bonus included (completion tokens over "
                "verify steps); means are kept per line, not pooled (the lines print no step counts)" if speculative
                else "none prints 'accept len': speculation off, load and throughput only"), note, _fields_note(lines),
             _pasted_note(lines), ranks_note(lines)]
    return MeanRun(source=SOURCE, k=k, rate_meaning=meaning, series=tuple(entries), notes=tuple(n for n in notes if n))


def _interval(fields: dict[str, str]) -> MeanRun:
    def number(*names):
        name = next((n for n in names if n in fields), None)
        return first_number(fields[name], name) if name else None
    def whole(*names):
        name = next((n for n in names if n in fields), None)
        return count(fields[name], name) if name else None
    load = Load(running=whole("#running-req"), queued=whole("#queue-req"), tokens=whole("#token", "#full token"),
                kv_usage=number("token usage", "full token usage"), gen_tps=number("gen throughput (token/s)"))
    cap = number("cap len")
    return MeanRun(source=SOURCE, mean_length=number("accept len"), acceptance_rate=number("accept rate"),
                   k=round(cap) - 1 if cap is not None and cap == round(cap) and cap >= 2 else None, load=load)


def rate_meaning(entries, lines=()) -> tuple[str | None, int | None, str]:
    """(the rate's definition, k where it pins it, a note saying which and why) from the printed figures."""
    entries = _distinct(entries)
    if not entries:
        return None, None, ("this build prints 'accept len' without 'accept rate'" if any(
            "accept len" in f for _, _, f in lines) else "")
    ks = {e.k for e in entries if e.k is not None}
    candidates = sorted(ks) if len(ks) == 1 else range(1, 65)
    by_drafts = [k for k in candidates if _all_fit(entries, lambda e, k=k: (e.mean_length - 1) / k, k)]
    by_length = [n for n in range(2, 66) if _all_fit(entries, lambda e, n=n: e.mean_length / n, n)]
    if by_drafts and not by_length:
        k = by_drafts[0] if len(by_drafts) == 1 else None
        return ("accepted drafts / drafted tokens = (accept len - 1) / k", k,
                "'accept rate' read with later builds' meaning (2026-07 on): every line has rate = (accept len - 1) / "
                f"{k or 'k'} within its rounding" + (" ('cap len' printed: k = cap len - 1)" if ks else "") +
                ", so it is accepted drafts per drafted token" +
                (f" with k = {k}" if k else f"; k is not pinned (k = {', '.join(map(str, by_drafts))} all fit)"))
    if by_length and not by_drafts:
        n = by_length[0]
        return (f"accept len / {n}: not a fraction of drafts accepted", None,
                f"'accept rate' read with older builds' meaning (2025, and as late as a 2026-03 build): every line has "
                f"rate = accept len / {n} within its rounding, so it divides tokens per step by a step width ({n} = "
                "speculative_num_draft_tokens, or speculative_num_steps + 1, or before sglang#11572 "
                "speculative_num_steps): it is not accepted / drafted, and k is not pinned")
    what = "both" if by_length and by_drafts else "neither"
    return ("ambiguous", None,
            f"'accept rate' is ambiguous here: the printed figures fit {what} of SGLang's definitions (accept len / "
            f"n of older builds, (accept len - 1) / k of later ones) across {counted(len(entries), 'line')}; it is "
            "kept as printed and not used")


def _all_fit(entries, predicted, whole: int) -> bool:
    tolerance = HALF + HALF / whole + 1e-6
    return all(abs(predicted(e) - e.acceptance_rate) <= tolerance for e in entries)


def _distinct(entries) -> list[MeanRun]:
    """One entry per printed (accept len, accept rate) pair: a long log repeats them, and each is tested 128 times."""
    seen = {}
    for e in entries:
        seen.setdefault((e.mean_length, e.acceptance_rate), e)
    return list(seen.values())


def _with(entry: MeanRun, meaning: str | None, k: int | None) -> MeanRun:
    if entry.mean_length is None:
        return entry
    return MeanRun(source=entry.source, mean_length=entry.mean_length, acceptance_rate=entry.acceptance_rate,
                   rate_meaning=meaning if entry.acceptance_rate is not None else None, k=k or entry.k,
                   load=entry.load, producer=entry.producer)


def _pasted_note(lines) -> str:
    if any("#running-req" in fields for _, _, fields in lines):
        return ""
    return ("'accept len' / 'accept rate' fields pasted without their 'Decode batch' line: no load (#running-req, "
            "#token, throughput) and no time; what follows the rate on a line is not read")


def ranks_note(lines) -> str:
    """Lines of several data-parallel ranks are concurrent: each rank's scheduler logs its own batch."""
    ranks = sorted({m.group(1) for _, line, _ in lines for m in [RANK.search(line)] if m}, key=lambda r: int(r[2:]))
    if len(ranks) < 2:
        return ""
    return (f"lines of {len(ranks)} data-parallel ranks ({', '.join(ranks)}): each rank's scheduler logs its own "
            "batch, so lines printed at one time are concurrent ranks, not successive intervals")


def _fields_note(lines) -> str:
    fields = set().union(*(f for _, _, f in lines))
    names = ("#running-req", "#token", "#full token", "accept len", "cap len", "accept rate", "#queue-req")
    seen = [name for name in names if name in fields]
    return "fields read by name: " + ", ".join(seen) if len(seen) > 1 else ""
