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
The runs' notes say which llama.cpp the recording's README.md names, the meaning the timings are read with, and
whether each configuration's steps match its /metrics difference; k comes from the README's commands.

``read_llamacpp_load_zip`` reads the same from a zip of the folder (a path or bytes: an upload, a notebook's
download), in memory, refusing what is not a recording and what is unsafe to open (absolute or '..' entries, too
many entries or uncompressed bytes).

Also ``read_batched_bench``: the table ``llama-batched-bench`` prints (llama.cpp's batched decoding without a
server: B sequences of PP prompt tokens each, then TG steps of one token per sequence in one batch), as rows.
"""
from __future__ import annotations

import io
import json
import re
import zipfile
import zlib
from pathlib import Path

from . import prometheus
from .means import MeanRun
from .run import Load, check_k

SOURCE = "llama.cpp server under load (record_llamacpp_load.sh)"
WINDOWS = 4
FOLDER = re.compile(r"np(\d+)-(on|off)")
FILES = ("completions.jsonl", "metrics-before.txt", "metrics-after.txt")  # what is read of each configuration
README = "README.md"
VERSION = re.compile(r"llama\.cpp (version: [^\n]+?)\.?[ \t]*$", re.M)  # record_llamacpp_load.sh's README line
DRAFT_MAX = re.compile(r"--spec-draft-n-max (\d+)")
MEANING_COMMIT = "0c1e570"  # the llama.cpp commit whose timings and /metrics the reading was checked against
MAX_ZIP_MEMBERS = 1024  # a recording of 16 configurations holds under 100 entries
MAX_ZIP_BYTES = 64 * 2**20  # uncompressed, all entries together
EXPECTED = ("expected a zip of the folder scripts/measure/record_llamacpp_load.sh writes: np1-on/, np1-off/, "
            "np2-on/, ... each holding completions.jsonl, metrics-before.txt, metrics-after.txt and server.log")
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
    configs = {p.name: {name: (p / name).read_text(encoding="utf-8") for name in FILES if (p / name).is_file()}
               for p in root.iterdir() if p.is_dir() and FOLDER.fullmatch(p.name)}
    if not configs:
        raise ValueError(f"{root}: no np<N>-on / np<N>-off folders (a record_llamacpp_load.sh recording)")
    readme = root / README
    return recording_runs(configs, windows, readme.read_text(encoding="utf-8") if readme.is_file() else "", root)


def read_llamacpp_load_zip(source, windows: int = WINDOWS, max_members: int = MAX_ZIP_MEMBERS,
                           max_bytes: int = MAX_ZIP_BYTES) -> dict[str, MeanRun]:
    """``read_llamacpp_load`` on a zip of the recording's folder (a path or the zip's bytes), read in memory,
    nothing extracted. Refused (ValueError saying what was expected): not a zip; more than ``max_members`` entries
    or ``max_bytes`` uncompressed in all (a zip bomb); an entry with an absolute path or '..'; no np<N>-on /
    np<N>-off folder in it; np folders under two different folders (two recordings)."""
    configs, readme = zip_recording(source, max_members, max_bytes)
    return recording_runs(configs, windows, readme, "the zip")


def recording_runs(configs: dict[str, dict[str, str]], windows: int = WINDOWS, readme: str = "",
                   where="the recording") -> dict[str, MeanRun]:
    """The runs of a recording given as {configuration folder: {file name: text}} (``FILES`` of each, its
    README.md's text or ""): each configuration's spans; notes say how they were read, with the llama.cpp version
    the README names, k from its commands (``--spec-draft-n-max``), and each configuration's steps checked against
    its /metrics difference where both scrapes are there."""
    if windows < 1:
        raise ValueError(f"cut a run into at least one window, got {windows}")
    order = sorted((int(m[1]), m[2], name) for name in configs if (m := FOLDER.fullmatch(name)))
    if not order:
        raise ValueError(f"{where}: no np<N>-on / np<N>-off folders (a record_llamacpp_load.sh recording)")
    parts, checks = {"on": [], "off": []}, []
    for _, mode, name in order:
        files = configs[name]
        if "completions.jsonl" not in files:
            raise ValueError(f"{where}: {name}/completions.jsonl missing (every configuration's folder holds its "
                             "completions.jsonl)")
        requests = _parse_requests(files["completions.jsonl"], f"{where}: {name}/completions.jsonl", mode == "on")
        parts[mode] += [MeanRun(source=SOURCE, mean_length=length, load=load)
                        for load, length in spans(requests, windows)]
        if mode == "on":
            checks.append(steps_check(name, files, requests))
    note = (f"each configuration cut into {windows} spans of its wall time; load = requests in flight averaged over "
            "a span; mean length = 1 + accepted / steps, steps = predicted_n - draft_n_accepted - 1 a request")
    notes = (note, version_note(readme))
    k = recorded_k(readme)
    return {mode: MeanRun(source=SOURCE, series=runs, k=k if mode == "on" else None,
                          notes=notes + ((steps_note(checks),) if mode == "on" else ()))
            for mode, runs in parts.items() if runs}


def version_note(readme: str) -> str:
    """Which llama.cpp the recording names (its README.md), and the meaning its figures are read with."""
    found = VERSION.search(readme)
    named = (f"llama.cpp {found[1].strip()[:160]} (as the recording's README.md names it)" if found else
             "a llama.cpp build the recording does not name (no README.md with record_llamacpp_load.sh's version "
             "line)")
    return (f"read as {named}, with llama-server's response timings as of commit {MEANING_COMMIT} "
            "(tools/server/server-common.cpp): predicted_n tokens generated, draft_n_accepted drafts accepted, "
            "verify steps not reported")


def recorded_k(readme: str) -> int | None:
    """k as the recording's commands ran it (--spec-draft-n-max N, one N throughout), else None."""
    found = {int(n) for n in DRAFT_MAX.findall(readme)}
    return check_k(found.pop(), "--spec-draft-n-max in README.md") if len(found) == 1 else None


def steps_check(name: str, files: dict[str, str], requests: list[dict]) -> tuple[str, int, int | None]:
    """(configuration, steps the responses imply, steps /metrics counted between its scrapes or None)."""
    implied = sum(r["steps"] for r in requests)
    if not {"metrics-before.txt", "metrics-after.txt"} <= set(files):
        return name, implied, None
    try:
        counted = prometheus.parse([files["metrics-before.txt"], files["metrics-after.txt"]]).steps
    except ValueError:
        return name, implied, None
    return name, implied, counted


def steps_note(checks: list[tuple[str, int, int | None]]) -> str:
    """What the /metrics check says of the steps derived from the responses."""
    done = [(name, implied, counted) for name, implied, counted in checks if counted is not None]
    wrong = [f"{name} ({implied} from the responses, {counted} in /metrics)" for name, implied, counted in done
             if implied != counted]
    if not done:
        return "steps not checked: no configuration holds both /metrics scrapes (metrics-before.txt, -after.txt)"
    if wrong:
        return ("the steps derived from the responses differ from /metrics' llamacpp:spec_decode_num_drafts in "
                + "; ".join(wrong) + ": this build counts otherwise, so the mean lengths may be off")
    return (f"the steps derived from the responses equal /metrics' llamacpp:spec_decode_num_drafts between the "
            f"scrapes in {len(done)} of {len(checks)} configurations with speculation on")


def zip_recording(source, max_members: int = MAX_ZIP_MEMBERS,
                  max_bytes: int = MAX_ZIP_BYTES) -> tuple[dict[str, dict[str, str]], str]:
    """({configuration folder: {file name: text}}, README.md's text or "") of a zipped recording, checked
    (``read_llamacpp_load_zip``)."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(source) if isinstance(source, (bytes, bytearray)) else source)
    except (zipfile.BadZipFile, OSError, EOFError):
        raise ValueError(f"not a zip file: {EXPECTED}") from None
    with archive:
        infos = archive.infolist()
        if len(infos) > max_members:
            raise ValueError(f"the zip holds {len(infos):,} entries; at most {max_members:,} ({EXPECTED})")
        for info in infos:
            _check_member(info.filename)
        size = sum(info.file_size for info in infos)
        if size > max_bytes:
            raise ValueError(f"the zip unpacks to {size / 2**20:.1f} MiB; at most {max_bytes / 2**20:.0f} MiB "
                             f"({EXPECTED})")
        wanted, readme = _recording_members(infos)
        configs: dict[str, dict[str, str]] = {}
        for (config, name), info in wanted.items():
            configs.setdefault(config, {})
            if name:
                configs[config][name] = _member_text(archive, info)
        return configs, _member_text(archive, readme) if readme is not None else ""


def _check_member(name: str) -> None:
    parts = re.split(r"[\\/]", name)
    if name.startswith(("/", "\\")) or re.match(r"[A-Za-z]:", name) or ".." in parts:
        raise ValueError(f"the zip holds an entry with an absolute path or '..' ({name[:60]!r}): refused; "
                         f"{EXPECTED}")


def _recording_members(infos) -> tuple[dict[tuple[str, str], zipfile.ZipInfo], zipfile.ZipInfo | None]:
    """{(configuration folder, file name to read or "" for another entry in it): entry} and the README.md beside
    the folders; one folder of np folders, or ValueError."""
    wanted, tops = {}, set()
    for info in infos:
        parts = [p for p in info.filename.split("/") if p]
        if not parts or parts[0] == "__MACOSX":
            continue
        if info.is_dir() and FOLDER.fullmatch(parts[-1]):
            key, top = (parts[-1], ""), tuple(parts[:-1])
        elif len(parts) >= 2 and FOLDER.fullmatch(parts[-2]):  # a file read, or one that shows the folder
            key, top = (parts[-2], parts[-1] if parts[-1] in FILES else ""), tuple(parts[:-2])
        else:
            continue
        if key in wanted and key[1]:
            raise ValueError(f"the zip holds {key[0]}/{key[1]} twice: zip one recording ({EXPECTED})")
        wanted[key], tops = info, tops | {top}
    if not wanted:
        raise ValueError(f"not a llama.cpp load recording: the zip holds no np<N>-on / np<N>-off folders; {EXPECTED}")
    if len(tops) > 1:
        raise ValueError(f"the zip holds np folders under {len(tops)} different folders: zip one recording")
    readme = "/".join((*tops.pop(), README))
    return wanted, next((i for i in infos if i.filename == readme), None)


def _member_text(archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> str:
    """An entry's text, read no further than its declared size (UTF-8), or ValueError naming it."""
    shown = info.filename[-80:]
    try:
        with archive.open(info) as member:
            data = member.read(info.file_size + 1)
    except (zipfile.BadZipFile, RuntimeError, NotImplementedError, OSError, EOFError, zlib.error) as error:
        raise ValueError(f"the zip's {shown!r} could not be read ({type(error).__name__}): zip the recording "
                         "again, without a password") from None
    if len(data) > info.file_size:
        raise ValueError(f"the zip's {shown!r} holds more than its declared size: refused")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"the zip's {shown!r} is not UTF-8 text") from None


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
    verify steps, checked, from a completions.jsonl file."""
    if not path.exists():
        raise ValueError(f"{path}: missing (every configuration's folder holds its completions.jsonl)")
    return _parse_requests(path.read_text(encoding="utf-8"), str(path), speculating)


def _parse_requests(text: str, where: str, speculating: bool) -> list[dict]:
    """``_requests`` of a completions.jsonl's text, ``where`` naming it in messages."""
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            start, end, t = float(row["start"]), float(row["end"]), row["timings"]
            tokens, prompt_s = int(t["predicted_n"]), float(t["prompt_ms"]) / 1e3
            accepted = int(t["draft_n_accepted"]) if speculating else None
        except (ValueError, KeyError, TypeError) as error:
            raise ValueError(f"{where} line {n}: not a recorded request (needs start, end, timings.predicted_n, "
                             "timings.prompt_ms and, speculating, timings.draft_n_accepted): "
                             f"{type(error).__name__} {error}") from None
        if not 0 <= start <= end or tokens < 0 or prompt_s < 0:
            raise ValueError(f"{where} line {n}: start {start}, end {end}, {tokens} tokens: not a request's span")
        steps = tokens - accepted - 1 if speculating else None
        if speculating and not 0 <= accepted <= steps * 64:
            raise ValueError(f"{where} line {n}: {accepted} drafts accepted in {tokens} tokens: not a recorded request")
        out.append(dict(start=start, end=end, decode=min(start + prompt_s, end), tokens=tokens, accepted=accepted,
                        steps=steps))
    if not out:
        raise ValueError(f"{where}: no requests")
    return out

