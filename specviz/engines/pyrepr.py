"""A response printed by Python instead of serialised: ``print("result", ret)`` shows a dict's repr (single quotes,
``None``, ``True``), which no JSON reader takes. SGLang's own examples and tests print /generate results this way:
``result {'text': ..., 'meta_info': {'spec_verify_ct': 4, ...}}``.

``as_json(text)`` finds each line that holds a dict literal with one of MARKERS, reads the literal from its first
``{`` to its last ``}`` with ``ast.literal_eval`` (literals only: nothing is run), and returns the dicts as JSON
lines, with how many lines it could not read (a line cut off before its closing brace). A text with none returns
None. A line over MAX_LINE characters is not read.
"""
from __future__ import annotations

import ast
import json

MARKERS = ("'meta_info': {", "'spec_verify_ct':")
MAX_LINE = 256 * 1024  # a response's repr holds its whole text; longer lines are passed over


def as_json(text: str) -> tuple[str, int] | None:
    """(the dicts as JSON lines, the lines holding a marker that did not parse), or None when no line parsed."""
    out, failed = [], 0
    for line in text.split("\n"):
        if len(line) > MAX_LINE or not any(marker in line for marker in MARKERS):
            continue
        obj = _literal(line)
        if obj is None:
            failed += 1
        else:
            out.append(obj)
    return ("\n".join(out), failed) if out else None


def _literal(line: str) -> str | None:
    start, end = line.find("{"), line.rfind("}")
    if start < 0 or end < start:
        return None
    try:
        obj = ast.literal_eval(line[start:end + 1])
        return json.dumps(obj) if isinstance(obj, dict) else None
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None
