"""What a paste carries around an engine's own output, taken off before any reader sees it.

People paste engine output the way their terminal, container runner or issue tracker showed it: colour codes
(``ESC[32m``), Windows line ends, a prefix on every line (``docker compose logs``' ``vllm-1  | ``, ``kubectl logs
--prefix``'s ``[pod/vllm-0/vllm] ``, ``--timestamps``' RFC 3339 stamp, a Markdown quote's ``> ``), a JSON response
inside a Markdown code fence with prose around it. None of these change a figure; each is removed only where it is
unambiguous:

- colour and cursor escapes, and ``\\r\\n``: always (no engine prints a figure inside one);
- a prefix: only when every non-blank line carries one of the same kind (then it is the wrapper, not the output);
- a terminal's hard wrap: a statistics line cut into rows of one fixed width (at least two rows that wide) is joined
  back, from the row holding the line's marker on;
- a code fence: only the fenced lines are kept, and only when the text as pasted is not whole JSON but a fence holds
  JSON or JSON members (a log keeps its prose around: the line readers pass over it);
- an object's members pasted without its braces (``"key": value`` on each line, as a Markdown list or not, a value
  in Markdown bold ``**57.79**``): only when every non-blank line is one member and together they parse as one
  JSON object;
- a Python dict's repr (a response printed with ``print``, single-quoted): only when the text is not JSON and a line
  holds a ``'meta_info'`` or ``'spec_verify_ct'`` dict literal that ``ast.literal_eval`` reads (``pyrepr``).

``clean(text)`` returns the text and a sentence naming what was removed (``""`` when nothing was).
"""
from __future__ import annotations

import json
import re

from . import pyrepr

ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)")
# one wrapper per kind: (what it is, the prefix's pattern); each is tried on every line, outermost first
PREFIXES = (
    ("a Markdown quote ('> ')", re.compile(r">[ \t]?")),
    ("docker compose service prefixes ('name  | ')", re.compile(r"[A-Za-z0-9][\w.-]{0,63}[ \t]*\|[ \t]?")),
    ("kubectl --prefix pod prefixes ('[pod/...] ')", re.compile(r"\[pod/[^\]\s]{1,200}\][ \t]?")),
    ("RFC 3339 timestamps (docker/kubectl --timestamps)",
     re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d{1,9})?(?:Z|[+-]\d\d:?\d\d)?[ \t]")),
)
FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})")
# the statistics lines an engine prints on one line each, which a terminal's hard wrap splits into rows
LINE_MARKERS = ("SpecDecoding metrics:", "Speculative metrics:", "Avg prompt throughput:", "draft acceptance",
                "statistics ", "Decode batch", "accepted /")
MIN_WIDTH = 60  # a terminal narrower than this is not taken for one: fixed-width summaries print 51-column lines


def clean(text: str) -> tuple[str, str]:
    """The text with its wrapping removed, and what was removed in words."""
    removed = []
    stripped = ANSI.sub("", text)
    if stripped != text:
        removed.append("terminal colour codes")
    if "\r" in stripped:
        stripped = stripped.replace("\r\n", "\n")
        removed.append("Windows line ends")
    for _ in range(len(PREFIXES)):  # nested wrappers: a quoted docker log with timestamps
        stripped, what = _common_prefix(stripped)
        if not what:
            break
        removed.append(what)
    stripped, rows = _hard_wraps_joined(stripped)
    if rows:
        removed.append(f"the line breaks a {rows}-column terminal put inside long lines")
    fenced = _fenced_json(stripped)
    if fenced is not None:
        stripped = fenced
        removed.append("the Markdown code fence and the prose around the JSON")
    braced = _braced_members(stripped)
    if braced is not None:
        stripped = braced
        removed.append("the list marks and bold around JSON members pasted without their object's braces")
    stripped, what = _python_reprs(stripped)
    if what:
        removed.append(what)
    return stripped, ("read after removing " + ", ".join(removed)) if removed else ""


def _python_reprs(text: str) -> tuple[str, str]:
    """The text's Python dict reprs as JSON lines, and what was done in words (``""`` when nothing was)."""
    if text.lstrip()[:1] in ("{", "["):
        return text, ""
    found = pyrepr.as_json(text)
    if found is None:
        return text, ""
    body, failed = found
    return body, ("the Python print around a response (its dict repr read as JSON)"
                  + (f"; {failed} line(s) holding a dict that does not parse (cut off?) left out" if failed else ""))


def _common_prefix(text: str) -> tuple[str, str]:
    """The text without a wrapper prefix that every non-blank line carries (and ``""`` when none does)."""
    lines = text.split("\n")
    filled = [line for line in lines if line.strip()]
    if not filled:
        return text, ""
    for what, pattern in PREFIXES:
        if all(pattern.match(line) for line in filled):
            out = [line[pattern.match(line).end():] if line.strip() else line for line in lines]
            if any(line.strip() for line in out):
                return "\n".join(out), what
    return text, ""


def _hard_wraps_joined(text: str) -> tuple[str, int]:
    """The text with an engine line that a terminal hard-wrapped at a fixed width joined back, and that width (0:
    none). The width is one that at least two rows have exactly; only a row holding a statistics line's marker (or
    continuing one) at that width is joined to the row after it."""
    lines = text.split("\n")
    widths = [len(line) for line in lines if len(line) >= MIN_WIDTH]
    width = max(set(widths), key=widths.count) if widths else 0
    if not width or widths.count(width) < 2 or not any(len(a) == width and 0 < len(b) < width
                                                       for a, b in zip(lines, lines[1:])):
        return text, 0  # rows of one width and nothing shorter after them: a table or a fixed layout, not a wrap
    out, joining = [], False
    for line in lines:
        if joining and line and not FENCE.match(line) and not _starts_a_record(line, out[-1]):
            out[-1] += line
        else:
            out.append(line)
        joining = (len(out[-1]) % width == 0 and not out[-1].rstrip().endswith(("|", "│"))
                   and any(m in out[-1] for m in LINE_MARKERS)) if line else False
    joined = "\n".join(out)
    return (joined, width) if joined != text else (text, 0)


def _starts_a_record(row: str, before: str) -> bool:
    """Whether a row begins as the row before it does (the same logger's next record, not a continuation)."""
    head = re.match(r"[(\[]?[A-Za-z_]+[ =:\]]|\d+\.\d\d\.\d{3}\.\d{3} |\[\d{4}-|INFO|WARNING|ERROR|DEBUG", before)
    return bool(head) and row.startswith(head.group(0))


def _fenced_json(text: str) -> str | None:
    """The lines inside the text's code fences, when the text is not JSON but a fence holds some."""
    if text.lstrip()[:1] in ("{", "[") or "```" not in text and "~~~" not in text:
        return None
    inside, keep, fence = False, [], ""
    for line in text.split("\n"):
        opened = FENCE.match(line)
        if opened and (not inside or opened.group(1)[0] == fence):
            inside, fence = not inside, opened.group(1)[0]
            continue
        if inside:
            keep.append(line)
    body = "\n".join(keep)
    return body if body.lstrip()[:1] in ("{", "[") or _braced_members(body) is not None else None


# one JSON member on a line: an optional Markdown list mark, "key": value (its value optionally in bold), a comma
MEMBER = re.compile(r'[ \t]*(?:[-*+][ \t]+)?("[^"\n]{1,200}")[ \t]*:[ \t]*(\*\*|__)?(.+?)\2?[ \t]*,?[ \t]*$')


def _braced_members(text: str) -> str | None:
    """One JSON object made of lines that are each one member without the object's braces, or None."""
    filled = [line for line in text.split("\n") if line.strip()]
    if not filled or text.lstrip()[:1] in ("{", "["):
        return None
    members = [MEMBER.fullmatch(line) for line in filled]
    if not all(members):
        return None
    body = "{" + ", ".join(f"{m.group(1)}: {m.group(3)}" for m in members) + "}"
    try:
        obj = json.loads(body)
    except ValueError:
        return None
    return json.dumps(obj, indent=1) if isinstance(obj, dict) and len(obj) == len(members) else None
