"""TensorRT-LLM's speculative-decoding series in a Prometheus scrape (``/prometheus/metrics``), read with the meaning
of the build that wrote them.

tensorrt_llm/metrics/collector.py, MetricsCollector.log_iteration_stats(), feeds them from each iteration's
``specDecodingStats`` (labels: the collector's own, model_name and engine_type; Dynamo re-exports them):
  counters (PR #12545 as merged, 2026-03/04, and every later build):
    trtllm_spec_decode_num_draft_tokens_total     += numDraftTokens of each logged iteration  (cumulative)
    trtllm_spec_decode_num_accepted_tokens_total  += numAcceptedTokens                        (cumulative)
  gauges (the same PR's first form, before its "Gauge to Counter" change, and any build taken from it):
    trtllm_spec_decode_num_draft_tokens / ..._num_accepted_tokens, set to the last logged iteration's values
  both: trtllm_spec_decode_acceptance_length, a gauge of the last iteration's acceptanceLength =
    (numAcceptedTokens + numRequestsWithDraftTokens) / numRequestsWithDraftTokens (bonus included, 0.0 without drafts).
The verify-step count (numRequestsWithDraftTokens) is not exported: the counters' runs leave steps unknown. A gauge
build's one iteration states it through the acceptance length, steps = accepted / (length - 1), checked here. Gauges
are never added up: not over scrapes (each is the last iteration before its scrape, perhaps the same one twice) and
not over engines (each its own moment). Per-position counters (PR #12636, ``..._drafted_tokens_total`` and
``..._accepted_tokens_total`` by ``token_position``) count finished requests only, another scope: not read.
"""
from __future__ import annotations

import math

from .nearest import closest
from .run import MAX_K, EngineRun

LENGTH = "spec_decode_acceptance_length"
TOLERANCE = 0.006  # of a length: a pasted value may be rounded to a few decimals
NAME = "TensorRT-LLM Prometheus per-iteration gauges (trtllm_spec_decode_num_draft_tokens / _num_accepted_tokens " \
       "without _total: TensorRT-LLM PR #12545 before its counters)"
PASTE = ("one scrape of one engine (its lines of one label set), or a build with the cumulative "
         "trtllm_spec_decode_num_*_tokens_total counters (two scrapes of those give the counts between them), or "
         "trtllm-serve's /metrics JSON iteration stats (enable_iter_perf_stats), which hold every iteration's counts")


def is_trtllm(prefix: str) -> bool:
    return prefix.startswith("trtllm")


def record(counts: dict, field: str, family, sample) -> None:
    """Note which form the series has (a gauge: declared so, or a sample without _total) and the label sets each
    field's samples carry, before the value is added."""
    if field == "length":
        value = sample.value
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"{sample.name} = {value}: an acceptance length is a finite number >= 0")
        counts.setdefault("length", []).append(value)
        return
    gauge = family.type == "gauge" or (family.type != "counter" and not sample.name.endswith("_total"))
    counts.setdefault("forms", set()).add("gauge" if gauge else "counter")
    counts.setdefault("series", {}).setdefault(field, []).append(tuple(sorted(sample.labels.items())))


def form(values: list[dict]) -> str:
    """'gauge' or 'counter' for every scrape's series of the model; one scrape mixing both is refused."""
    forms = set().union(*(v.get("forms", set()) for v in values))
    if len(forms) > 1:
        raise ValueError("the scrape mixes TensorRT-LLM's per-iteration gauges (trtllm_spec_decode_num_*_tokens) "
                         "with its cumulative counters (..._total): two builds' lines pasted together?")
    return forms.pop() if forms else "counter"


def counter_notes(values: list[dict]) -> tuple[str, ...]:
    """What the counters are, and the last scrape's acceptance-length gauge as what it is."""
    notes = ["TensorRT-LLM counters (trtllm_spec_decode_num_*_tokens_total): draft and accepted tokens added up over "
             "every iteration logged since the server started; the verify-step count is not exported, so steps stay "
             "unknown"]
    lengths = values[-1].get("length") or []
    for value in lengths:
        _check_length(value)
    if lengths:
        shown = ", ".join(f"{v:g}" for v in lengths)
        notes.append(f"trtllm_spec_decode_acceptance_length = {shown}: the last iteration's (accepted + requests with "
                     "drafts) / requests with drafts, bonus included, one iteration only: not a mean of these counts, "
                     "so not checked against them")
    return tuple(notes)


def gauge_run(values: list[dict], model: str, text: str) -> EngineRun:
    """One iteration's counts from one scrape of one engine's gauges; steps from the acceptance length where it
    fixes them. Several scrapes or several engines are refused, naming the format."""
    if len(values) > 1:
        raise refusal(text, f"{len(values)} scrapes of gauges: each holds the last iteration before it (two may show "
                            "the same iteration), so they are neither totals nor intervals to add or subtract")
    counts = values[0]
    series = counts.get("series", {}).values()
    if any(len(set(labels)) < len(labels) for labels in series):
        raise refusal(text, "a gauge's series comes twice: scrapes pasted without their '# TYPE' lines? Each holds "
                            "the last iteration before it, so they are not added")
    if any(len(labels) > 1 for labels in series) or len(counts.get("length") or []) > 1:
        raise refusal(text, "several label sets (engines or workers) of the gauges: each is its own engine's last "
                            "iteration, at its own moment, so they are not added")
    drafted = round(counts["drafted"]) if "drafted" in counts else None
    accepted = round(counts["accepted"])
    length = (counts.get("length") or [None])[0]
    steps, how = iteration_steps(drafted, accepted, length)
    return EngineRun(
        source=f"Prometheus scrape ({counts['prefix'].rstrip(':_')}, per-iteration gauges)", model=model or None,
        drafted=drafted, accepted=accepted, steps=steps,
        notes=("trtllm_spec_decode_num_draft_tokens and _num_accepted_tokens are gauges in this build: the draft and "
               "accepted tokens of one iteration (the last logged before the scrape), summed over that iteration's "
               "requests; not counts since the server started", how))


def iteration_steps(drafted: int | None, accepted: int, length: float | None) -> tuple[int | None, str]:
    """The iteration's verify steps (its requests with drafts) from its acceptance length L = (accepted + steps) /
    steps, and how they were found; None where L does not fix them. An L the counts cannot have is refused."""
    if length is None:
        return None, "steps unknown: no trtllm_spec_decode_acceptance_length in the scrape"
    _check_length(length)
    if length == 0:
        if drafted or accepted:
            raise ValueError(f"acceptance length 0 (an iteration without drafts) beside {drafted} drafted and "
                             f"{accepted} accepted")
        raise ValueError("the gauges hold an iteration that verified no drafts (acceptance length 0, nothing "
                         "drafted): no counts to read; paste " + PASTE)
    if not accepted:
        if abs(length - 1) > TOLERANCE:
            raise ValueError(f"acceptance length {length:g} with nothing accepted: it would be 1")
        return None, f"steps unknown: acceptance length {length:g} with nothing accepted fits any number of steps"
    if length <= 1:
        raise ValueError(f"acceptance length {length:g} beside {accepted} accepted: it would be above 1")
    near = round(accepted / (length - 1))
    fits = [s for s in (near - 1, near, near + 1)
            if s >= 1 and abs((accepted + s) / s - length) <= TOLERANCE and (drafted is None or s <= drafted)
            and accepted <= s * MAX_K]
    if not fits:
        raise ValueError(f"acceptance length {length:g} fits no whole number of verify steps with {accepted} "
                         f"accepted{'' if drafted is None else f' of {drafted} drafted'}: (accepted + steps) / steps "
                         "is the engine's definition")
    if len(fits) > 1:
        return None, (f"steps unknown: acceptance length {length:g} fits {' or '.join(map(str, fits))} verify steps "
                      "at its printed precision")
    return fits[0], (f"steps = accepted / (acceptance length - 1) = {accepted} / ({length:g} - 1) = {fits[0]}: that "
                     "iteration's requests with drafts, one verify step each (trtllm_spec_decode_acceptance_length is "
                     "its (accepted + steps) / steps, bonus included)")


def _check_length(value: float) -> None:
    if not math.isfinite(value) or value < 0 or 0 < value < 1:
        raise ValueError(f"trtllm_spec_decode_acceptance_length = {value}: a length is 0 (no drafts) or at least 1 "
                         "(the target's own token counts)")


def refusal(text: str, why: str) -> ValueError:
    """The nearest-format refusal: what the gauges are, the line that shows them, and what to paste instead."""
    lines = text.splitlines()
    n, line = next(((i, s) for i, s in enumerate(lines, 1) if _gauge_line(s)), (1, lines[0] if lines else ""))
    return ValueError(closest(NAME, why, n, line, PASTE))


def _gauge_line(line: str) -> bool:
    name = line.strip().split("{", 1)[0].split(" ", 1)[0]
    return name.startswith("trtllm") and name.endswith(("spec_decode_num_draft_tokens",
                                                         "spec_decode_num_accepted_tokens"))
