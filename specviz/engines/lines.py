"""Helpers for the line-oriented formats (engine logs, printed summaries): find the lines that matter among the
rest of a log, read ``Name: value`` fields by name, and say which line failed.

Every line is held to MAX_LINE characters before any pattern reads it: a longer line that holds a format's marker
is refused (no engine prints its figures on one), any other is passed over as the rest of the log is. Every reader
here costs time linear in its line: split on known separators, patterns anchored after a literal.
"""
from __future__ import annotations

import math

from .run import MAX_COUNT

MAX_LINE = 4096  # characters: vLLM's line with 64 per-position rates is under 1,000


def short_lines(text: str, markers=()) -> list[str]:
    """The text's lines, a line longer than MAX_LINE as "" (what pattern reads it sees nothing), or refused when it
    holds one of ``markers``. Indices stay line numbers - 1."""
    out = text.splitlines()
    for i, line in enumerate(out):
        if len(line) > MAX_LINE:
            if any(marker in line for marker in markers):
                raise too_long(i + 1, line)
            out[i] = ""
    return out


def too_long(n: int, line: str) -> ValueError:
    return failed_at(n, line, ValueError(f"the line is {len(line):,} characters long; an engine prints its "
                                         f"speculative-decoding figures on lines under {MAX_LINE:,}"))


def marked_lines(text: str, markers) -> list[tuple[int, str, str]]:
    """(line number, the line, the text after the first marker) for every line holding one of ``markers``."""
    out = []
    for n, line in enumerate(short_lines(text, markers), 1):
        for marker in markers:
            at = line.find(marker)
            if at >= 0:
                out.append((n, line.strip(), line[at + len(marker):].strip()))
                break
    return out


def shown(value, most: int = 80) -> str:
    """A value as a message shows it: its repr, cut at ``most`` characters."""
    text = repr(value)
    return text if len(text) <= most else text[: most - 3] + "..."


def failed_at(n: int, line: str, error: Exception) -> ValueError:
    """A ValueError naming the line that failed, with the reason."""
    shown = line if len(line) <= 160 else line[:157] + "..."
    return ValueError(f"line {n}: {error} (the line: {shown!r})")


def named_fields(body: str) -> dict[str, str]:
    """``Name: value, Name: value, ...`` by name; a value holding ', ' (a list of rates) stays whole."""
    parts: dict[str, list[str]] = {}  # a field's pieces, joined once (adding to a string each time is quadratic)
    last = None
    for part in body.rstrip(" .").split(", "):
        name, sep, value = part.partition(": ")
        if sep:
            last = name.strip()
            parts[last] = [value.strip()]
        elif last is not None:
            parts[last].append(part.strip())
    return {name: ", ".join(pieces) for name, pieces in parts.items()}


def first_number(value: str, what: str) -> float:
    """The number a field starts with ("123 tokens", "64.5%", "2.31")."""
    token = value.strip().split()[0].rstrip("%,") if value.strip() else ""
    try:
        number = float(token)
    except ValueError:
        raise ValueError(f"{what} should be a number, got {shown(value)}") from None
    if math.isinf(number):
        raise ValueError(f"{what} is infinite")
    return number


def count(value: str, what: str) -> int:
    number = first_number(value, what)
    if math.isnan(number) or number != int(number):
        raise ValueError(f"{what} should be a whole number of tokens, got {shown(value)}")
    if abs(number) > MAX_COUNT:
        raise ValueError(f"{what} = {number:.3g} is absurd (more than {MAX_COUNT:.0e} tokens): check the units")
    return int(number)


def numbers(value: str, what: str) -> tuple[float, ...]:
    """A list of numbers: "0.805, 0.632" or "[0.805, 0.632]" or "(0.805, 0.632)"."""
    inner = value.strip().strip("[]()")
    return tuple(first_number(v, what) for v in inner.split(",") if v.strip())


def counted(n: int, noun: str) -> str:
    """'1 request', '3 requests'."""
    return f"{n} {noun}" + ("" if n == 1 else "s")
