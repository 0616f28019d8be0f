"""TensorRT-LLM's per-request speculative-decoding stats in trtllm-serve's OpenAI-compatible responses.

Not settled upstream: the shape is the one TensorRT-LLM's tests pin for
tensorrt_llm/serve/postprocess_handlers.py::_build_spec_decode_stats (opt-in with
``per_request_spec_decode_stats: true`` in the --extra_llm_api_options YAML), and the one aiperf's
TRTLLMSpecDecodeAdapter (src/aiperf/spec_decode/trtllm_adapter.py) reads; the postprocess_handlers.py we read on
NVIDIA/TensorRT-LLM's main branch carried only ``avg_decoded_tokens_per_iter`` per choice. Per choice (a stream:
on the terminal chunk's choice):
  "speculative_decoding": {"acceptance_rate": 0.5, "total_accepted_draft_tokens": 30, "total_draft_tokens": 60,
                           "num_spec_steps": 20, "acceptance_histogram": [8, 0, 6, 6], "num_spec_tokens": 3}
The histogram is dense ([j] = steps accepting exactly j drafts), built from the executor's prefix-cumulative
per-position counts (per_pos_accepted, a survival function), so the per-position counts come back exactly.
num_spec_tokens is null under a draft_len_schedule (no fixed k).
Prometheus: tensorrt_llm/metrics/collector.py (MetricsCollector) exports request counts and latencies only, no
speculative-decoding counters, as read; see ``specviz.engines.prometheus``.
"""
from __future__ import annotations

from .jsonio import choices, dense_histogram, number, per_request, survival, whole
from .run import EngineRun

SOURCE = "TensorRT-LLM per-request stats"
SIGNATURE = ("total_accepted_draft_tokens", "total_draft_tokens")  # names no other engine uses


def stats_of(obj: dict) -> list[dict]:
    return [c["speculative_decoding"] for c in choices(obj) if isinstance(c.get("speculative_decoding"), dict)
            and all(key in c["speculative_decoding"] for key in SIGNATURE)]


def carries(obj: dict) -> bool:
    return bool(stats_of(obj))


def parse(records) -> EngineRun:
    return per_request(records, stats_of, request_run, SOURCE)


def request_run(stats: dict, emitted: int | None) -> EngineRun:
    k = whole(stats, "num_spec_tokens")
    histogram = dense_histogram(stats.get("acceptance_histogram"), "acceptance_histogram: ")
    per_pos = survival(histogram) if histogram is not None else None
    accepted = whole(stats, "total_accepted_draft_tokens")
    drafted = whole(stats, "total_draft_tokens")
    rate = number(stats, "acceptance_rate")
    if drafted and rate is not None and abs(rate - accepted / drafted) > 1e-6:
        raise ValueError(f"acceptance_rate {rate} is not total_accepted / total_draft = {accepted} / {drafted}")
    return EngineRun(source=SOURCE, drafted=drafted, accepted=accepted, steps=whole(stats, "num_spec_steps"), k=k,
                     emitted=emitted, requests=1, histogram=histogram, accepted_per_pos=per_pos)
