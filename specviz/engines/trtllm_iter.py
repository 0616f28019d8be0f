"""TensorRT-LLM's per-iteration executor stats: what ``trtllm-serve``'s ``/metrics`` endpoint (a JSON list) and the
LLM API's ``llm.get_stats()`` hand out when ``enable_iter_perf_stats`` is on, one object an iteration.

cpp/tensorrt_llm/executor/jsonSerialization.cpp serializes IterationStats with nlohmann::json (keys sorted):
  {"iter": 12, "iterLatencyMS": 21.4, ..., "specDecodingStats": {"acceptanceLength": 2.5, "draftOverhead": 0.21,
   "iterLatencyMS": 4.5, "numAcceptedTokens": 6, "numDraftTokens": 12, "numRequestsWithDraftTokens": 4}}
``specDecodingStats`` is null where the executor made none. tensorrt_llm/_torch/pyexecutor/py_executor.py
(_update_iter_stats) fills it per iteration, over the requests that carried drafts:
  numDraftTokens             the draft tokens verified this iteration, summed over the requests;
  numAcceptedTokens          the draft tokens accepted (the target's own token excluded);
  numRequestsWithDraftTokens the requests that verified drafts: one verify step each;
  acceptanceLength           (numAcceptedTokens + numRequestsWithDraftTokens) / numRequestsWithDraftTokens, bonus
                             included, 0.0 in an iteration without drafts (checked against the counts);
  iterLatencyMS, draftOverhead the drafter's time and its share of the iteration (not read).
TensorRT-LLM PR #9855 (2025-12) made the PyTorch flow fill it in one-model mode too; before it such iterations carry
zeros or no object. ``/metrics`` drains a queue of at most 1000 iterations on each read, so a scrape covers the
iterations since the last one. The Python bindings' snake_case names (num_draft_tokens, ...) are read alike.
"""
from __future__ import annotations

from .jsonio import number, whole
from .lines import counted, failed_at, shown
from .run import EngineRun, total

SOURCE = "TensorRT-LLM iteration stats"
STATS_KEYS = ("specDecodingStats", "specdec_stats", "spec_decoding_stats")
DRAFTED = ("numDraftTokens", "num_draft_tokens")
ACCEPTED = ("numAcceptedTokens", "num_accepted_tokens")
STEPS = ("numRequestsWithDraftTokens", "num_requests_with_draft_tokens")
LENGTH = ("acceptanceLength", "acceptance_length")


def stats_of(obj: dict) -> dict | None:
    """The iteration's speculative-decoding stats object, where it has one with the draft and accepted counts."""
    for key in STATS_KEYS:
        stats = obj.get(key)
        if isinstance(stats, dict) and any(k in stats for k in DRAFTED) and any(k in stats for k in ACCEPTED):
            return stats
    return None


def carries(obj: dict) -> bool:
    return stats_of(obj) is not None


def parse(records) -> EngineRun:
    """Every iteration that verified drafts, in order, summed; iterations without drafts are counted in the notes."""
    runs, idle, seen = [], 0, set()
    for n, obj in records:
        stats = stats_of(obj)
        if stats is None:
            continue
        try:
            run = iteration_run(stats)
        except ValueError as error:
            raise failed_at(n, shown(stats, 160), error) from error
        it = obj.get("iter")
        if isinstance(it, int) and not isinstance(it, bool):
            if it in seen:
                raise failed_at(n, shown(stats, 160), ValueError(
                    f"iteration {it} appears twice: two scrapes of /metrics overlap? Each read drains the queue, "
                    "so concatenated scrapes hold each iteration once"))
            seen.add(it)
        if run is None:
            idle += 1
        else:
            runs.append(run)
    if not runs:
        raise ValueError(f"{counted(idle, 'iteration')} of TensorRT-LLM iteration stats, none that verified a draft "
                         "(numRequestsWithDraftTokens 0 throughout): was speculation on, and the build one that fills "
                         "specDecodingStats for this mode (TensorRT-LLM PR #9855)?")
    notes = [f"{counted(len(runs), 'iteration')} that verified drafts summed (specDecodingStats: numDraftTokens, "
             "numAcceptedTokens, and numRequestsWithDraftTokens as verify steps)"]
    if idle:
        notes.append(f"{counted(idle, 'iteration')} without drafts (context-only or speculation off) left out")
    notes.append("/metrics drains up to 1000 queued iterations per read: the counts cover the iterations since the "
                 "previous read, not the server's life")
    return total(runs, SOURCE).with_notes(*notes)


def iteration_run(stats: dict) -> EngineRun | None:
    """One iteration's counts (None for one that verified no drafts); the printed acceptanceLength is checked."""
    drafted, accepted = whole(stats, *DRAFTED), whole(stats, *ACCEPTED)
    steps = whole(stats, *STEPS)
    if drafted is None or accepted is None:
        raise ValueError("the stats lack numDraftTokens or numAcceptedTokens")
    if steps is None:
        raise ValueError("the stats lack numRequestsWithDraftTokens (the verify steps): a build older than the "
                         "field, or the object cut short")
    if steps == 0:
        if drafted or accepted:
            raise ValueError(f"{drafted} drafted and {accepted} accepted in an iteration with no request that drafted")
        return None
    length = number(stats, *LENGTH)
    if length is not None and abs(length - (accepted + steps) / steps) > 0.006:
        raise ValueError(f"acceptanceLength {length} is not (numAcceptedTokens + numRequestsWithDraftTokens) / "
                         f"numRequestsWithDraftTokens = ({accepted} + {steps}) / {steps}")
    return EngineRun(source=SOURCE, drafted=drafted, accepted=accepted, steps=steps)
