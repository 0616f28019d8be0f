"""SGLang's per-request ``meta_info`` (the /generate response, or a choice of its OpenAI-compatible one).

python/sglang/srt/managers/tokenizer_manager.py, TokenizerManager._calculate_spec_decoding_metrics (once the
request finishes):
  spec_verify_ct                 verify steps
  spec_num_correct_drafts        accepted drafts (no bonus); backward-compatible alias spec_accepted_drafts,
                                 older builds spec_accept_token_num
  spec_num_proposed_drafts       = spec_verify_ct x (speculative_num_draft_tokens - 1); alias
                                 spec_proposed_drafts, older builds spec_draft_token_num
  spec_accept_rate               correct / proposed
  spec_accept_length             completion_tokens / spec_verify_ct (bonus included)
  spec_correct_drafts_histogram  [j] = steps that accepted exactly j drafts; alias spec_accept_histogram
A stream repeats meta_info on every chunk; only the finished request's carries these, and chunks of one request
share meta_info.id. Requests are summed and form the series.
"""
from __future__ import annotations

from .jsonio import choices, dense_histogram, grouped, number, survival, whole
from .lines import counted, failed_at
from .run import EngineRun, check_k, total

SOURCE = "SGLang meta_info"
ACCEPTED = ("spec_num_correct_drafts", "spec_accepted_drafts", "spec_accept_token_num")
PROPOSED = ("spec_num_proposed_drafts", "spec_proposed_drafts", "spec_draft_token_num")
HISTOGRAM = ("spec_correct_drafts_histogram", "spec_accept_histogram")


def meta_of(obj: dict) -> list[dict]:
    metas = [obj["meta_info"]] if isinstance(obj.get("meta_info"), dict) else []
    metas += [c["meta_info"] for c in choices(obj) if isinstance(c.get("meta_info"), dict)]
    return [m for m in metas if "spec_verify_ct" in m]


def carries(obj: dict) -> bool:
    return bool(meta_of(obj))


def parse(records) -> EngineRun:
    runs = []
    for group in grouped(records, _request_id):
        carrying = [(n, m) for n, obj in group for m in meta_of(obj)]
        if not carrying:
            continue  # a stream's chunks before the request finished
        n, meta = carrying[-1]  # the finished request's
        try:
            runs.append(request_run(meta))
        except ValueError as error:
            raise failed_at(n, str(meta), error) from error
    return total(runs, SOURCE).with_notes(counted(len(runs), "request") + " summed")


def _request_id(obj: dict):
    meta = obj.get("meta_info")
    return meta.get("id") if isinstance(meta, dict) else obj.get("id")


def request_run(meta: dict) -> EngineRun:
    steps = whole(meta, "spec_verify_ct")
    histogram = _histogram(meta)
    accepted = whole(meta, *ACCEPTED)
    if accepted is None and histogram is not None:
        accepted = sum(j * n for j, n in enumerate(histogram))
    if accepted is None:
        raise ValueError(f"meta_info has spec_verify_ct but no accepted-draft count ({' / '.join(ACCEPTED)})")
    drafted = whole(meta, *PROPOSED)
    k, notes = None, []
    if drafted is not None and steps and drafted % steps == 0:
        # proposed = verify_ct x (num_draft_tokens - 1), by construction in the source; k bounded before padding
        k = check_k(drafted // steps, "k = proposed / verify steps")
        notes.append(f"k = proposed / verify steps = {drafted} / {steps} (SGLang proposes num_draft_tokens - 1 "
                     "per step); proposed is that width times the steps, an upper bound on what an adaptive or "
                     "ragged drafter drafted (sglang#34814)")
    _check_length(meta, steps)
    per_pos = survival(histogram) if histogram is not None else None
    if per_pos is not None and k is not None:
        per_pos, histogram = per_pos + (0,) * (k - len(per_pos)), histogram + (0,) * (k + 1 - len(histogram))
    return EngineRun(source=SOURCE, drafted=drafted, accepted=accepted, steps=steps, k=k,
                     emitted=whole(meta, "completion_tokens"), requests=1, histogram=histogram,
                     accepted_per_pos=per_pos, notes=tuple(notes))


def _histogram(meta: dict) -> tuple[int, ...] | None:
    for key in HISTOGRAM:
        if meta.get(key) is not None:
            return dense_histogram(meta[key], f"{key}: ")
    return None


def _check_length(meta: dict, steps: int | None) -> None:
    length, tokens = number(meta, "spec_accept_length"), whole(meta, "completion_tokens")
    if length is not None and tokens is not None and steps and abs(length - tokens / steps) > 1e-6 * length:
        raise ValueError(f"spec_accept_length {length} is not completion_tokens / spec_verify_ct = "
                         f"{tokens} / {steps}")
