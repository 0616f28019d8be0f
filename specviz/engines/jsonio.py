"""JSON as engines hand it out: one response, a JSON list, JSONL (one response a line) or a server-sent-events
stream (``data: {...}`` lines, ``data: [DONE]`` at the end). Errors name the line that failed."""
from __future__ import annotations

import json
import math

from .lines import counted, failed_at, shown
from .run import MAX_K, EngineRun, total


def looks_like_json(text: str) -> bool:
    head = text.lstrip()[:5]
    return head[:1] in ("{", "[") or head == "data:"


def json_records(text: str) -> list[tuple[int, dict]]:
    """(line number, object) for every JSON object in the text, in order."""
    if text.lstrip().startswith("data:"):
        return _sse_records(text)
    try:
        whole = json.loads(text)
    except json.JSONDecodeError as error:
        lines = [(n, line) for n, line in enumerate(text.splitlines(), 1) if line.strip()]
        if len(lines) > 1 and _parses(lines[0][1]):
            return _jsonl_records(lines)
        raise ValueError(f"line {error.lineno}: not valid JSON ({error.msg} at column {error.colno}); a truncated "
                         "file or a response cut short?") from error
    except RecursionError as error:
        raise ValueError("the JSON nests too deeply to be an engine response") from error
    items = whole if isinstance(whole, list) else [whole]
    return [(1, item) for item in items if isinstance(item, dict)]


def _parses(line: str) -> bool:
    try:
        json.loads(line)
        return True
    except (json.JSONDecodeError, RecursionError):
        return False


def _jsonl_records(lines) -> list[tuple[int, dict]]:
    out = []
    for n, line in lines:
        try:
            item = json.loads(line)
        except json.JSONDecodeError as error:
            raise ValueError(f"line {n}: not valid JSON ({error.msg}); each line of a JSONL file must be one whole "
                             f"response: {line[:80]!r}") from error
        except RecursionError:
            raise ValueError(f"line {n}: the JSON nests too deeply to be an engine response") from None
        if isinstance(item, dict):
            out.append((n, item))
    return out


def _sse_records(text: str) -> list[tuple[int, dict]]:
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line.startswith("data:"):
            if line and not line.startswith((":", "event:", "id:", "retry:")):
                raise ValueError(f"line {n}: a server-sent-events stream holds 'data:' lines, got {line[:80]!r}")
            continue
        payload = line[len("data:"):].strip()
        if payload == "[DONE]":
            continue
        try:
            item = json.loads(payload)
        except json.JSONDecodeError as error:
            raise ValueError(f"line {n}: the event's JSON is cut short or broken ({error.msg}): "
                             f"{payload[:80]!r}") from error
        except RecursionError:
            raise ValueError(f"line {n}: the event's JSON nests too deeply to be an engine response") from None
        if isinstance(item, dict):
            out.append((n, item))
    return out


def number(obj: dict, *keys, where: str = "") -> float | None:
    """The first of ``keys`` present in obj as a number (None if none is); a non-number is an error."""
    for key in keys:
        if key in obj and obj[key] is not None:
            value = obj[key]
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"{where}{key} should be a number, got {shown(value)}")
            if not math.isfinite(value):
                raise ValueError(f"{where}{key} should be a finite number, got {shown(value)}")
            return value
    return None


def whole(obj: dict, *keys, where: str = "") -> int | None:
    """The first of ``keys`` present as a whole number (a count); 2.0 is read as 2, 2.5 is an error."""
    value = number(obj, *keys, where=where)
    if value is None:
        return None
    if value != int(value):
        raise ValueError(f"{where}{keys[0]} should be a whole number of tokens, got {value!r}")
    return int(value)


def dense_histogram(value, where: str = "") -> tuple[int, ...] | None:
    """An acceptance histogram, dense (list: [j] = steps accepting j drafts) or sparse ({"j": steps}); j is at most
    MAX_K (checked before the dense list is built)."""
    if value is None:
        return None
    if isinstance(value, dict):
        try:
            pairs = {int(j): n for j, n in value.items()}
        except (TypeError, ValueError) as error:
            raise ValueError(f"{where}acceptance histogram keys must be draft counts, got {list(value)[:8]}") \
                from error
        if any(not 0 <= j <= MAX_K for j in pairs):
            raise ValueError(f"{where}acceptance histogram keys must be draft counts from 0 to {MAX_K}, got "
                             f"{min(pairs)} to {max(pairs)}")
        value = [pairs.get(j, 0) for j in range(max(pairs, default=-1) + 1)]
    if isinstance(value, list) and len(value) > MAX_K + 1:
        raise ValueError(f"{where}acceptance histogram has {len(value):,} entries: a step accepts at most {MAX_K} "
                         f"drafts, so at most {MAX_K + 1}")
    if not isinstance(value, list) or any(isinstance(n, bool) or not isinstance(n, (int, float))
                                          or not math.isfinite(n) or n != int(n) for n in value):
        raise ValueError(f"{where}acceptance histogram must hold whole step counts, got {shown(value)}")
    return tuple(int(n) for n in value)


def survival(histogram: tuple[int, ...]) -> tuple[int, ...]:
    """Per-position accepted counts from an acceptance histogram: position i is accepted by every step that
    accepted more than i drafts (TensorRT-LLM builds its histogram the other way round, from these)."""
    out, beyond = [], sum(histogram)
    for steps in histogram[:-1]:
        beyond -= steps  # steps accepting more than i drafts
        out.append(beyond)
    return tuple(out)


def grouped(records, key) -> list[list[tuple[int, dict]]]:
    """Records grouped by ``key(obj)`` (a response id: a stream's chunks share one), in first-seen order; a record
    whose key is None stands alone."""
    groups: dict[object, list] = {}
    for n, obj in records:
        name = key(obj)
        alone = name is None or not isinstance(name, (str, int, float))  # a list or object for an id stands alone
        groups.setdefault(("line", n) if alone else name, []).append((n, obj))
    return list(groups.values())


def choices(obj: dict) -> list[dict]:
    """The response's choices that are objects (an OpenAI-compatible response or stream chunk)."""
    value = obj.get("choices")
    return [c for c in value if isinstance(c, dict)] if isinstance(value, list) else []


def completion_tokens(group) -> int | None:
    """Output tokens from a response's usage (a stream's last usage chunk counts them all)."""
    counts = [whole(obj["usage"], "completion_tokens", where="usage.") for _, obj in group
              if isinstance(obj.get("usage"), dict)]
    counts = [c for c in counts if c is not None]
    return max(counts) if counts else None


def per_request(records, stats_of, request_run, source: str) -> EngineRun:
    """Per-request statistics summed: the records grouped by response id (a stream's chunks share one), each
    statistics object a run (``request_run(stats, emitted)``; emitted tokens only where one object per response),
    a failure naming the record's line."""
    runs = []
    for group in grouped(records, lambda obj: obj.get("id")):
        carrying = [(n, s) for n, obj in group for s in stats_of(obj)]
        emitted = completion_tokens(group) if len(carrying) == 1 else None
        for n, stats in carrying:
            try:
                runs.append(request_run(stats, emitted))
            except ValueError as error:
                raise failed_at(n, str(stats), error) from error
    return total(runs, source).with_notes(counted(len(runs), "request") + " summed")
