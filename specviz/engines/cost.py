"""CostModel: what a speculative step costs, in target forwards of one row (``specviz.theory``'s units).

c = one draft step over one target forward; v(n) = one target pass over n rows (the pending token and n - 1
drafts) over a one-row forward, so v(1) = 1 and a step of k drafts costs k c + v(k + 1). Leviathan's theorem
takes v = 1 for every n; on real hardware v grows with n (slowly on a GPU until its compute is busy, nearly
linearly on a CPU). Built from numbers typed in, from llama-bench output (``specviz.engines.llamabench``), or by
a lab that times a loaded model (it passes the points it measured).

What a step's drafting costs depends on the drafter's kind (``DRAFTERS``): a sequential draft model (EAGLE, a
small model) runs k draft steps, k c; a block drafter (DFlash, parallel heads such as Medusa's) drafts the whole
block in one pass, c whatever k (c is then that pass over a target forward); an n-gram or prompt lookup costs
about nothing next to a forward, 0.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from .lines import shown

MAX_POINTS, MAX_ROWS = 128, 2**20  # v's points (llama-bench's pp sizes, the hardware lab's 32 rows); rows a pass
DRAFTERS = {  # kind: how it drafts k tokens, as the texts say it
    "sequential": "a sequential draft model, k draft steps a step",
    "block": "a block drafter, the whole block in one draft pass a step whatever k",
    "ngram": "an n-gram or prompt lookup, its drafting priced at 0",
}
ALIASES = {"model": "sequential", "eagle": "sequential", "parallel": "block", "dflash": "block", "medusa": "block",
           "lookup": "ngram", "prompt_lookup": "ngram", "n-gram": "ngram"}


def drafter_kind(drafter: str | None) -> str:
    """The drafter's kind, one of DRAFTERS (None: a sequential draft model, the common case)."""
    if drafter is None:
        return "sequential"
    kind = ALIASES.get(str(drafter).strip().lower(), str(drafter).strip().lower())
    if kind not in DRAFTERS:
        raise ValueError(f"unknown drafter kind {drafter!r}: give one of {', '.join(DRAFTERS)} (a sequential draft "
                         "model; a block drafter such as DFlash or parallel heads; an n-gram or prompt lookup)")
    return kind


@dataclass(frozen=True)
class CostModel:
    c: float  # draft step / target forward
    verify: tuple[tuple[int, float], ...] = ((1, 1.0),)  # (rows, v(rows)) points; one point: v flat at its value
    source: str = "given"
    notes: tuple[str, ...] = ()

    def __post_init__(self):
        if isinstance(self.verify, (int, float)) and not isinstance(self.verify, bool):
            object.__setattr__(self, "verify", ((1, float(self.verify)),))
        if isinstance(self.verify, dict):
            object.__setattr__(self, "verify", tuple(sorted(self.verify.items())))
        if len(self.verify) > MAX_POINTS:
            raise ValueError(f"{len(self.verify):,} verify-cost points: at most {MAX_POINTS} (v is a smooth curve)")
        object.__setattr__(self, "verify", tuple((int(n), float(v)) for n, v in self.verify))
        object.__setattr__(self, "notes", tuple(self.notes))
        if not isinstance(self.c, (int, float)) or isinstance(self.c, bool) or not math.isfinite(self.c) \
                or self.c < 0:
            raise ValueError(f"c (a draft step over a target forward) must be a finite number >= 0, got {self.c!r}")
        rows = [n for n, _ in self.verify]
        if not rows or rows != sorted(set(rows)) or rows[0] < 1 or rows[-1] > MAX_ROWS:
            raise ValueError(f"verify costs need distinct row counts from 1 to {MAX_ROWS:,} in order, got "
                             f"{shown(rows, 200)}")
        if any(not math.isfinite(v) or v <= 0 for _, v in self.verify):
            raise ValueError(f"verify costs must be positive, got {self.verify}")

    def v(self, rows: int) -> float:
        """A pass of ``rows`` rows over a one-row forward: the points joined by straight lines, the last segment
        extended beyond them (a single point: that value for every pass)."""
        points = self.verify
        if len(points) == 1:
            return points[0][1]
        if rows <= points[0][0]:
            return points[0][1]
        for (n0, v0), (n1, v1) in zip(points, points[1:]):
            if rows <= n1:
                return v0 + (v1 - v0) * (rows - n0) / (n1 - n0)
        (n0, v0), (n1, v1) = points[-2], points[-1]
        return max(v1 + (v1 - v0) * (rows - n1) / (n1 - n0), v1)

    def draft_cost(self, k: int, drafter: str | None = None) -> float:
        """Drafting k tokens: k c (sequential), c (a block in one pass), 0 (a lookup)."""
        kind = drafter_kind(drafter)
        if k == 0 or kind == "ngram":
            return 0.0
        return self.c if kind == "block" else k * self.c

    def step_cost(self, k: int, drafter: str | None = None) -> float:
        """A step of k drafts: the drafting and one verify pass of k + 1 rows (k = 0: one plain forward)."""
        return 1.0 if k == 0 else self.draft_cost(k, drafter) + self.v(k + 1)

    def speedup(self, tokens_per_step: float, k: int, drafter: str | None = None) -> float:
        """Tokens per unit of time over plain decoding's one token per forward."""
        return tokens_per_step / self.step_cost(k, drafter)

    def describe(self, drafter: str | None = None) -> str:
        shown = ", ".join(f"v({n}) = {v:.3g}" for n, v in self.verify)
        kind = f"; {DRAFTERS[drafter_kind(drafter)]}" if drafter is not None else ""
        return f"c = {self.c:.3g}, {shown} ({self.source}{kind})"


def parse_verify(text: str) -> tuple[tuple[int, float], ...]:
    """'1.2' (every pass) or '1:1,2:1.05,8:1.3' (rows:cost points), as the CLI takes them."""
    text = text.strip()
    try:
        if ":" not in text:
            return ((1, float(text)),)
        return tuple((int(n), float(v)) for n, v in (part.split(":") for part in text.split(",") if part.strip()))
    except ValueError as error:
        raise ValueError(f"unreadable verify costs {text!r}: give one number (every pass) or rows:cost pairs like "
                         "'1:1,2:1.05,8:1.3'") from error
