"""vLLM's per-request acceptance metrics in OpenAI-compatible responses (the server started with
--per-request-spec-decode-metrics summary|detailed; earlier builds: --per-request-spec-decode-stats).

docs/features/speculative_decoding/acceptance_metrics.md ("Per-Request Acceptance Metrics", experimental), two
shapes over vLLM's history, both read:
  per choice  choices[i].speculative_decoding_stats, histogram sparse {"j": steps}; a stream carries it on the
              terminal chunk's choice (the one with the finish reason);
  per response metrics.speculative_decoding, histogram dense [steps accepting j drafts]; a stream carries it on
              the trailing include_usage chunk.
Fields: mean_acceptance_length (1 + accepted / steps), draft_acceptance_rate, acceptance_histogram,
num_spec_steps, num_accepted_draft_tokens, num_draft_tokens, num_spec_tokens (k); "detailed" adds
per_step_accepted and per_step_drafted. Summed over every request they equal the /metrics counters
vllm:spec_decode_num_drafts / _num_draft_tokens / _num_accepted_tokens. A response, a JSON list, JSONL or an SSE
stream of them; requests are summed and form the series.
"""
from __future__ import annotations

from .jsonio import choices, dense_histogram, number, per_request, survival, whole
from .run import MAX_K, EngineRun, check_k

SOURCE = "vLLM per-request metrics"


def stats_of(obj: dict) -> list[dict]:
    """The acceptance stats an object carries: the response's, or each choice's."""
    metrics = obj.get("metrics")
    if isinstance(metrics, dict) and isinstance(metrics.get("speculative_decoding"), dict):
        return [metrics["speculative_decoding"]]
    return [c["speculative_decoding_stats"] for c in choices(obj)
            if isinstance(c.get("speculative_decoding_stats"), dict)]


def carries(obj: dict) -> bool:
    return bool(stats_of(obj))


def parse(records) -> EngineRun:
    return per_request(records, stats_of, request_run, SOURCE)


def request_run(stats: dict, emitted: int | None) -> EngineRun:
    steps = whole(stats, "num_spec_steps")
    accepted = whole(stats, "num_accepted_draft_tokens")
    if steps is None or accepted is None:
        raise ValueError("the speculative-decoding stats lack num_spec_steps or num_accepted_draft_tokens")
    k = whole(stats, "num_spec_tokens")
    if k is not None:
        check_k(k, "num_spec_tokens")  # before anything is padded to it
    histogram = _histogram(stats, k)
    _check_mean(stats, accepted, steps)
    per_pos = survival(histogram) if histogram is not None else None
    if per_pos is not None and k is not None:
        per_pos = per_pos + (0,) * (k - len(per_pos))
    return EngineRun(source=SOURCE, drafted=whole(stats, "num_draft_tokens"), accepted=accepted, steps=steps, k=k,
                     emitted=emitted, requests=1, histogram=histogram, accepted_per_pos=per_pos)


def _histogram(stats: dict, k: int | None) -> tuple[int, ...] | None:
    """The histogram as sent, or built from the detailed per-step arrays (which must agree with it)."""
    histogram = dense_histogram(stats.get("acceptance_histogram"), "acceptance_histogram: ")
    per_step = stats.get("per_step_accepted")
    if isinstance(per_step, list) and per_step:
        if any(isinstance(j, bool) or not isinstance(j, int) or not 0 <= j <= MAX_K for j in per_step):
            raise ValueError(f"per_step_accepted must hold draft counts from 0 to {MAX_K}")
        built = [0] * (max(max(per_step), len(histogram or ()) - 1) + 1)
        for j in per_step:
            built[j] += 1
        width = max(len(built), len(histogram or ()))
        if histogram is not None and _padded(built, width) != _padded(histogram, width):
            raise ValueError("per_step_accepted disagrees with acceptance_histogram")
        histogram = tuple(built)
    if histogram is not None and k is not None:
        histogram = _padded(histogram, k + 1)
    return histogram


def _padded(counts, width: int) -> tuple[int, ...]:
    return tuple(counts) + (0,) * (width - len(counts))


def _check_mean(stats: dict, accepted: int, steps: int) -> None:
    mean = number(stats, "mean_acceptance_length")
    if mean is None or not steps:
        return
    # a full float, or one rounded for display (an early build sent 1.23): within half its last digit
    digits = len(repr(float(mean)).partition(".")[2])
    slack = 0.5 * 10.0 ** -digits if digits < 6 else 1e-6 * max(1.0, mean)
    if abs(mean - (1 + accepted / steps)) > slack + 1e-12:
        raise ValueError(f"mean_acceptance_length {mean} is not 1 + accepted / steps = 1 + {accepted} / {steps}")
