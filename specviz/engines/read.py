"""read_engine_run: text, a file, or several files -> one EngineRun, the format detected and named.
read_reported: the same, or a MeanRun where the output carries means and load but no counts (SGLang's Decode batch
lines, trtllm-bench's decoding statistics, a benchmark block with speculation off or SGLang's lone 'Accept length').

Anything that cannot be read (empty, binary, truncated JSON, two formats mixed, counts that cannot be) raises a
ValueError that says why, names the line where it can, and lists the formats accepted.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import replace
from pathlib import Path

from . import (
    bench_summary,
    llamacpp_json,
    llamacpp_log,
    prometheus,
    sglang,
    sglang_log,
    specviz_trace,
    trtllm,
    trtllm_bench,
    trtllm_iter,
    unwrap,
    vllm_bench,
    vllm_log,
    vllm_requests,
)
from .jsonio import json_records, looks_like_json
from .means import MeanRun
from .nearest import nearest
from .run import EngineRun, total

MAX_BYTES = 256 * 2**20
FORMATS = (
    "vLLM log lines ('SpecDecoding metrics: Mean acceptance length: ...', or the V0 'Speculative metrics: ...')",
    "Prometheus text scrapes of /metrics with spec_decode_* series (vLLM 'vllm:', llama.cpp 'llamacpp:', TensorRT-LLM "
    "'trtllm_')",
    "vLLM responses with per-request metrics (metrics.speculative_decoding or speculative_decoding_stats)",
    "SGLang responses with meta_info spec_verify_ct, spec_num_correct_drafts, ...",
    "TensorRT-LLM responses with a per-choice speculative_decoding object",
    "TensorRT-LLM iteration stats (trtllm-serve /metrics JSON, llm.get_stats()) with specDecodingStats",
    "llama.cpp server responses with timings.draft_n / draft_n_accepted",
    "llama.cpp server logs ('draft acceptance = ... (N accepted / M generated), mean len = ...')",
    "llama-server -v per-round lines ('accepted N/M draft tokens, new n_tokens = ...')",
    "llama-speculative(-simple) summaries (n_draft, n_predict, n_drafted, n_accept)",
    "vLLM's spec_decode.py example summary (num_drafts, num_draft_tokens, num_accepted_tokens, ...)",
    "vllm bench serve / SGLang bench_serving 'Speculative Decoding' sections (Drafts, Draft tokens, Accepted tokens)",
    "vllm bench serve --save-result JSON with spec_decode_num_drafts, spec_decode_accepted_tokens, ...",
    "specviz trace JSON (Trace.to_json)",
)
# each: carries(obj), parse(records), SOURCE
JSON_KINDS = (vllm_requests, trtllm, trtllm_iter, sglang, llamacpp_json, vllm_bench)
LOG_KINDS = (("vllm log", lambda t: bool(vllm_log.vllm_lines(t)), vllm_log.parse),
             ("llama.cpp server log", llamacpp_log.is_server_log, llamacpp_log.parse_server_log),
             ("llama-speculative summary", llamacpp_log.is_summary, llamacpp_log.parse_summary),
             ("llama.cpp per-round log", llamacpp_log.is_round_log, llamacpp_log.parse_round_log),
             ("vLLM spec_decode.py summary", bench_summary.is_example, bench_summary.parse_example),
             ("bench serve summary", bench_summary.is_bench, bench_summary.parse_bench))


def read_engine_run(source, *, temperature: float | None = None, model: str | None = None,
                    check=None) -> EngineRun:
    """An EngineRun from a text, a path, bytes, or a list of paths (several files of one format: a log's parts,
    two Prometheus scrapes). ``temperature`` fills the sampling temperature the format does not report (vLLM's
    and SGLang's responses do not echo it); ``model`` picks one model of a scrape that holds several; ``check()``
    between texts, log lines and scrapes (a request's budget: it raises to stop the read)."""
    try:
        texts = load_texts(source)
    except ValueError as error:
        raise unreadable("the input", error) from error
    texts, removed = _cleaned(texts)
    kinds = []
    for name, text in texts:
        try:
            kinds.append(detect_format(text))
        except ValueError as error:
            raise unreadable(name, error) from error
    if len(set(kinds)) > 1:
        raise ValueError(f"the files hold different formats ({', '.join(sorted(set(kinds)))}): read each with "
                         "read_engine_run and pass them to diagnose together")
    try:
        run = _parse(kinds[0], [text for _, text in texts], model, check)
    except ValueError as error:
        raise unreadable(texts[0][0] if len(texts) == 1 else f"{len(texts)} files", error) from error
    return with_temperature(run.with_notes(*removed), temperature)


def _cleaned(texts: list[tuple[str, str]]) -> tuple[list[tuple[str, str]], list[str]]:
    """Each text without its paste's wrapping (unwrap.clean), and what was removed, once per kind."""
    out, removed = [], []
    for name, text in texts:
        text, what = unwrap.clean(text)
        out.append((name, text))
        if what and what not in removed:
            removed.append(what)
    return out, removed


MEANS_KINDS = (("SGLang Decode batch log", sglang_log.is_decode_log, sglang_log.parse),
               ("trtllm-bench decoding statistics", trtllm_bench.is_bench, trtllm_bench.parse),
               ("benchmark block without counts", bench_summary.is_bench_load, bench_summary.parse_bench_means),
               ("vLLM throughput lines without speculation", vllm_log.is_throughput_log, vllm_log.parse_throughput),
               ("SGLang MT-bench summary", bench_summary.is_mtbench, bench_summary.parse_mtbench),
               ("SGLang send_one.py output", bench_summary.is_send_one, bench_summary.parse_send_one))


def read_reported(source, *, temperature: float | None = None, model: str | None = None,
                  check=None) -> EngineRun | MeanRun:
    """An EngineRun where the output carries counts (as read_engine_run); else a MeanRun where it carries only
    means and load (one text); else read_engine_run's refusal."""
    try:
        return read_engine_run(source, temperature=temperature, model=model, check=check)
    except ValueError as refusal:
        texts = _texts_or_none(source)
        if texts is None or len(texts) != 1:
            raise
        cleaned, removed = _cleaned(texts)
        text = cleaned[0][1]
        for _, test, parse in MEANS_KINDS:
            if test(text):
                try:
                    return parse(text, check).with_notes(*removed)
                except ValueError as error:
                    raise unreadable(texts[0][0], error) from refusal
        results = [obj for _, obj in _json_or_none(text) if vllm_bench.is_result(obj)] if looks_like_json(text) else []
        if results:
            parts = [MeanRun(source=vllm_bench.SOURCE, load=vllm_bench.load_of(r)) for r in results]
            note = (f"{len(results)} vllm bench serve results" if len(results) > 1 else "a vllm bench serve result") \
                + " with no spec_decode_ keys (speculation off?): load and output tokens/s only"
            if len(parts) == 1:
                return replace(parts[0], notes=(note,)).with_notes(*removed)
            return MeanRun(source=vllm_bench.SOURCE, series=parts, notes=(note,)).with_notes(*removed)
        raise


def _texts_or_none(source):
    try:
        return load_texts(source)
    except ValueError:
        return None


def _json_or_none(text: str):
    try:
        return json_records(text)
    except ValueError:
        return []


def unreadable(name: str, error: Exception) -> ValueError:
    listed = "\n".join(f"  - {f}" for f in FORMATS)
    return ValueError(f"could not read {name} as an engine run: {error}\nAccepted formats:\n{listed}")


def with_temperature(run: EngineRun, temperature: float | None) -> EngineRun:
    if temperature is None:
        return run
    if run.temperature is not None and abs(run.temperature - temperature) > 1e-9:
        raise ValueError(f"the run reports temperature {run.temperature}, not the {temperature} given")
    return replace(run, temperature=float(temperature)).with_notes(
        "" if run.temperature is not None else f"temperature {temperature} as given (the source does not say)")


def load_texts(source) -> list[tuple[str, str]]:
    """(name, text) for each input: a text, bytes, a path, or a list of paths or texts."""
    items = list(source) if isinstance(source, (list, tuple)) else [source]
    if not items:
        raise ValueError("no input given: pass a text, a file path or a list of paths")
    return [_load(item, i) for i, item in enumerate(items, 1)]


def _load(item, i: int) -> tuple[str, str]:
    name = f"input {i}"
    if isinstance(item, Path) or (isinstance(item, str) and "\n" not in item and len(item) < 4096
                                  and os.path.isfile(item)):
        path = Path(item)
        if not path.is_file():
            raise ValueError(f"{path}: no such file")
        if path.stat().st_size > MAX_BYTES:
            raise ValueError(f"{path} is {path.stat().st_size / 2**20:.0f} MiB; at most {MAX_BYTES // 2**20} MiB")
        name, item = str(path), path.read_bytes()
    if isinstance(item, (bytes, bytearray)):
        if b"\0" in item:
            raise ValueError(f"{name} is binary data (it holds NUL bytes), not an engine's text output")
        try:
            item = bytes(item).decode("utf-8")
        except UnicodeDecodeError as error:
            raise ValueError(f"{name} is not UTF-8 text (byte {error.start}): a binary file?") from error
    if not isinstance(item, str):
        raise ValueError(f"{name}: expected a text, bytes or a path, got {type(item).__name__}")
    if "\0" in item:
        raise ValueError(f"{name} holds NUL characters: binary data, not an engine's text output")
    if not item.strip():
        raise ValueError(f"{name} is empty")
    return name, item


LOG_PREFIX = re.compile(r"\[[^\]\"{}]{1,64}\] ")  # "[53409] ", "[2025-10-22 10:27:57 TP0] ": a log line, not JSON


def detect_format(text: str) -> str:
    """The format's key: "json", "prometheus", or one of the log formats' names."""
    first = next((line.strip() for line in text.splitlines()[:1000] if line.strip()), "")[:200]
    if looks_like_json(text) and not LOG_PREFIX.match(first):
        return "json"
    if prometheus.is_scrape(text):
        return "prometheus"
    found = [name for name, test, _ in LOG_KINDS if test(text)]
    if len(found) > 1:
        raise ValueError(f"two formats mixed in one text ({' and '.join(found)})")
    if not found:
        raise ValueError(nearest(text))
    return found[0]


def _parse(kind: str, texts: list[str], model: str | None, check=None) -> EngineRun:
    if kind == "prometheus":
        return prometheus.parse(texts, model, check)
    parse = _parse_json if kind == "json" else next(p for name, _, p in LOG_KINDS if name == kind)
    runs = []
    for text in texts:
        if check is not None:
            check()
        runs.append(parse(text, check))
    return runs[0] if len(runs) == 1 else total(runs, runs[0].source).with_notes(f"{len(runs)} files summed")


# an engine's statistics object pasted on its own, and the response that carries it: (a key only it has, wrapper)
BARE = (("num_spec_steps", lambda o: {"metrics": {"speculative_decoding": o}}, "vLLM per-request metrics object"),
        ("spec_verify_ct", lambda o: {"meta_info": o}, "SGLang meta_info object"),
        ("draft_n", lambda o: {"timings": o}, "llama.cpp timings object (jq .timings)"),
        ("numRequestsWithDraftTokens", lambda o: {"specDecodingStats": o}, "TensorRT-LLM specDecodingStats object"))
PLACEHOLDERS = ("[ ... ]", "{ ... }", "[...]", "{...}")  # how people shorten a response they paste
EMBEDDED = ('"speculative_decoding"', '"speculative_decoding_stats"', '"meta_info"', '"timings"')


def _parse_json(text: str, check=None) -> EngineRun:
    """The JSON kinds read a record in microseconds: ``check`` is called between texts only."""
    notes = []
    try:
        records = json_records(text)
    except ValueError:
        records = _embedded(text) if any(p in text for p in PLACEHOLDERS) else []
        if not records:
            raise
        notes.append("the JSON around the statistics does not parse (a paste with placeholders such as "
                     "[ ... ]?): only the statistics object was read")
    if records and specviz_trace.is_trace(records[0][1]):
        return specviz_trace.parse(text)
    records, bare = _wrapped(records)
    notes += bare
    if trtllm_bench.REPORT_KEY in text and not any(m.carries(obj) for _, obj in records for m in JSON_KINDS):
        refusal = trtllm_bench.report_refusal(text, records)
        if refusal is not None:
            raise ValueError(refusal)
    return _parse_records(records).with_notes(*notes)


def _wrapped(records):
    """Bare statistics objects inside the response that carries them, and a note saying so."""
    out, notes = [], set()
    for n, obj in records:
        found = next((b for b in BARE if b[0] in obj), None)
        if found is not None:
            obj = found[1](obj)
            notes.add(f"a bare {found[2]}, read as the response that carries it")
        out.append((n, obj))
    return out, sorted(notes)


def _embedded(text: str) -> list[tuple[int, dict]]:
    """The first statistics object in a text that is not whole JSON: the value after one of EMBEDDED keys,
    decoded on its own (linear: one decode from one position)."""
    decoder = json.JSONDecoder()
    for key in EMBEDDED:
        at = text.find(key + ":")
        brace = text.find("{", at) if at >= 0 else -1
        if brace < 0:
            continue
        try:
            obj, _ = decoder.raw_decode(text, brace)
        except (json.JSONDecodeError, RecursionError):
            continue
        if isinstance(obj, dict):
            line = text.count("\n", 0, brace) + 1
            wrap = {'"speculative_decoding"': lambda o: {"metrics": {"speculative_decoding": o}},
                    '"speculative_decoding_stats"': lambda o: {"choices": [{"speculative_decoding_stats": o}]},
                    '"meta_info"': lambda o: {"meta_info": o}, '"timings"': lambda o: {"timings": o}}[key]
            return [(line, wrap(obj))]
    return []


def _parse_records(records) -> EngineRun:
    kinds = {}
    for n, obj in records:
        for module in JSON_KINDS:
            if module.carries(obj):
                kinds.setdefault(module, n)
                break
    if len(kinds) > 1:
        raise ValueError("two formats mixed in one file: " + ", ".join(f"{m.SOURCE} (from line {n})"
                                                                       for m, n in kinds.items()))
    if not kinds:
        raise ValueError(f"{len(records)} JSON objects, none with speculative-decoding statistics (was the server "
                         "started with its per-request metrics on?)")
    (module,) = kinds
    return module.parse(records)
