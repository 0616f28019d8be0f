"""EngineRun: what a serving engine's speculative decoder reported, as counts, and the rates derived from them.

Notation as in ``specviz.theory``: k drafts per verify step (the configured number of speculative tokens), a
step verifies its drafts in one target pass and emits the accepted ones plus one token (the resample at the
first rejection, or the bonus when all are accepted). Counts are what engines report; every rate is derived
here, with its definition, so rates of summed runs are pooled over their steps, never averaged.
A field the source does not report is None. A field the parser derived (steps from a rounded mean, counts from
rounded rates) says so in ``notes``. ``load`` keeps the load the engine printed beside an interval's counts (requests
running and queued, tokens in the batch, throughputs), as printed; ``load_figures`` derives what they define.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace

MAX_COUNT = 10**15  # more tokens than any engine has served: a unit mix-up or a corrupted counter
MAX_NAME = 4096  # characters of a model's name (a path at most)
MAX_K = 64  # drafts per step: engines run up to about 10 (an SGLang tree verifies at most 64 nodes a step)


@dataclass(frozen=True)
class Load:
    """The load an engine printed for one interval (or a benchmark ran at), each field as printed; None: not printed."""
    running: int | None = None  # requests decoding (vLLM 'Running: N reqs', SGLang '#running-req')
    queued: int | None = None  # requests waiting (vLLM 'Waiting' / V0 'Pending', SGLang '#queue-req')
    tokens: int | None = None  # KV tokens held by the running requests (SGLang '#token' / '#full token')
    kv_usage: float | None = None  # fraction of the KV cache in use (vLLM 'GPU KV cache usage', SGLang 'token usage')
    gen_tps: float | None = None  # generated tokens/s over the interval ('Avg generation throughput', 'gen throughput')
    prompt_tps: float | None = None  # prompt tokens/s over the interval (vLLM 'Avg prompt throughput')
    concurrency: int | None = None  # a benchmark's request cap ('--max-concurrency'); None: uncapped or not said
    request_rate: float | None = None  # a benchmark's configured requests/s; None: all at once (inf) or not said

    def __post_init__(self):
        for name in ("running", "queued", "tokens", "concurrency"):
            if getattr(self, name) is not None:
                _check_count(f"load {name}", getattr(self, name))
        for name in ("kv_usage", "gen_tps", "prompt_tps", "request_rate"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                      or not math.isfinite(value) or value < 0):
                raise ValueError(f"load {name} must be a finite number >= 0, got {value!r}")
        if self.kv_usage is not None and self.kv_usage > 1:
            raise ValueError(f"load kv_usage is a fraction of the cache, got {self.kv_usage}")


@dataclass(frozen=True)
class EngineRun:
    source: str  # the detected format, e.g. "vLLM log", "Prometheus scrape (vllm:)"
    drafted: int | None  # draft tokens proposed (None: the source does not say)
    accepted: int  # draft tokens accepted (the bonus token excluded)
    steps: int | None = None  # verify steps that checked at least one draft
    k: int | None = None  # configured drafts per step (num_speculative_tokens, n_max, max_draft_len)
    emitted: int | None = None  # output tokens (usage.completion_tokens, predicted_n, ...)
    requests: int | None = None  # requests (or sequences) the counts cover
    accepted_per_pos: tuple[int, ...] | None = None  # [i]: steps that accepted the draft at position i (0-based)
    histogram: tuple[int, ...] | None = None  # [j]: steps that accepted exactly j drafts
    temperature: float | None = None  # 0 = greedy
    top_p: float | None = None
    top_k: int | None = None
    model: str | None = None
    series: tuple[EngineRun, ...] = ()  # per interval (log lines, scrape deltas, requests), in order
    notes: tuple[str, ...] = ()  # what was derived, and how
    load: Load | None = None  # the load printed beside this interval's counts (a total of several intervals: None)
    producer: str | None = None  # the engine, DP rank or server process whose line this is (None: not named)

    def __post_init__(self):
        if self.load is not None and not isinstance(self.load, Load):
            raise ValueError(f"load must be a Load, got {type(self.load).__name__}")
        if self.producer is not None and not isinstance(self.producer, str):
            raise ValueError(f"producer must be a text, got {type(self.producer).__name__}")
        for name in ("accepted_per_pos", "histogram"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, tuple(value))
        object.__setattr__(self, "series", tuple(self.series))
        object.__setattr__(self, "notes", tuple(self.notes))
        _check_counts(self)
        _check_totals(self)
        _check_positions(self)
        _check_histogram(self)
        _check_sampling(self)

    def with_notes(self, *notes: str) -> EngineRun:
        return replace(self, notes=self.notes + tuple(n for n in notes if n))


def _check_count(name: str, value, low: int = 0) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be a whole number, got {value!r}")
    if value < low:
        raise ValueError(f"{name} must be at least {low}, got {value}")
    if value > MAX_COUNT:
        raise ValueError(f"{name} = {value} is absurd (more than {MAX_COUNT:.0e} tokens): check the units")


def _check_counts(run: EngineRun) -> None:
    if not isinstance(run.source, str) or not run.source:
        raise ValueError("an engine run needs the name of its source format")
    _check_count("accepted", run.accepted)
    for name in ("drafted", "steps", "emitted", "requests"):
        if getattr(run, name) is not None:
            _check_count(name, getattr(run, name))
    if run.k is not None:
        check_k(run.k, "k (drafts per step)")
    for name, most in (("accepted_per_pos", MAX_K), ("histogram", MAX_K + 1)):
        values = getattr(run, name) or ()
        if len(values) > most:
            raise ValueError(f"{len(values):,} entries in {name}: a step drafts at most {MAX_K} tokens, so at most "
                             f"{most}")
        for i, value in enumerate(values):
            _check_count(f"{name}[{i}]", value)


def check_k(k, what: str = "k (drafts per step)") -> int:
    """k as a count in 1..MAX_K (checked before anything is sized by it)."""
    _check_count(what, k, low=1)
    if k > MAX_K:
        raise ValueError(f"{what} = {k:,}: no engine drafts more than {MAX_K} tokens a step")
    return k


def _check_totals(run: EngineRun) -> None:
    if run.drafted is not None and run.accepted > run.drafted:
        raise ValueError(f"accepted ({run.accepted}) exceeds drafted ({run.drafted}): an engine cannot accept "
                         "more draft tokens than it proposed")
    if run.steps is None:
        return
    if run.steps == 0 and (run.accepted or run.drafted):
        raise ValueError(f"no verify steps, yet {run.drafted} drafted and {run.accepted} accepted")
    if run.k is not None:
        for name in ("accepted", "drafted"):
            value = getattr(run, name)
            if value is not None and value > run.steps * run.k:
                raise ValueError(f"{name} ({value}) exceeds steps x k = {run.steps} x {run.k}: a step proposes "
                                 "at most k drafts")


def _check_positions(run: EngineRun) -> None:
    a = run.accepted_per_pos
    if a is None:
        return
    for i in range(1, len(a)):
        if a[i] > a[i - 1]:
            raise ValueError(f"position {i} accepted more drafts ({a[i]}) than position {i - 1} ({a[i - 1]}): a "
                             "draft is accepted only after every draft before it, so per-position counts cannot rise")
    if sum(a) != run.accepted:
        raise ValueError(f"per-position accepted counts sum to {sum(a)}, not to accepted = {run.accepted}")
    if run.k is not None and len(a) > run.k:
        raise ValueError(f"{len(a)} per-position counts for k = {run.k} drafts per step")
    if run.steps is not None and a and a[0] > run.steps:
        raise ValueError(f"position 0 accepted {a[0]} drafts in only {run.steps} steps")


def _check_histogram(run: EngineRun) -> None:
    h = run.histogram
    if h is None:
        return
    if run.steps is not None and sum(h) != run.steps:
        raise ValueError(f"the acceptance histogram counts {sum(h)} steps, not steps = {run.steps}")
    if sum(j * n for j, n in enumerate(h)) != run.accepted:
        raise ValueError(f"the acceptance histogram accounts for {sum(j * n for j, n in enumerate(h))} accepted "
                         f"drafts, not accepted = {run.accepted}")
    if run.k is not None and any(h[run.k + 1:]):
        raise ValueError(f"the acceptance histogram has steps accepting more than k = {run.k} drafts")


def _check_sampling(run: EngineRun) -> None:
    for name in ("temperature", "top_p"):
        value = getattr(run, name)
        if value is not None and (not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0):
            raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    if run.top_k is not None:
        _check_count("top_k", run.top_k)
    if run.model is not None and (not isinstance(run.model, str) or len(run.model) > MAX_NAME):
        raise ValueError(f"a model's name is a text of at most {MAX_NAME:,} characters, got "
                         + (f"{len(run.model):,} characters" if isinstance(run.model, str) else type(run.model).__name__))


# -- several runs as one --------------------------------------------------------------------------------------
def total(runs, source: str | None = None, keep_series: bool = True) -> EngineRun:
    """The runs summed (counts add, per-position counts add position by position); a count any run lacks is
    None in the total; sampling settings are kept where all runs agree. The runs become the total's series."""
    runs = list(runs)
    if not runs:
        raise ValueError("no runs to add up")
    ks = {r.k for r in runs}
    notes = [f"k differs between intervals ({sorted(ks, key=str)}): per-position totals dropped"] \
        if len(ks) > 1 else []
    summed = {name: _sum_or_none(getattr(r, name) for r in runs)
              for name in ("drafted", "steps", "emitted", "requests")}
    same_k = len(ks) == 1
    per_pos = _sum_tuples([r.accepted_per_pos for r in runs]) if same_k else None
    histogram = _sum_tuples([r.histogram for r in runs]) if same_k else None
    shared = {name: _shared(getattr(r, name) for r in runs)
              for name in ("temperature", "top_p", "top_k", "model", "producer")}
    inherited = _shared_notes(runs)
    return EngineRun(source=source or runs[0].source, accepted=sum(r.accepted for r in runs),
                     k=ks.pop() if same_k else None, accepted_per_pos=per_pos, histogram=histogram,
                     series=tuple(runs) if keep_series and len(runs) > 1 else (),
                     load=runs[0].load if len(runs) == 1 else None,
                     notes=inherited + tuple(notes), **summed, **shared)


def coarsened(run: EngineRun, most: int) -> tuple[EngineRun, int]:
    """The run with its series pooled into groups of consecutive intervals of one producer (counts summed, so each
    group's rates are pooled over its steps), and how many intervals a group holds (1: the series as it was). About
    ``most`` groups: one more per producer at most, since lines of concurrent producers are never pooled together;
    groups are in the order of their first interval."""
    size = -(-len(run.series) // most)  # ceil
    if size <= 1:
        return run, 1
    own: dict = {}
    for i, part in enumerate(run.series):
        own.setdefault(part.producer, []).append((i, part))
    chunks = sorted((members[j][0], [p for _, p in members[j:j + size]])
                    for members in own.values() for j in range(0, len(members), size))
    return replace(run, series=tuple(total(parts, keep_series=False) for _, parts in chunks)), size


def _shared_notes(runs) -> tuple[str, ...]:
    """The notes every run carries; that the rest are on the series, if there are any."""
    shared = [n for n in runs[0].notes if all(n in r.notes for r in runs[1:])]
    if any(n not in shared for r in runs for n in r.notes):
        shared.append("each interval's own notes (how its counts were recovered) are on its entry in the series")
    return tuple(shared)


def _sum_or_none(values):
    values = list(values)
    return None if any(v is None for v in values) else sum(values)


def _sum_tuples(rows):
    if any(r is None for r in rows):
        return None
    n = max(len(r) for r in rows)
    return tuple(sum(r[i] if i < len(r) else 0 for r in rows) for i in range(n))


def _shared(values):
    values = set(values)
    return values.pop() if len(values) == 1 else None


# -- rates, each with its definition --------------------------------------------------------------------------
@dataclass(frozen=True)
class Rate:
    name: str
    value: float
    definition: str  # the formula, with the run's own counts in it


def rates(run: EngineRun) -> tuple[Rate, ...]:
    """Every rate the run's counts define (a rate whose counts are missing is left out)."""
    out = []
    if run.drafted:
        out.append(Rate("acceptance rate", run.accepted / run.drafted,
                        f"accepted / drafted = {run.accepted} / {run.drafted}"))
    if run.steps:
        out.append(Rate("mean acceptance length", 1 + run.accepted / run.steps,
                        f"1 + accepted / steps = 1 + {run.accepted} / {run.steps} (vLLM's definition: the bonus "
                        "or resampled token included)"))
        if run.drafted is not None:
            out.append(Rate("drafts per step", run.drafted / run.steps, f"drafted / steps = {run.drafted} / {run.steps}"))
    if run.steps and run.emitted is not None:
        out.append(Rate("tokens per step", run.emitted / run.steps, f"emitted / steps = {run.emitted} / {run.steps}"))
    out += _position_rates(run)
    return tuple(out)


def _position_rates(run: EngineRun) -> list[Rate]:
    a, n = run.accepted_per_pos, run.steps
    if a is None or not n:
        return []
    out = [Rate(f"marginal rate at position {i + 1}", a_i / n, f"accepted_at_{i + 1} / steps = {a_i} / {n}")
           for i, a_i in enumerate(a)]
    reached = (n,) + a[:-1]
    out += [Rate(f"conditional rate at position {i + 1}", a_i / r, f"accepted_at_{i + 1} / accepted_at_{i} = "
                 f"{a_i} / {r}" + (" (steps)" if i == 0 else "")) for i, (a_i, r) in enumerate(zip(a, reached)) if r]
    return out


def load_figures(load: Load | None) -> tuple[Rate, ...]:
    """What the printed load defines: context tokens and generated tokens/s per running request (a figure whose
    fields were not printed is left out)."""
    if load is None or not load.running:
        return ()
    out = []
    if load.tokens is not None:
        out.append(Rate("context tokens per running request", load.tokens / load.running,
                        f"tokens / running = {load.tokens} / {load.running}"))
    if load.gen_tps is not None:
        out.append(Rate("generated tokens/s per running request", load.gen_tps / load.running,
                        f"gen_tps / running = {load.gen_tps} / {load.running}"))
    return tuple(out)


def count_fields() -> tuple[str, ...]:
    """The names of the run's count fields, in order (for tables)."""
    return tuple(f.name for f in fields(EngineRun) if f.name in ("drafted", "accepted", "steps", "k", "emitted",
                                                                   "requests"))
