"""MeanRun: what a source reported as means, not counts (SGLang's 'Decode batch' lines, trtllm-bench's decoding
statistics, a bench_serving 'Accept length'), kept as printed, with the load printed beside them.

A mean with no count under it cannot be pooled or turned back into counts: a series of means is not summed, and the
figures that need counts (drafted, accepted, steps, per-position rates, a histogram) are named by ``underived``,
never estimated. A benchmark run with speculation off is a MeanRun with no acceptance figure: its load and
throughput only.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from .run import Load, Rate, check_k

NEEDS_COUNTS = ("drafted", "accepted", "steps", "per-position rates", "acceptance histogram")


@dataclass(frozen=True)
class Spread:
    """One percentile (or min, max, average) over requests, as printed: trtllm-bench's '[AL] P50    : 1.78'."""
    label: str  # the source's own label ("[AL]", "[DAR]")
    stat: str  # "MINIMUM", "AVERAGE", "P50", ...
    value: float


@dataclass(frozen=True)
class MeanRun:
    source: str  # the detected format
    mean_length: float | None = None  # tokens per verify step, bonus included, as printed
    acceptance_rate: float | None = None  # as printed; what it divides is said in ``rate_meaning``
    rate_meaning: str | None = None  # the definition the rate follows in this version (or that it is ambiguous)
    k: int | None = None  # drafts per step where the source says or the figures pin it
    load: Load | None = None
    spreads: tuple[Spread, ...] = ()  # percentiles over requests, where the source gives them
    series: tuple[MeanRun, ...] = ()  # per logging interval or per block, in order
    notes: tuple[str, ...] = ()  # the version's semantics applied, and why
    producer: str | None = None  # the DP rank or engine whose line this is (None: not named)

    def __post_init__(self):
        if not isinstance(self.source, str) or not self.source:
            raise ValueError("a reported run needs the name of its source format")
        object.__setattr__(self, "spreads", tuple(self.spreads))
        object.__setattr__(self, "series", tuple(self.series))
        object.__setattr__(self, "notes", tuple(self.notes))
        if self.mean_length is not None and not (_finite(self.mean_length) and 1 <= self.mean_length <= 65):
            raise ValueError(f"a mean acceptance length counts the bonus token, so it lies in 1..65, got "
                             f"{self.mean_length!r}")
        if self.acceptance_rate is not None and not (_finite(self.acceptance_rate) and self.acceptance_rate >= 0):
            raise ValueError(f"an acceptance rate must be a finite number >= 0, got {self.acceptance_rate!r}")
        if self.k is not None:
            check_k(self.k)
        if self.load is not None and not isinstance(self.load, Load):
            raise ValueError(f"load must be a Load, got {type(self.load).__name__}")


    def with_notes(self, *notes: str) -> MeanRun:
        return replace(self, notes=self.notes + tuple(n for n in notes if n))


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def underived(run: MeanRun) -> tuple[str, ...]:
    """The figures a source of means cannot give, each with the reason (what the doctor must not estimate)."""
    if run.mean_length is None and run.acceptance_rate is None and not any(s.mean_length for s in run.series):
        return ("every acceptance figure: the source reports no speculative decoding (speculation off?)",)
    reason = "the source prints means, not counts, so they cannot be pooled or recovered"
    return tuple(f"{name}: {reason}" for name in NEEDS_COUNTS)


def mean_figures(run: MeanRun) -> tuple[Rate, ...]:
    """The figures the means define, each with its definition: accepted drafts per step = mean length - 1, and,
    with k known, the fraction of a step's drafts accepted = (mean length - 1) / k."""
    if run.mean_length is None:
        return ()
    out = [Rate("mean acceptance length", run.mean_length, f"as printed: {run.mean_length} (bonus included)"),
           Rate("accepted drafts per step", run.mean_length - 1, f"mean length - 1 = {run.mean_length} - 1")]
    if run.k:
        out.append(Rate("accepted fraction of k", (run.mean_length - 1) / run.k,
                        f"(mean length - 1) / k = ({run.mean_length} - 1) / {run.k}"))
    return tuple(out)
