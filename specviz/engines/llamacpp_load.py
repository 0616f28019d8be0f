"""llama-server under load as ``scripts/measure/record_llamacpp_load.sh`` records it, read as the load doctor's runs.

A recording is a folder of configurations ``np{N}-on`` / ``np{N}-off`` (-np N slots, N clients, speculation on or
off), each holding ``completions.jsonl`` (per request: client, index, start and end in seconds since the first
request, the response's ``timings``) and ``metrics-before.txt`` / ``metrics-after.txt`` (/metrics scraped around
the clients). llama-server prints no load beside its figures, so a configuration's run is cut into ``WINDOWS``
equal spans of its wall time, as an engine's logging intervals cut a served run; in each span:
  the load: requests in flight, averaged over the span and rounded (vLLM's 'Running: N reqs' of the span);
  tokens/s: tokens generated in the span over its length, each request's predicted_n spread evenly over its
  decode (from start + prompt_ms to end);
  speculation on: the span's mean acceptance length, 1 + accepted / verify steps, each request's spread as its
  tokens are. A response counts its accepted drafts (timings.draft_n_accepted) but not its steps: the first token
  comes from the prompt's pass and each verify step emits its accepted drafts + 1, so steps = predicted_n -
  draft_n_accepted - 1 (summed over a configuration, the /metrics difference's llamacpp:spec_decode_num_drafts).

Also ``read_batched_bench``: the table ``llama-batched-bench`` prints (llama.cpp's batched decoding without a
server: B sequences of PP prompt tokens each, then TG steps of one token per sequence in one batch), as rows.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from .means import MeanRun
from .run import Load

SOURCE = "llama.cpp server under load (record_llamacpp_load.sh)"
WINDOWS = 4
FOLDER = re.compile(r"np(\d+)-(on|off)")
BENCH_COLUMNS = ("PP", "TG", "B", "N_KV", "T_PP s", "S_PP t/s", "T_TG s", "S_TG t/s", "T s", "S t/s")
BENCH_KEYS = ("pp", "tg", "batch", "n_kv", "t_pp", "s_pp", "t_tg", "s_tg", "t", "s")


def read_batched_bench(text: str) -> list[dict]:
    """The rows of llama-batched-bench's Markdown table, each {pp, tg, batch, n_kv: int; t_pp, s_pp, t_tg, s_tg,
    t, s: float} (s_tg: B * TG / T_TG, tokens/s of decoding with the prompt excluded). ValueError when the text holds
    no such table or a row does not add up (S_TG must be B * TG / T_TG to the table's rounding)."""
    lines = [line.strip() for line in text.splitlines() if line.strip().startswith("|")]
    head = next((i for i, line in enumerate(lines) if tuple(c.strip() for c in line.strip("|").split("|"))
                 == BENCH_COLUMNS), None)
    if head is None:
        raise ValueError("no llama-batched-bench table (a header | PP | TG | B | N_KV | ... | S t/s |) in the text")
    rows = []
    for line in lines[head + 2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        try:
            values = [int(c) for c in cells[:4]] + [float(c) for c in cells[4:]]
        except ValueError:
            raise ValueError(f"not a llama-batched-bench row: {line!r}") from None
        if len(values) != len(BENCH_KEYS):
            raise ValueError(f"a llama-batched-bench row has {len(BENCH_KEYS)} cells, got {len(values)}: {line!r}")
        row = dict(zip(BENCH_KEYS, values))
        if row["t_tg"] <= 0 or abs(row["batch"] * row["tg"] / row["t_tg"] - row["s_tg"]) > 0.01 * row["s_tg"] + 0.01:
            raise ValueError(f"S_TG {row['s_tg']} is not B x TG / T_TG ({row['batch']} x {row['tg']} / "
                             f"{row['t_tg']}): {line!r}")
        rows.append(row)
    if not rows:
        raise ValueError("the llama-batched-bench table has no rows (every batch skipped: raise -c to B x (PP + TG))")
    return rows


def read_llamacpp_load(folder, windows: int = WINDOWS) -> dict[str, MeanRun]:
    """{"on": ..., "off": ...}: per speculation mode, one MeanRun whose series holds every configuration's spans
    (``load_doctor.diagnose_load`` takes the dict as it is). ValueError naming what is missing or malformed."""
    root = Path(folder)
    configs = sorted((int(m[1]), m[2], p) for p in root.iterdir() if p.is_dir() and (m := FOLDER.fullmatch(p.name)))
    if not configs:
        raise ValueError(f"{root}: no np<N>-on / np<N>-off folders (a record_llamacpp_load.sh recording)")
    if windows < 1:
        raise ValueError(f"cut a run into at least one window, got {windows}")
    parts = {"on": [], "off": []}
    for slots, mode, path in configs:
        requests = _requests(path / "completions.jsonl", speculating=mode == "on")
        parts[mode] += [MeanRun(source=SOURCE, mean_length=length, load=load)
                        for load, length in spans(requests, windows)]
    note = (f"each configuration cut into {windows} spans of its wall time; load = requests in flight averaged over "
            "a span; mean length = 1 + accepted / steps, steps = predicted_n - draft_n_accepted - 1 a request")
    return {mode: MeanRun(source=SOURCE, series=runs, notes=(note,)) for mode, runs in parts.items() if runs}


def spans(requests: list[dict], windows: int) -> list[tuple[Load, float | None]]:
    """The run's wall time cut into ``windows`` equal spans: each span's load (requests in flight, mean, rounded;
    tokens generated per second) and mean acceptance length (None without speculation or without a step in it)."""
    first, last = min(r["start"] for r in requests), max(r["end"] for r in requests)
    width = (last - first) / windows
    if width <= 0:
        raise ValueError("the requests' start and end times span no time")
    out = []
    for i in range(windows):
        lo, hi = first + i * width, first + (i + 1) * width
        flight = sum(_overlap(r["start"], r["end"], lo, hi) for r in requests) / width
        share = [_overlap(r["decode"], r["end"], lo, hi) / max(r["end"] - r["decode"], 1e-9) for r in requests]
        tokens, accepted, steps = (sum(r[key] * s for r, s in zip(requests, share)) if requests[0][key] is not None
                                   else None for key in ("tokens", "accepted", "steps"))
        length = 1 + accepted / steps if steps else None
        out.append((Load(running=round(flight), gen_tps=tokens / width), length))
    return out


def _overlap(a: float, b: float, lo: float, hi: float) -> float:
    return max(0.0, min(b, hi) - max(a, lo))


def _requests(path: Path, speculating: bool) -> list[dict]:
    """Each request's start, decode start, end (seconds), tokens generated and (speculating) accepted drafts and
    verify steps, checked."""
    if not path.exists():
        raise ValueError(f"{path}: missing (every configuration's folder holds its completions.jsonl)")
    out = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            start, end, t = float(row["start"]), float(row["end"]), row["timings"]
            tokens, prompt_s = int(t["predicted_n"]), float(t["prompt_ms"]) / 1e3
            accepted = int(t["draft_n_accepted"]) if speculating else None
        except (ValueError, KeyError, TypeError) as error:
            raise ValueError(f"{path} line {n}: not a recorded request (needs start, end, timings.predicted_n, "
                             "timings.prompt_ms and, speculating, timings.draft_n_accepted): "
                             f"{type(error).__name__} {error}") from None
        if not 0 <= start <= end or tokens < 0 or prompt_s < 0:
            raise ValueError(f"{path} line {n}: start {start}, end {end}, {tokens} tokens: not a request's span")
        steps = tokens - accepted - 1 if speculating else None
        if speculating and not 0 <= accepted <= steps * 64:
            raise ValueError(f"{path} line {n}: {accepted} drafts accepted in {tokens} tokens: not a recorded request")
        out.append(dict(start=start, end=end, decode=min(start + prompt_s, end), tokens=tokens, accepted=accepted,
                        steps=steps))
    if not out:
        raise ValueError(f"{path}: no requests")
    return out

