"""Printed summaries of a benchmark run: ``Name: value`` lines, one figure a line.

vLLM's examples/offline_inference/spec_decode.py, from llm.get_metrics() (the /metrics counters):
  "num_drafts: %d"  verify steps that drafted (an ngram step that found no match drafts nothing and is not
                    counted, vllm#24344); "num_draft_tokens", "num_accepted_tokens", "total_num_output_tokens",
  "mean acceptance length: %.2f" = 1 + accepted / num_drafts (bonus included),
  "acceptance at token i: %.2f" = accepted at position i / num_drafts (marginal; k lines).
``vllm bench serve`` (vllm#31739) and SGLang's bench_serving, "{:<40} {:<10}" each, computed by the client from
the server's counters before and after the run:
  "Acceptance rate (%)" = accepted / draft tokens, "Acceptance length" = 1 + accepted / drafts (SGLang: "(server)",
  the server's running mean, and "(benchmark)", this run's), "Drafts" (steps), "Draft tokens", "Accepted tokens",
  vLLM then "Per-position acceptance (%):" with "  Position i: %.2f" lines (accepted at i / drafts, in %).
The load the run was made at, from the same block: "Maximum request concurrency" (vLLM) / "Max request concurrency"
(SGLang), "Request rate configured (RPS)" (vLLM) / "Traffic request rate" (SGLang; "inf": all at once), "Output token
throughput (tok/s)". A block without counts (speculation off, or SGLang's lone "Accept length", the server's running
mean) is kept as a MeanRun: its load and throughput, and that mean as printed.
"""
from __future__ import annotations

import math

from .lines import count, first_number, short_lines
from .means import MeanRun
from .rounding import half_unit
from .run import EngineRun, Load, check_k

EXAMPLE, BENCH = "vLLM spec_decode.py summary", "bench serve summary"
EXAMPLE_KEYS = ("num_drafts", "num_accepted_tokens")
BENCH_KEYS = ("Drafts", "Accepted tokens", "Draft tokens")
BANNER = "Serving Benchmark Result"  # both vllm bench serve and SGLang bench_serving open their block with it
CONCURRENCY = ("Maximum request concurrency", "Max request concurrency")
RATE = ("Request rate configured (RPS)", "Traffic request rate")


def summary_fields(text: str) -> dict[str, str]:
    """``Name: value`` of every line whose value is one word (a number); a name seen twice is refused."""
    fields: dict[str, str] = {}
    for n, line in enumerate(short_lines(text), 1):
        name, sep, value = line.strip().partition(":")
        value = value.strip()
        if not sep or not value or " " in value or len(name) > 60:
            continue
        if name in fields:
            raise ValueError(f"line {n}: '{name}' a second time: several summaries in one text; paste one")
        fields[name] = value
    return fields


def is_example(text: str) -> bool:
    return _holds(text, EXAMPLE_KEYS)


def is_bench(text: str) -> bool:
    return _holds(text, BENCH_KEYS)


def _holds(text: str, keys) -> bool:
    starts = {line.strip().partition(":")[0] for line in short_lines(text) if ":" in line}
    return all(key in starts for key in keys)


def parse_example(text: str, check=None) -> EngineRun:
    fields = summary_fields(text)
    rates = _positions(fields, "acceptance at token ")
    steps, accepted = count(fields["num_drafts"], "num_drafts"), count(fields["num_accepted_tokens"],
                                                                        "num_accepted_tokens")
    _check_mean(fields.get("mean acceptance length"), accepted, steps)
    notes = ["read as vLLM's spec_decode.py example summary: num_drafts = verify steps that drafted (vllm#24344); "
             "mean acceptance length = 1 + num_accepted_tokens / num_drafts, bonus included"]
    if "num_tokens_generated_without_sd" in fields:
        notes.append(f"{fields['num_tokens_generated_without_sd']} tokens came from steps that drafted nothing "
                     "(not counted in num_drafts)")
    return EngineRun(source=EXAMPLE, steps=steps, accepted=accepted, k=check_k(len(rates)) if rates else None,
                     drafted=_count(fields, "num_draft_tokens"), emitted=_count(fields, "total_num_output_tokens"),
                     notes=tuple(notes) + _rates_note(rates, 2))


def parse_bench(text: str, check=None) -> EngineRun:
    fields = summary_fields(text)
    steps, drafted = count(fields["Drafts"], "Drafts"), count(fields["Draft tokens"], "Draft tokens")
    accepted = count(fields["Accepted tokens"], "Accepted tokens")
    sglang = "Acceptance length (benchmark)" in fields
    _check_mean(fields.get("Acceptance length (benchmark)" if sglang else "Acceptance length"), accepted, steps)
    if "Acceptance rate (%)" in fields and drafted:
        rate = first_number(fields["Acceptance rate (%)"], "Acceptance rate (%)")
        if abs(rate - 100 * accepted / drafted) > half_unit(2):
            raise ValueError(f"the printed Acceptance rate {rate}% is not Accepted tokens / Draft tokens = "
                             f"{accepted} / {drafted}")
    rates = _positions(fields, "Position ")
    note = ("read as SGLang bench_serving's section: Drafts = verify steps; 'Acceptance length (server)' is the "
            "server's running mean, not this run's" if sglang else
            "read as vllm bench serve's section (vllm#31739): Drafts = verify steps; per-position values are % of "
            "drafts")
    requests = fields.get("Successful requests")
    return EngineRun(source=BENCH + (" (SGLang)" if sglang else " (vLLM)"), steps=steps, drafted=drafted,
                     accepted=accepted, k=check_k(len(rates)) if rates else None,
                     emitted=_count(fields, "Total generated tokens"),
                     requests=count(requests, "Successful requests") if requests else None, load=bench_load(fields),
                     notes=(note,) + _rates_note(rates, 2))


def bench_load(fields) -> Load:
    """The load a benchmark block states: its concurrency cap, its configured request rate, its output tokens/s."""
    cap = next((fields[n] for n in CONCURRENCY if n in fields), None)
    rate = next((fields[n] for n in RATE if n in fields), None)
    rate = None if rate is None or rate.lower() == "inf" else first_number(rate, "the request rate")
    tps = fields.get("Output token throughput (tok/s)")
    return Load(concurrency=count(cap, "the request concurrency") if cap and cap[0].isdigit() else None,
                request_rate=rate if rate is None or math.isfinite(rate) else None,
                gen_tps=first_number(tps, "Output token throughput") if tps else None)


def is_bench_load(text: str) -> bool:
    """A benchmark block without counts: the banner and an output throughput."""
    return BANNER in text and _holds(text, ("Output token throughput (tok/s)",))


MTBENCH = "#questions:"  # SGLang's benchmark/mtbench script: "#questions: N, Throughput: X token/s, Acceptance length: L"


def is_mtbench(text: str) -> bool:
    return any(line.startswith(MTBENCH) and "Acceptance length:" in line for line in short_lines(text))


def parse_mtbench(text: str, check=None) -> MeanRun:
    """One MeanRun a result line: 'Acceptance length' = sum(completion_tokens) / sum(spec_verify_ct) over the
    responses (sglang#3152), bonus included; 'Throughput' kept as the output tokens/s."""
    runs = []
    for n, line in enumerate(short_lines(text), 1):
        if line.startswith(MTBENCH) and "Acceptance length:" in line:
            fields = {k.strip(): v for k, _, v in (p.partition(":") for p in line.split(", "))}
            tps = fields.get("Throughput")
            runs.append(MeanRun(source=MTBENCH_SOURCE, mean_length=first_number(fields["Acceptance length"],
                                                                                 "Acceptance length"),
                                load=Load(gen_tps=first_number(tps, "Throughput") if tps else None),
                                notes=(f"line {n}",)))
    note = ("read as SGLang's MT-bench script: Acceptance length = completion tokens / verify steps over the "
            "responses (sglang#3152), bonus included; no counts")
    return runs[0].with_notes(note) if len(runs) == 1 else MeanRun(source=MTBENCH_SOURCE, series=tuple(runs),
                                                                   notes=(note,))


MTBENCH_SOURCE = "SGLang MT-bench summary"
SEND_ONE, SEND_ONE_SOURCE = "acc_length=", "SGLang send_one.py"  # python -m sglang.test.send_one: acc_length=, speed=


def is_send_one(text: str) -> bool:
    return any(line.strip().startswith(SEND_ONE) for line in short_lines(text))


def parse_send_one(text: str, check=None) -> MeanRun:
    """One MeanRun an 'acc_length=L' line: one request's completion_tokens / spec_verify_ct (bonus included), with
    the 'speed=S token/s' line after it as its output tokens/s."""
    lines = [line.strip() for line in short_lines(text)]
    runs = []
    for n, line in enumerate(lines):
        if line.startswith(SEND_ONE):
            speed = next((s for s in lines[n + 1:n + 3] if s.startswith("speed=")), None)
            runs.append(MeanRun(source=SEND_ONE_SOURCE, mean_length=first_number(line[len(SEND_ONE):], "acc_length"),
                                load=Load(gen_tps=first_number(speed[6:], "speed") if speed else None),
                                notes=(f"line {n + 1}",)))
    note = ("read as SGLang's send_one.py: acc_length = one request's completion_tokens / spec_verify_ct (bonus "
            "included; 1.00 without speculation), speed = its output tokens/s; no counts")
    return runs[0].with_notes(note) if len(runs) == 1 else MeanRun(source=SEND_ONE_SOURCE, series=tuple(runs),
                                                                   notes=(note,))


def parse_bench_means(text: str, check=None) -> MeanRun:
    fields = summary_fields(text)
    load = bench_load(fields)
    if "Accept length" in fields:
        mean = first_number(fields["Accept length"], "Accept length")
        return MeanRun(source=BENCH + " (SGLang)", mean_length=mean, load=load, notes=(
            "read as SGLang bench_serving's 'Accept length': the server's running mean of tokens per verify step "
            "(bonus included) read from /get_server_info, not scoped to this run (sglang#34743); no counts",))
    return MeanRun(source=BENCH, load=load, notes=(
        "a benchmark block with no speculative decoding figures (speculation off?): its load and output tokens/s "
        "only",))


def _count(fields, name: str) -> int | None:
    return count(fields[name], name) if name in fields else None


def _positions(fields, prefix: str) -> tuple[float, ...]:
    """The per-position rates, in position order ("acceptance at token 0", "Position 0", ...)."""
    out, i = [], 0
    while f"{prefix}{i}" in fields and i <= 64:
        out.append(first_number(fields[f"{prefix}{i}"], f"{prefix}{i}"))
        i += 1
    return tuple(out)


def _rates_note(rates, decimals: int) -> tuple[str, ...]:
    if not rates:
        return ()
    return (f"k = {len(rates)}, the number of per-position rates; the rates are printed to {decimals} decimals, too "
            "coarse to give per-position counts",)


def _check_mean(printed: str | None, accepted: int, steps: int) -> None:
    if printed is None or not steps:
        return
    mean = first_number(printed, "the mean acceptance length")
    if abs(mean - (1 + accepted / steps)) > half_unit(2):
        raise ValueError(f"the printed mean acceptance length {mean} is not 1 + accepted / drafts = 1 + {accepted} "
                         f"/ {steps}")
