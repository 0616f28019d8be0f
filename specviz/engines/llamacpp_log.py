"""llama.cpp's printed speculative-decoding figures: the server's log and the speculative examples' summaries.

Server, tools/server/server-context.cpp, server_slot::print_timing() (once per finished task, after its "eval
time = ... ms / N tokens" line):
  "draft acceptance = %0.5f (%5d accepted / %5d generated), mean len = %5.2f"   mean = 1 + accepted / steps
  "     acc per pos = (%s)"   (trace level: accepted_at_i / steps, "%.3f" each, n_max of them)
older builds (tools/server/server.cpp, server_slot::print_timings): "draft acceptance rate = %0.5f (%5d accepted /
%5d generated)", no mean, so no steps. Lines carry "slot print_timing: id  S | task T |"; each task is a request.
Examples, examples/speculative-simple/speculative-simple.cpp and examples/speculative/speculative.cpp, at the end:
  "n_draft   = %d" (the configured draft length), "n_predict = %d", "n_drafted = %d", "n_accept  = %d",
  "accept    = %.3f%%"; every step adds its accepted drafts to n_accept and those plus one token to n_predict
  (speculative-simple: n_accept += ids.size() - 1; n_predict += ids.size()), so steps = n_predict - n_accept.
"""
from __future__ import annotations

import math
import re

from .lines import count, counted, failed_at, marked_lines, numbers, short_lines
from .rounding import checked_rates, half_unit, recover_steps
from .run import MAX_K, EngineRun, total

SERVER, SUMMARY, ROUNDS = "llama.cpp server log", "llama-speculative summary", "llama.cpp per-round log"
K_AMBIGUOUS = ("k read from n_draft, the configured draft length; a build with an adaptive draft length (the "
               "heuristic of llama.cpp PR #3006, 2023) printed there the length its run ended at, which the summary "
               "cannot tell apart: if yours adapted it, k is unknown")
ROUND_MARKER = "| accepted "  # "slot update_slots: id  3 | task 0 | accepted 3/4 draft tokens, new n_tokens = 702"
SERVER_MARKERS = ("draft acceptance = ", "draft acceptance rate = ")
ACCEPTANCE = re.compile(r"draft acceptance(?: rate)? = ([\d.]+) \(\s*(\d+) accepted /\s*(\d+) generated\)"
                        r"(?:, mean (?:len|acceptance length) =\s*([\d.]+))?")
PER_POSITION = ("acc per pos = (", "acceptance rate per position = (")  # own line (trace level), or the same line
TASK = re.compile(r"\| task (-?\d+) \|")
EVAL = re.compile(r"\beval time = ")
TOKENS = re.compile(r"\s*(\d+) tokens")  # after the eval line's last '/': "/   128 tokens"
SUMMARY_KEYS = ("n_draft", "n_predict", "n_drafted", "n_accept", "accept")
SUMMARY_VALUE = re.compile(r"\s+([-\d.]+)%?\s*")  # after the '=' of "n_accept  = 47" or "accept    = 35.606%"


def is_server_log(text: str) -> bool:
    return bool(marked_lines(text, SERVER_MARKERS))


def is_round_log(text: str) -> bool:
    """llama-server -v's per-round lines, without the per-task acceptance line (which would be read instead)."""
    return bool(marked_lines(text, (ROUND_MARKER,))) and not is_server_log(text)


def parse_round_log(text: str, check=None) -> EngineRun:
    """One verify step a line: 'accepted N/M draft tokens' (N accepted of M drafted; before llama.cpp #18211 M is
    always printed 0, the drafted count cleared before the line: then drafted is unknown)."""
    rounds = []
    for n, line, body in marked_lines(text, (ROUND_MARKER,)):
        if check is not None:
            check()
        accepted, slash, drafted = body.split(" ", 1)[0].partition("/")
        try:
            a, d = count(accepted, "accepted"), count(drafted, "drafted") if slash else None
            if a > MAX_K or (d is not None and d > MAX_K) or (d and a > d):
                raise ValueError(f"accepted {a} of {d} drafts: a round drafts at most {MAX_K} and accepts at most "
                                 "what it drafted")
        except ValueError as error:
            raise failed_at(n, line, error) from error
        rounds.append((a, d))
    buggy = any(d == 0 and a > 0 for a, d in rounds)
    histogram = [0] * (max(a for a, _ in rounds) + 1)
    for a, _ in rounds:
        histogram[a] += 1
    notes = [f"{counted(len(rounds), 'verify round')}, one a line ('accepted N/M draft tokens')"]
    if buggy:
        notes.append("the lines print 'accepted N/0': a build before llama.cpp #18211, which cleared the drafted "
                     "count before logging it; drafted is unknown")
    return EngineRun(source=ROUNDS, accepted=sum(a for a, _ in rounds), steps=len(rounds), histogram=histogram,
                     drafted=None if buggy else sum(d or 0 for _, d in rounds), notes=tuple(notes))


def is_summary(text: str) -> bool:
    keys = {found[0] for line in short_lines(text) if (found := summary_field(line))}
    return {"n_drafted", "n_accept"} <= keys


def summary_field(line: str) -> tuple[str, str] | None:
    """(key, value) of a summary line ("n_accept  = 47"): the key the last word before the line's last '=', the
    value a number after it, nothing else."""
    left, sep, right = line.strip().rpartition("=")
    key = left.split()[-1] if sep and left[-1:].isspace() and left.split() else ""
    value = SUMMARY_VALUE.fullmatch(right) if key in SUMMARY_KEYS else None
    return (key, value.group(1)) if value else None


def eval_tokens(line: str) -> int | None:
    """The tokens of an "eval time = ... ms /   N tokens (...)" line: what follows the last '/' that a count of
    tokens follows, each '/' tried once."""
    found = EVAL.search(line)
    end = len(line)
    while found and (slash := line.rfind("/", found.end(), end)) >= 0:
        if tokens := TOKENS.match(line, slash + 1):
            return int(tokens.group(1))
        end = slash
    return None


def parse_server_log(text: str, check=None) -> EngineRun:
    lines = short_lines(text, SERVER_MARKERS)
    tasks = [m.group(1) if (m := TASK.search(line)) else None for line in lines]
    runs = []
    for i, line in enumerate(lines):
        found = ACCEPTANCE.search(line)
        if not found:
            continue
        if check is not None:
            check()
        near = [j for j in range(max(0, i - 12), min(len(lines), i + 3)) if tasks[j] == tasks[i]]
        try:
            runs.append(_task_run(found, [(j - i, lines[j]) for j in near]))
        except ValueError as error:
            raise failed_at(i + 1, line.strip(), error) from error
    return total(runs, SERVER).with_notes(counted(len(runs), "finished task") + " summed", *statistics_notes(lines))


def statistics_notes(lines) -> list[str]:
    """The last 'statistics NAME: ..., #gen drafts = N, ...' line of each drafter, as notes: those counters run over
    the server's whole life and per drafter, so they are never added to the per-task counts."""
    last: dict[str, dict[str, str]] = {}
    for line in lines:
        at = line.find("statistics ")
        if at < 0 or "#gen drafts = " not in line:
            continue
        name, _, body = line[at + len("statistics "):].partition(":")
        fields = {}
        for part in body.split(", "):
            key, sep, value = part.partition(" = ")
            if sep:
                fields[key.strip()] = value.split()[0] if value.split() else ""
        last[name.strip()] = fields
    return [f"statistics {name} (cumulative over the server's life, not added to the tasks): #gen drafts = "
            f"{f.get('#gen drafts')} verify steps that drafted, #gen tokens = {f.get('#gen tokens')} drafted, "
            f"#acc tokens = {f.get('#acc tokens')} accepted" for name, f in last.items()
            if f.get("#gen drafts") not in (None, "0")]


def _task_run(found, near: list[tuple[int, str]]) -> EngineRun:
    """One task's figures: its acceptance line, the eval line before it, the per-position line after it (``near``:
    (offset from the acceptance line, line) of the task's lines around it)."""
    rate, accepted, drafted = float(found.group(1)), count(found.group(2), "accepted"), count(found.group(3),
                                                                                               "generated")
    if drafted and abs(rate - accepted / drafted) > half_unit(5):
        raise ValueError(f"the printed rate {rate} is not accepted / generated = {accepted} / {drafted}")
    emitted = next((n for d, other in reversed(near) if d < 0 and (n := eval_tokens(other)) is not None), None)
    rates = _position_rates([(0, found.string)] + near)
    steps = per_pos = None
    notes = []
    if found.group(4) is not None:
        got = recover_steps(accepted, float(found.group(4)), 2, rates, drafted)
        steps, per_pos, notes = got.steps, got.accepted_per_pos, [got.note, "mean = 1 + accepted / verify steps "
                                                                   "(llama.cpp #24536); 'generated' = drafted tokens"]
    else:
        notes.append("an older build's line: no mean length, so no steps")
    return EngineRun(source=SERVER, drafted=drafted, accepted=accepted, steps=steps, emitted=emitted, requests=1,
                     k=len(rates) or None, accepted_per_pos=per_pos, notes=tuple(notes))


def _position_rates(near) -> tuple[float, ...]:
    """The task's per-position rates: on its acceptance line (2026 builds) or on a line after it."""
    for d, other in near:
        for label in PER_POSITION:
            if d >= 0 and label in other:
                inner = other.split(label, 1)[1].split(")", 1)[0]
                return checked_rates(numbers(inner, label.rstrip(" =(")))
    return ()


def parse_summary(text: str, check=None) -> EngineRun:
    records, current, start = [], {}, 1
    for n, line in enumerate(short_lines(text), 1):
        found = summary_field(line)
        if not found:
            continue
        key, value = found
        if key == "n_draft" and current:  # the next run's summary begins
            records.append((start, current))
            current = {}
        if not current:
            start = n
        current[key] = value
    records.append((start, current))
    runs = []
    for n, fields in records:
        if check is not None:
            check()
        try:
            runs.append(_summary_run(fields))
        except ValueError as error:
            raise failed_at(n, " ".join(f"{k} = {v}" for k, v in fields.items()), error) from error
    return total(runs, SUMMARY).with_notes(f"{len(runs)} runs summed" if len(runs) > 1 else "")


def _summary_run(fields: dict[str, str]) -> EngineRun:
    missing = [key for key in ("n_predict", "n_drafted", "n_accept") if key not in fields]
    if missing:
        raise ValueError(f"the summary lacks {', '.join(missing)}")
    try:
        values = {key: float(value) for key, value in fields.items()}
    except ValueError:
        raise ValueError(f"the summary's values must be numbers, got {fields}") from None
    if any(not math.isfinite(v) or v != int(v) for key, v in values.items() if key != "accept"):
        raise ValueError("the summary's counts must be whole numbers")
    emitted, drafted, accepted = (count(fields[key], key) for key in ("n_predict", "n_drafted", "n_accept"))
    if drafted and "accept" in values and abs(values["accept"] / 100 - accepted / drafted) > half_unit(5):
        raise ValueError(f"the printed accept {fields['accept']}% is not n_accept / n_drafted")
    if accepted > emitted:
        raise ValueError(f"n_accept ({accepted}) exceeds n_predict ({emitted}): each accepted draft is a predicted "
                         "token")
    k = int(values["n_draft"]) if values.get("n_draft", 0) > 0 else None
    notes = ("steps = n_predict - n_accept (each step emits its accepted drafts and one more token)",)
    if k is not None:
        notes += (K_AMBIGUOUS,)
    return EngineRun(source=SUMMARY, drafted=drafted, accepted=accepted, steps=emitted - accepted, k=k,
                     emitted=emitted, requests=1, notes=notes)
