"""llama.cpp server responses (/completion, and the OpenAI-compatible endpoints, which carry the same timings).

tools/server/server-common.cpp, server_slot_stats::to_json(): "timings" holds predicted_n (tokens generated),
predicted_ms, ... and, when the slot drafted, draft_n (draft tokens generated) and draft_n_accepted. The
verify steps are not in the response (see the server's log line or /metrics for them). /completion's
"generation_settings" (tools/server/server-task.cpp, task_params::to_json) carries temperature, top_k, top_p;
older builds also "speculative.n_max" / "speculative.n_min" (the configured draft length range; the vendored
build reports only "speculative.types"). A stream's final chunk ("stop": true, or a choice with a finish reason)
carries the timings.
"""
from __future__ import annotations

from .jsonio import choices, grouped, number, whole
from .lines import counted, failed_at
from .run import EngineRun, total

SOURCE = "llama.cpp server response"


def carries(obj: dict) -> bool:
    timings = obj.get("timings")
    return isinstance(timings, dict) and "draft_n" in timings


def _final(obj: dict) -> bool:
    """The response's last word: not a stream chunk still under way."""
    if "stop" in obj:
        return obj["stop"] is True
    finishes = [c.get("finish_reason") for c in choices(obj)]
    return not finishes or any(f is not None for f in finishes)


def parse(records) -> EngineRun:
    runs = []
    for group in grouped(records, lambda obj: obj.get("id")):
        finals = [(n, obj) for n, obj in group if carries(obj) and _final(obj)]
        if not finals:
            continue
        n, obj = finals[-1]
        try:
            runs.append(response_run(obj))
        except ValueError as error:
            raise failed_at(n, str(obj.get("timings")), error) from error
    if not runs:
        raise ValueError("the llama.cpp responses are stream chunks without a final one (no 'stop': true)")
    return total(runs, SOURCE).with_notes(f"{counted(len(runs), 'response')} summed; the server does not report verify "
                                          "steps per response")


def response_run(obj: dict) -> EngineRun:
    timings = obj["timings"]
    accepted = whole(timings, "draft_n_accepted", where="timings.")
    settings = obj.get("generation_settings") if isinstance(obj.get("generation_settings"), dict) else {}
    k = whole(settings, "speculative.n_max", where="generation_settings.")
    return EngineRun(source=SOURCE, drafted=whole(timings, "draft_n", where="timings."),
                     accepted=accepted if accepted is not None else 0,
                     emitted=whole(timings, "predicted_n", where="timings."), requests=1, k=k or None,
                     temperature=_temperature(settings), top_p=number(settings, "top_p"),
                     top_k=whole(settings, "top_k"), model=obj.get("model") if isinstance(obj.get("model"), str)
                     else None)


def _temperature(settings: dict) -> float | None:
    """llama.cpp samples greedily at temperature <= 0 (src/llama-sampler.cpp, llama_sampler_temp_impl): 0."""
    t = number(settings, "temperature", where="generation_settings.")
    return None if t is None else max(float(t), 0.0)
