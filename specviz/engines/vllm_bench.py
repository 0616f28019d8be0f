"""``vllm bench serve --save-result``: the result JSON, one object per run (a .jsonl of several runs reads as a
series, one run per load).

vllm/benchmarks/serve.py since vllm#31739 (2026-01) adds, when the server speculates, the difference of its
/metrics counters before and after the run:
  spec_decode_num_drafts       verify steps          spec_decode_draft_tokens      draft tokens
  spec_decode_accepted_tokens  accepted drafts       spec_decode_acceptance_rate   100 x accepted / draft tokens
  spec_decode_acceptance_length  1 + accepted / drafts (bonus included)
  spec_decode_per_position_acceptance_rates  [i] = accepted at position i / drafts (fractions; the text report
                                             prints them x 100)
and beside them the load the run was made at: max_concurrency (null: uncapped), request_rate ("inf": all at once),
output_throughput (tokens/s), completed (requests), total_output_tokens. Counts are server-wide: traffic from other
clients during the run is counted too.
"""
from __future__ import annotations

import math

from .jsonio import number, whole
from .lines import counted, failed_at
from .run import EngineRun, Load, check_k, total

SOURCE = "vllm bench serve result JSON"
SIGNATURE = ("spec_decode_num_drafts", "spec_decode_accepted_tokens")
LOAD_KEYS = ("output_throughput", "completed")  # every result JSON has them, speculating or not


def carries(obj: dict) -> bool:
    return all(key in obj for key in SIGNATURE)


def is_result(obj: dict) -> bool:
    return all(key in obj for key in LOAD_KEYS) and "duration" in obj


def parse(records) -> EngineRun:
    runs = []
    for n, obj in records:
        if not carries(obj):
            continue
        try:
            runs.append(result_run(obj))
        except ValueError as error:
            raise failed_at(n, str(obj)[:200], error) from error
    note = (f"{counted(len(runs), 'benchmark run')}, each at its own load (the series); totals are their sums"
            if len(runs) > 1 else "")
    return total(runs, SOURCE).with_notes(note)


def load_of(obj: dict) -> Load:
    rate = obj.get("request_rate")
    rate = None if rate in (None, "inf") or (isinstance(rate, float) and math.isinf(rate)) \
        else number(obj, "request_rate")
    return Load(concurrency=whole(obj, "max_concurrency"), request_rate=rate,
                gen_tps=number(obj, "output_throughput"))


def result_run(obj: dict) -> EngineRun:
    steps = whole(obj, "spec_decode_num_drafts")
    accepted = whole(obj, "spec_decode_accepted_tokens")
    drafted = whole(obj, "spec_decode_draft_tokens")
    length = number(obj, "spec_decode_acceptance_length")
    if length is not None and steps and abs(length - (1 + accepted / steps)) > 1e-6 * length:
        raise ValueError(f"spec_decode_acceptance_length {length} is not 1 + accepted / drafts = 1 + {accepted} / "
                         f"{steps}")
    rates = obj.get("spec_decode_per_position_acceptance_rates") or []
    if not isinstance(rates, list) or not all(isinstance(r, (int, float)) and not isinstance(r, bool) for r in rates):
        raise ValueError("spec_decode_per_position_acceptance_rates should be a list of numbers")
    per_pos, note = _positions(rates, steps, accepted)
    return EngineRun(source=SOURCE, steps=steps, drafted=drafted, accepted=accepted,
                     k=check_k(len(rates)) if rates else None, accepted_per_pos=per_pos,
                     emitted=whole(obj, "total_output_tokens"),
                     requests=whole(obj, "completed"), load=load_of(obj),
                     notes=("read as vllm bench serve's result JSON (vllm#31739 keys): counts are the server's "
                            "counters differenced over the run; the load is the run's max_concurrency, request_rate "
                            "and output_throughput", note))


def _positions(rates, steps: int | None, accepted: int) -> tuple[tuple[int, ...] | None, str]:
    """Per-position counts = rate x drafts where each is whole and they sum to accepted (the JSON keeps full floats);
    the rates' scale (fractions or %) told by their sum against accepted / drafts."""
    if not rates or not steps:
        return None, ""
    scale = 1.0 if abs(sum(rates) - accepted / steps) <= 1e-6 * max(1.0, sum(rates)) else \
        100.0 if abs(sum(rates) - 100 * accepted / steps) <= 1e-4 * max(1.0, sum(rates)) else None
    if scale is None:
        return None, (f"the per-position rates sum to {sum(rates):.4f}, neither accepted / drafts = "
                      f"{accepted / steps:.4f} nor 100 times it: their meaning is ambiguous, not used")
    counts = [r / scale * steps for r in rates]
    if any(abs(c - round(c)) > 1e-6 * steps for c in counts) or sum(round(c) for c in counts) != accepted:
        return None, "per-position rates kept as rates (rate x drafts is not a whole count at every position)"
    return tuple(round(c) for c in counts), ("per-position counts = rate x drafts, whole at every position"
                                             + (" (rates in %)" if scale == 100.0 else ""))
