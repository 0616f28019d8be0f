"""What the "Your engine" tab reads, below the tab: pasted text (several runs split by '--- label' lines) and
uploaded files as labelled EngineRuns, or MeanRuns where an input gives means and no counts (grouped into runs,
temperatures filled in; a zipped llama.cpp load recording as its runs with speculation on and off), the cost model
from one of three sources, and a specviz run to put beside them. Inputs are held to the trace import's size limit
(a recording's entries, uncompressed, to four times it); every error is a ValueError that says what to change (the
library's, with the uploaded files' temporary paths shown as their names)."""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path

from ..config import EXAMPLE_PROMPTS
from ..decoder import speculative_generate
from ..engines import CostModel, EngineRun, MeanRun, cost_from_llama_bench, parse_verify, read_reported, total
from ..engines.llamacpp_load import read_llamacpp_load_zip
from ..engines.read import with_temperature
from ..engines.run import check_k
from ..engines.specviz_trace import trace_run
from ..labs import hardware
from ..trace import MAX_TRACE_BYTES
from .budget import Budget, token_seconds
from .forms import as_int, encode, make_config, number_in
from .runs import import_trace
from .store import ModelStore
from .tempfiles import discard

ONE_RUN, PER_FILE, PER_TEMPERATURE = ("one run (the parts of a log, two scrapes)", "one run per file or pasted part",
                                      "one run per temperature")
GROUPINGS = (ONE_RUN, PER_FILE, PER_TEMPERATURE)
TYPED, BENCH, MEASURE = "typed c and v", "llama-bench output", "measure here"
COSTS = (TYPED, BENCH, MEASURE)
MAX_FILES = 32
MAX_FIELD_CHARS = 2000  # the temperatures and v boxes: 64 numbers or rows:cost points fit in a few hundred
PASTED = "the pasted text"
SEPARATOR = re.compile(r"^---(?:[ \t][^\r\n]*)?\r?$", re.M)  # '---' or '--- label' alone on a line: another run
MAX_LABEL = 80  # characters of a run's label
MAX_RECORDING_ENTRIES = 256  # a zipped llama.cpp load recording: 16 configurations hold under 100 entries
MAX_RECORDING_BYTES = 4 * MAX_TRACE_BYTES  # its entries uncompressed, all together (the zip itself: MAX_TRACE_BYTES)


def file_paths(files) -> list[str]:
    """gradio's upload value (None, one path, a list of paths or of file objects) as paths."""
    if not files:
        return []
    items = files if isinstance(files, (list, tuple)) else [files]
    return [str(getattr(f, "name", f)) for f in items]


@dataclass(frozen=True)
class Input:
    """One thing to read: a pasted part or an uploaded file, with what a message calls it and what the user
    called it (a '--- label' line above a pasted part; None where not labelled)."""
    name: str
    data: bytes
    label: str | None = None
    pasted: bool = False


def pasted_parts(text: str) -> list[tuple[str | None, str]]:
    """(label, text) of each run pasted, split at the lines '---' or '--- label'; a paste without such a line is one
    part; an empty part without a label is dropped, a labelled one is an error (it names a run it does not hold)."""
    cuts = list(SEPARATOR.finditer(text))
    starts = [(None, 0)] + [(m.group(0)[3:].strip() or None, m.end()) for m in cuts]
    ends = [m.start() for m in cuts] + [len(text)]
    parts = []
    for (label, start), end in zip(starts, ends):
        if label is not None and len(label) > MAX_LABEL:
            raise ValueError(f"the label {label[:40]!r}... is {len(label)} characters long; at most {MAX_LABEL}")
        if text[start:end].strip():
            parts.append((label, text[start:end]))
        elif label is not None:
            raise ValueError(f"the run labelled {label!r} is empty: paste its output under its '--- {label}' line")
    return parts


def inputs(text, files) -> list[Input]:
    """What to read, after the size checks (each upload, the paste, and all together at most the trace import's
    limit): the pasted text's parts (``pasted_parts``), then each upload, named by its file name."""
    paths = file_paths(files)
    if len(paths) > MAX_FILES:
        raise ValueError(f"{len(paths)} files: at most {MAX_FILES} at once")
    text = str(text or "") if str(text or "").strip() else ""
    try:
        sizes = ([(PASTED, len(text.encode("utf-8")))] if text else []) + [(Path(p).name, size_of(p)) for p in paths]
        if not sizes:
            raise ValueError("nothing to read: paste a log excerpt, a /metrics scrape or JSON responses, or upload "
                             "files (a llama.cpp load recording as a .zip of its folder)")
        for name, size in sizes + [("all the inputs together", sum(size for _, size in sizes))]:
            if size > MAX_TRACE_BYTES:
                raise ValueError(f"{name} is {size / 2**20:.1f} MiB; at most {MAX_TRACE_BYTES / 2**20:.0f} MiB (the "
                                 "trace import's limit): paste an excerpt, or the scrapes around the interval you want")
        parts = pasted_parts(text) if text else []
        out = [Input(PASTED if len(parts) == 1 else f"pasted run {i}", part.encode("utf-8"), label, pasted=True)
               for i, (label, part) in enumerate(parts, 1)]
        return out + [Input(Path(path).name, read_upload(path)) for path in paths]
    finally:
        for path in paths:  # read or refused, an upload is not kept
            discard(path)


def read_upload(path) -> bytes:
    """An upload's bytes (the caller deletes the file once read: a public server keeps no upload)."""
    try:
        return Path(path).read_bytes()
    except OSError as error:
        raise ValueError(f"could not read the upload {Path(path).name}: {error.strerror} (uploads are deleted once "
                         "read: upload it again)") from None


def size_of(item) -> int:
    if isinstance(item, bytes):
        return len(item)
    try:
        return Path(item).stat().st_size
    except OSError as error:
        raise ValueError(f"could not read the upload {Path(item).name}: {error.strerror} (uploads are deleted once "
                         "read: upload it again)") from None


def renamed(error: Exception, names: dict[str, str]) -> ValueError:
    message = str(error)
    for raw, shown in sorted(names.items(), key=lambda item: -len(item[0])):
        message = message.replace(raw, shown)
    return ValueError(message)


def short_field(value, what: str) -> str:
    """A text box's value, at most MAX_FIELD_CHARS characters."""
    text = str(value or "")
    if len(text) > MAX_FIELD_CHARS:
        raise ValueError(f"{what} is {len(text):,} characters long; at most {MAX_FIELD_CHARS:,}")
    return text


def read_runs(text, files, grouping: str, temperatures: str = "", check=None, k=None) -> list[tuple[str, EngineRun]]:
    """(label, EngineRun) of each run read from the inputs (``inputs``): all as one run, one per input, or the
    inputs' runs summed per temperature (and format); a paste split into parts by '---' lines is one run per part
    whatever the grouping (the grouping then says how the uploads go). Then the typed temperatures filled in where
    the formats do not say (one for all runs, or one each), and the typed ``k`` where a run does not print its own
    (``typed_k``). An uploaded zip is a llama.cpp load recording (``recording_runs``): its runs with speculation on
    and off, after the others, whatever the grouping. Labels: the user's, else the file's name or the pasted part's
    (a recording's: its zip's name and the mode); a lone unlabelled run is called by its format. ``check()`` between
    inputs, log lines and scrapes (the request's budget)."""
    temperatures = short_field(temperatures, "the temperatures box")
    if grouping not in GROUPINGS:
        raise ValueError(f"grouping must be one of {GROUPINGS}, got {grouping!r}")
    parts = inputs(text, files)
    zips = [p for p in parts if not p.pasted and is_zip(p.data)]
    parts = [p for p in parts if p.pasted or not is_zip(p.data)]
    pasted, uploads = [p for p in parts if p.pasted], [p for p in parts if not p.pasted]
    split = len(pasted) > 1 or any(p.label for p in pasted)
    if grouping == ONE_RUN:
        groups = [[p] for p in pasted] + ([uploads] if uploads else []) if split else [parts]
    else:
        groups = [[p] for p in parts]
    named = [(group[0].label or group[0].name if len(group) == 1 else None, read_group(group, check))
             for group in groups if group]
    if grouping == PER_TEMPERATURE:
        named = by_temperature(named)
    recorded = [pair for part in zips for pair in recording_runs(part, check)]
    named += recorded
    runs = typed_k(typed_temperatures([run for _, run in named], temperatures), k)
    typed = {p.label for p in parts if p.label} | {label for label, _ in recorded}
    return list(zip(run_labels([(label, run) for (label, _), run in zip(named, runs)], typed), runs))


def is_zip(data: bytes) -> bool:
    """A zip archive's first bytes (a local file header, or the end record of an empty zip)."""
    return data[:4] in (b"PK\x03\x04", b"PK\x05\x06")


def recording_runs(part: Input, check=None) -> list[tuple[str, MeanRun]]:
    """A zipped llama.cpp load recording (``record_llamacpp_load.sh``'s folder): its runs with speculation on and
    off, labelled by the upload's name; a zip that is not one refused naming the upload."""
    if check is not None:
        check()
    try:
        runs = read_llamacpp_load_zip(part.data, max_members=MAX_RECORDING_ENTRIES, max_bytes=MAX_RECORDING_BYTES)
    except ValueError as error:
        raise ValueError(f"{part.name}: {error}") from None
    return [(f"{part.name}: speculation {mode}", run) for mode, run in runs.items()]


def read_group(group: list[Input], check=None) -> EngineRun | MeanRun:
    """One run from the inputs of a group (several: the parts of one log, two scrapes), a refusal naming them; a
    lone input that carries means and no counts (SGLang's Decode batch lines, trtllm-bench) as a MeanRun."""
    names = {f"input {i}": part.name for i, part in enumerate(group, 1)}
    try:
        return read_reported([p.data for p in group] if len(group) > 1 else group[0].data, check=check)
    except ValueError as error:
        raise renamed(error, names) from None


def run_labels(named: list[tuple[str | None, EngineRun]], typed: set[str]) -> list[str]:
    """What the charts and tables call each run: a lone run its ``typed`` label or its format; several 'run i: '
    (the doctor's findings across runs say 'run i') and the label, or the format and temperature."""
    if len(named) == 1:
        label, run = named[0]
        return [label if label in typed else run.source]
    return [f"run {i}: " + (label or r.source + (f", T = {t:g}" if (t := getattr(r, "temperature", None)) is not None
                                                  else "")) for i, (label, r) in enumerate(named, 1)]


def by_temperature(named: list[tuple[str | None, EngineRun]]) -> list[tuple[str | None, EngineRun]]:
    """Runs of one format and temperature summed, in the order first met (a temperature not reported: one group);
    a run summed from several inputs loses their labels (the format and temperature name it); a run of means stays
    alone (means without counts cannot be summed)."""
    groups: dict[tuple, list[tuple[str | None, EngineRun]]] = {}
    for i, (label, run) in enumerate(named):
        key = (("means", i) if isinstance(run, MeanRun) else
               (run.source, None if run.temperature is None else round(run.temperature, 3)))
        groups.setdefault(key, []).append((label, run))
    return [g[0] if len(g) == 1 else (None, total([r for _, r in g], g[0][1].source).with_notes(
        f"{len(g)} inputs summed (same format and temperature)")) for g in groups.values()]


def typed_temperatures(runs: list[EngineRun], text: str) -> list[EngineRun]:
    if not str(text or "").strip():
        return runs
    try:
        values = [float(v) for v in str(text).replace(" ", "").split(",") if v]
    except ValueError:
        raise ValueError(f"temperatures must be numbers separated by commas, got {text!r}") from None
    if len(values) == 1:
        values *= len(runs)
    if len(values) != len(runs):
        raise ValueError(f"{len(values)} temperatures for {len(runs)} runs: give one for all, or one per run")
    values = [number_in(t, "temperature", 0, 100) for t in values]
    return [run.with_notes(f"the temperature typed ({t:g}) is not kept: a run of means carries none")
            if isinstance(run, MeanRun) else with_temperature(run, t) for run, t in zip(runs, values)]


def typed_k(runs: list[EngineRun], k) -> list[EngineRun]:
    """``k`` (None, blank or 0: none typed) filled in where a run does not print its k, saying so; a run that prints its
    own k keeps it (it is what the engine ran), and where the typed k differs the run says the typed one was ignored."""
    if k is None or str(k).strip() in ("", "0", "0.0"):  # the field's empty value: an empty Number sends 0
        return runs
    k = check_k(as_int(k, "k"), "the k typed")
    return [replace(run, k=k).with_notes(f"k = {k} as typed (the input does not print it)") if run.k is None
            else run if run.k == k else run.with_notes(f"k = {run.k} as the input prints it: the {k} typed is ignored")
            for run in runs]


# -- the cost model ---------------------------------------------------------------------------------------------
def typed_cost(c, v) -> CostModel:
    return CostModel(c=number_in(c, "c (a draft step over a target forward)", 0, 100),
                     verify=parse_verify(short_field(v, "v") or "1"), source="typed")


def bench_cost(text, file, c) -> CostModel:
    """From pasted or uploaded llama-bench output; the typed c where it benched only the target."""
    path = file_paths(file)
    if path:
        try:
            if size_of(path[0]) > MAX_TRACE_BYTES:
                raise ValueError(f"the llama-bench file is over {MAX_TRACE_BYTES / 2**20:.0f} MiB: not llama-bench "
                                 "output")
            source, name = read_upload(path[0]), Path(path[0]).name
        finally:
            discard(path[0])
        return _bench_cost(source, c, {"input 1": name})
    return _bench_cost(str(text or "").encode("utf-8"), c, {"input 1": PASTED})


def _bench_cost(source: bytes, c, names: dict[str, str]) -> CostModel:
    if not source.strip():
        raise ValueError("paste llama-bench output (llama-bench -m TARGET.gguf -m DRAFT.gguf -p 1,2,4,8,16 -n 64, "
                         "its table, -o json or -o csv) or upload it, or pick another cost source")
    if len(source) > MAX_TRACE_BYTES:
        raise ValueError(f"the llama-bench output is over {MAX_TRACE_BYTES / 2**20:.0f} MiB")
    try:
        try:
            cost = cost_from_llama_bench(source)
        except ValueError as error:
            if "give c" not in str(error) or c is None or str(c).strip() == "":
                raise
            cost = cost_from_llama_bench(source, c=number_in(c, "c", 0, 100))
    except ValueError as error:
        raise renamed(error, names) from None
    return replace(cost, source=str(renamed(ValueError(cost.source), names)))


def measured_cost(store: ModelStore, target: str, draft: str, repeats: int = 5,
                  budget: Budget | None = None) -> hardware.Hardware:
    """The hardware lab on a pair from the store, refused up front when its pilot says it would overrun the
    request's budget (what the request has spent counted), checked between repeats."""
    budget = budget or Budget()
    model, tok, drafter = store.pair(target, draft)
    prompt = encode(tok, EXAMPLE_PROMPTS[0])[0].tolist()
    budget.refuse_over(budget.elapsed + hardware.pilot_seconds(model, prompt, repeats=repeats),
                       "measuring this machine's costs", "type c and v, or paste llama-bench output")
    return hardware.measure(model, drafter, prompt, repeats=repeats, check=budget.check)


# -- a specviz run beside the engine's -----------------------------------------------------------------------------
def imported_run(path) -> EngineRun:
    if file_paths(path) and Path(file_paths(path)[0]).stat().st_size > MAX_TRACE_BYTES:
        raise ValueError(f"the trace is over {MAX_TRACE_BYTES / 2**20:.0f} MiB: at most that much")
    trace, _ = import_trace(file_paths(path)[0] if file_paths(path) else None)
    return trace_run(trace)


def pair_run(store: ModelStore, target: str, draft: str, k, temperature, max_new, seed=0,
             budget: Budget | None = None) -> EngineRun:
    """The pair at this k and temperature over the example prompts, within the request's budget."""
    budget = budget or Budget()
    cfg = make_config(k, "fixed", temperature, 0, 1.0, max_new, seed)
    model, tok, drafter = store.pair(target, draft)
    prompts = [encode(tok, p) for p in EXAMPLE_PROMPTS]
    budget.refuse_over(budget.elapsed + len(prompts) * cfg.max_new_tokens * token_seconds(model, prompts[0], cfg),
                       f"running {target} + {draft} on {len(prompts)} prompts", "fewer new tokens")
    runs = []
    for ids in prompts:
        budget.check()
        runs.append(trace_run(speculative_generate(model, drafter, ids, cfg)))
    return total(runs, keep_series=False).with_notes(f"{len(runs)} example prompts summed")
