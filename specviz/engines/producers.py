"""Which producer printed a log line: the engine, data-parallel rank or server process whose interval it is.

Engine logs interleave the lines of concurrent producers: vLLM (and vLLM-Ascend) with data parallelism prints one
throughput line ('Engine 00N: ...') and one SpecDecoding line per engine per logging tick, several API server
processes each print their own pair ('(APIServer pid=N) ...'), and SGLang's schedulers of several data-parallel
ranks each print their own 'Decode batch' line ('[DP3 TP3 EP3 ...]', '[2025-10-22 10:27:56 DP0 TP0]'). Lines of two
producers printed one after the other are concurrent, not successive intervals of one series. A producer is named
from the line's own prefix (the text before the format's marker): the process tag '(Name pid=N)' the line starts
with, a 'DPn' rank tag in brackets, an 'Engine N' / 'engine N' index; None when the prefix names none of them.
"""
from __future__ import annotations

import re

PROCESS = re.compile(r"[>\s*`]{0,8}\((\w{1,40}) pid=(\d{1,10})\)")  # '(APIServer pid=1)', '(EngineCore_DP0 pid=7)'
RANK = re.compile(r"\[(?:[^\]]{0,80}\s)?DP(\d{1,4})[\s\]]")  # '[DP1]', '[DP3 TP3 EP3 ...]', '[... DP0 TP0]'
ENGINE = re.compile(r"\b[Ee]ngine[ _]?(\d{1,4})\b")  # 'Engine 000:', 'engine 1'
MOMENT = re.compile(r"\b(\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}|\d{2}-\d{2} \d{2}:\d{2}:\d{2})\b")


def process_of(line: str) -> str | None:
    """The process tag the line starts with ('APIServer pid=1'), or None."""
    found = PROCESS.match(line)
    return f"{found.group(1)} pid={found.group(2)}" if found else None


def engine_of(prefix: str) -> str | None:
    """'engine N' where the prefix names an engine index ('Engine 001: ...' gives 'engine 1'), else None."""
    found = ENGINE.search(prefix)
    return f"engine {int(found.group(1))}" if found else None


def producer_of(prefix: str, engine: str | None = None) -> str | None:
    """The producer a line's prefix names (process, DP rank, engine, those found, joined), or None; ``engine``: the
    engine named by another line of the same interval (vLLM's throughput line), where the prefix names none."""
    rank = RANK.search(prefix)
    parts = [process_of(prefix), f"DP{int(rank.group(1))}" if rank else None, engine_of(prefix) or engine]
    named = [p for p in parts if p]
    return " ".join(named) if named else None


def moment_of(prefix: str) -> str | None:
    """The timestamp a prefix prints, to the second ('05-04 01:06:43', '2025-10-20 03:02:22'), or None."""
    found = MOMENT.search(prefix)
    return found.group(1).replace("T", " ") if found else None


def by_producer(series) -> dict:
    """{producer: its intervals, in order} over a series (entries with a ``producer``; None is one producer)."""
    out: dict = {}
    for part in series:
        out.setdefault(part.producer, []).append(part)
    return out


def producers_note(names) -> str:
    """How many producers the lines came from, and that they are concurrent ("" when no line names one)."""
    seen = list(dict.fromkeys(n for n in names if n is not None))
    if not seen:
        return ""
    unnamed = sum(n is None for n in names)
    shown = ", ".join(seen[:8]) + (f" and {len(seen) - 8} more" if len(seen) > 8 else "")
    if len(seen) == 1 and not unnamed:
        return f"1 producer ({shown}): every line is its own interval of one series"
    rest = f"; {unnamed} line(s) name none and are kept as one more" if unnamed else ""
    return (f"lines of {len(seen) + bool(unnamed)} producers ({shown}{rest}): producers log concurrently, so each "
            "producer's lines form its own series of intervals (time-series checks read each apart); totals sum "
            "them all")
