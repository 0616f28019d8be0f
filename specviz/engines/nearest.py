"""What a text that no reader takes looks closest to, which line says so, and what to paste instead.

Engines print figures that carry no counts (means, percentiles, speeds): such a text is refused, and the refusal
names the output it recognised and the output of the same engine that does carry counts.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .lines import counted, short_lines


@dataclass(frozen=True)
class Near:
    needles: tuple[str, ...]  # every one on one line
    name: str
    why: str  # what the line holds, and why it is not enough
    paste: str  # what to paste instead
    seen: Callable[[list[str]], str] | None = None  # what the lines themselves say, appended to ``why``


def decode_batch_means(lines) -> str:
    """What SGLang's Decode batch lines do say: their 'accept len' range and the most '#running-req' (the load)."""
    lengths, running = [], []
    for line in lines:
        if "Decode batch" not in line and not line.strip().startswith("accept len:"):
            continue
        for part in line.split(", "):
            name, sep, value = part.rpartition(": ")
            if sep and name.endswith("accept len"):
                lengths.append(_number(value))
            elif sep and name.endswith("#running-req"):
                running.append(_number(value))
    lengths = [x for x in lengths if x is not None]
    running = [x for x in running if x is not None]
    if not lengths:
        return ""
    spread = f"{min(lengths):.2f}" + (f" to {max(lengths):.2f}" if max(lengths) > min(lengths) else "")
    ones = sum(x == 1.0 for x in lengths)
    return (f"; here {counted(len(lengths), 'line')} with accept len {spread}"
            + (f" at up to {max(running):.0f} running requests" if running else "")
            + (f" ({'all' if ones == len(lengths) else ones} at 1.00: one token a verify step, so no draft token was "
               "accepted, or the server was not drafting then: adaptive speculation turns it off above a batch size)"
               if ones else ""))


def token_zero(lines) -> str:
    """Which version of vLLM's example summary: 'acceptance at token 0' of 1.00 is early 2025's eagle.py, whose
    position 0 is the token every step emits (its drafts are positions 1 and on)."""
    for line in lines:
        name, sep, value = line.strip().partition(":")
        if sep and name.strip() == "acceptance at token 0":
            if _number(value) == 1.0:
                return ("; its 'acceptance at token 0' is 1.00: the eagle.py of early 2025, where position 0 is the "
                        "token every step emits and the mean length counts it, so its drafts are positions 1 and on")
            return ""
    return ""


def running_counters(lines) -> str:
    """Later adaptive-depth lines also print running totals (cur_accepted=, cur_generated=): said, not read."""
    last = next((line for line in reversed(lines) if "cur_accepted=" in line and "cur_generated=" in line), "")
    if not last:
        return ""
    fields = dict(part.split("=", 1) for part in last.replace(",", " ").replace(")", " ").split() if "=" in part)
    return (f"; these lines also print running totals (last: cur_accepted={fields.get('cur_accepted')}, "
            f"cur_generated={fields.get('cur_generated')}) whose start (the request, the slot or the server) the "
            "line does not state, so they are not read as the run's counts")


NEAR = (
    Near(("Decode batch", "accept len"), "SGLang 'Decode batch' log lines",
         "they print 'accept len' (tokens per verify step, bonus included) and 'accept rate' (whose meaning changed "
         "between releases: sglang#11572) over a logging interval, but no counts of steps or drafts",
         "the responses' meta_info (spec_verify_ct, spec_num_correct_drafts, ...) or bench_serving's "
         "'Speculative Decoding' section with Drafts, Draft tokens and Accepted tokens (read_reported keeps these "
         "lines' means and load as they are)", decode_batch_means),
    Near(("accept len:", "accept rate:"), "SGLang 'Decode batch' log lines' fields, pasted without the lines",
         "'accept len' is tokens per verify step (bonus included) and 'accept rate' a rate whose meaning changed "
         "between releases, both over a logging interval; no counts of steps or drafts, and without the line no load",
         "the responses' meta_info (spec_verify_ct, spec_num_correct_drafts, ...) (read_reported keeps these "
         "fields' means as they are)", decode_batch_means),
    Near(("acc_length=",), "SGLang's send_one.py output (python -m sglang.test.send_one)",
         "'acc_length' is one request's completion tokens / spec_verify_ct (bonus included), a mean, with no counts",
         "the request's meta_info (spec_verify_ct, spec_num_correct_drafts, ...) (read_reported keeps each "
         "acc_length and speed as printed)"),
    Near(("|", "Accept length"), "a Markdown table of SGLang bench_serving results",
         "its 'Accept length' row is the server's running mean of tokens per verify step (bonus included), read "
         "from /get_server_info, not counts and not scoped to the run; a table's columns are not read",
         "bench_serving's own output, with its 'Speculative Decoding' section (Drafts, Draft tokens, Accepted "
         "tokens) where the build prints one, or the responses' meta_info"),
    Near(("Decode batch", "#running-req"), "SGLang 'Decode batch' log lines without speculation",
         "they print the load (#running-req, #token, #queue-req) and gen throughput, but no 'accept len': the server "
         "was not speculating, or its build does not log it",
         "the log of a server started with --speculative-algorithm, whose Decode batch lines print 'accept len', or "
         "the responses' meta_info (read_reported keeps these lines' load and throughput as they are)"),
    Near(("Avg prompt throughput:", "Running:"), "vLLM throughput log lines without speculation",
         "they print the load (Running, Waiting, KV cache usage) and the generation throughput of each interval, "
         "but no 'SpecDecoding metrics' line: the server was not speculating, or the lines were left out",
         "the log of a server started with --speculative-config, whose 'SpecDecoding metrics:' lines follow these "
         "(read_reported keeps these lines' load and throughput as a run with speculation off)"),
    Near(("[AR]",), "TensorRT-LLM trtllm-bench 'Acceptance Rate Details'",
         "'[AR]' there is an acceptance LENGTH (output tokens per decoding iteration, bonus included), given as "
         "percentiles over requests, with no totals",
         "the responses with their per-choice speculative_decoding object (read_reported keeps these percentiles "
         "as printed)"),
    Near(("[AL]",), "TensorRT-LLM trtllm-bench 'Acceptance Length Details'",
         "percentiles over requests of the acceptance length (bonus included); '[DT]' draft tokens there are the "
         "configured maximum times the iterations, an upper bound; no totals",
         "the responses with their per-choice speculative_decoding object (read_reported keeps these percentiles "
         "as printed)"),
    Near(("Output throughput:", "token/s"), "SGLang's benchmark scripts' summary (benchmark/gsm8k, humaneval: "
         "Latency, Output throughput, Accept length)",
         "its 'Accept length' is a mean (tokens per verify step, bonus included; 1.000 where the server did not "
         "speculate) next to a speed, with no counts of drafts or steps",
         "the responses' meta_info (spec_verify_ct, spec_num_correct_drafts, ...), or bench_serving's 'Speculative "
         "Decoding' section with Drafts, Draft tokens and Accepted tokens"),
    Near(("Accept length:",), "SGLang bench_serving summary",
         "'Accept length' is the server's running mean (bonus included), not counts, and not scoped to this run",
         "a bench_serving build's 'Speculative Decoding' section with Drafts, Draft tokens and Accepted tokens, or "
         "the responses' meta_info"),
    Near(("Acceptance length:",), "an acceptance-length summary (SGLang's MT-bench script or bench_serving)",
         "it prints the mean acceptance length (completion tokens / verify steps) only, no counts",
         "the responses' meta_info (spec_verify_ct, spec_num_correct_drafts, ...)"),
    Near(("Generation:", "tokens-per-sec"), "MLX-LM generate's output",
         "it reports tokens and speed only: mlx_lm prints no drafted or accepted count",
         "a run with counts from another engine; MLX-LM's output carries none"),
    Near((" | ", "spec_decode_"), "a Prometheus UI table of vLLM's spec_decode counters",
         "the rows are 'series | value' as the Prometheus web UI shows them, not the /metrics text format",
         "the text of the server's /metrics endpoint (curl http://HOST:PORT/metrics), every spec_decode_ counter"),
    Near(("adaptive", "n_accepted="), "llama.cpp's adaptive draft-depth lines (spec accept: adaptive ...)",
         "each is printed only when the draft depth changes, so the rounds that kept it are missing: their n_draft "
         "and n_accepted do not sum to the run's counts",
         "the server log's per-task 'draft acceptance = ...' line, or its /metrics (llamacpp:spec_decode_*)",
         running_counters),
    Near(("#gen drafts",), "llama.cpp 'statistics' lines",
         "they are counters over the server's whole life, per drafter, not one run's",
         "the server log's per-task 'draft acceptance = ...' lines"),
    Near(("acceptance at token",), "vLLM's offline example summary (eagle.py, later spec_decode.py)",
         "it holds the mean acceptance length and the acceptance at each position, but not the num_drafts, "
         "num_draft_tokens and num_accepted_tokens lines that later builds print above them",
         "the whole summary of a spec_decode.py run, from total_num_output_tokens to the last position", token_zero),
    Near(("Mean acceptance length:",), "fields of vLLM's 'SpecDecoding metrics' line without its counts",
         "the means survive (Mean acceptance length = 1 + accepted / drafts, bonus included; Per-position acceptance "
         "rate = accepted at i / drafts) but not 'Accepted: N tokens, Drafted: M tokens', and no mean gives the "
         "number of drafts back",
         "the whole 'SpecDecoding metrics:' lines as the server printed them, or its /metrics (vllm:spec_decode_*)"),
)


def nearest(text: str) -> str:
    """'closest to NAME: WHY (line N: LINE). Paste instead: ...', or a message naming the first line."""
    lines = short_lines(text)
    for near in NEAR:
        for n, line in enumerate(lines, 1):
            if all(needle in line for needle in near.needles):
                seen = near.seen(lines) if near.seen is not None else ""
                return closest(near.name, near.why + seen, n, line, near.paste)
    first = next((line.strip() for line in lines if line.strip()), "")
    return (f"no line of a known format, closest to none (the first line: {first[:100]!r}); paste one of the "
            "formats below")


def closest(name: str, why: str, n: int, line: str, paste: str) -> str:
    """The refusal's one form: 'closest to NAME: WHY (line N: LINE). Paste instead: PASTE'."""
    shown = line.strip() if len(line.strip()) <= 120 else line.strip()[:117] + "..."
    return f"closest to {name}: {why} (line {n}: {shown!r}). Paste instead: {paste}"


def _number(value: str) -> float | None:
    try:
        return float(value.strip().rstrip(","))
    except ValueError:
        return None
