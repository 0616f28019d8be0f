"""Helpers for the line-oriented formats (engine logs, printed summaries): find the lines that matter among the
rest of a log, read ``Name: value`` fields by name, and say which line failed."""
from __future__ import annotations

import math


def marked_lines(text: str, markers) -> list[tuple[int, str, str]]:
    """(line number, the line, the text after the first marker) for every line holding one of ``markers``."""
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        for marker in markers:
            at = line.find(marker)
            if at >= 0:
                out.append((n, line.strip(), line[at + len(marker):].strip()))
                break
    return out


def failed_at(n: int, line: str, error: Exception) -> ValueError:
    """A ValueError naming the line that failed, with the reason."""
    shown = line if len(line) <= 160 else line[:157] + "..."
    return ValueError(f"line {n}: {error} (the line: {shown!r})")


def named_fields(body: str) -> dict[str, str]:
    """``Name: value, Name: value, ...`` by name; a value holding ', ' (a list of rates) stays whole."""
    out: dict[str, str] = {}
    last = None
    for part in body.rstrip(" .").split(", "):
        name, sep, value = part.partition(": ")
        if sep:
            last = name.strip()
            out[last] = value.strip()
        elif last is not None:
            out[last] += ", " + part.strip()
    return out


def first_number(value: str, what: str) -> float:
    """The number a field starts with ("123 tokens", "64.5%", "2.31")."""
    token = value.strip().split()[0].rstrip("%,") if value.strip() else ""
    try:
        number = float(token)
    except ValueError:
        raise ValueError(f"{what} should be a number, got {value!r}") from None
    if math.isinf(number):
        raise ValueError(f"{what} is infinite")
    return number


def count(value: str, what: str) -> int:
    number = first_number(value, what)
    if math.isnan(number) or number != int(number):
        raise ValueError(f"{what} should be a whole number of tokens, got {value!r}")
    return int(number)


def numbers(value: str, what: str) -> tuple[float, ...]:
    """A list of numbers: "0.805, 0.632" or "[0.805, 0.632]" or "(0.805, 0.632)"."""
    inner = value.strip().strip("[]()")
    return tuple(first_number(v, what) for v in inner.split(",") if v.strip())


def counted(n: int, noun: str) -> str:
    """'1 request', '3 requests'."""
    return f"{n} {noun}" + ("" if n == 1 else "s")
