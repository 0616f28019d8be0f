"""A CostModel from llama-bench output (tools/llama-bench/llama-bench.cpp): its JSON (-o json), JSONL (-o jsonl),
CSV (-o csv) or markdown table (the default) of prompt tests (-p 1,2,4,8,16) and generation tests (-n 128).

Fields (test::get_fields): model_filename, model_type, model_size, model_n_params, n_prompt, n_gen, n_depth,
avg_ts (tokens per second), ...; the markdown printer shows model, size, params, test ("pp16", "tg128",
"pp512+tg128", " @ d512" for a depth) and t/s ("123.45 ± 1.23"). A pp n test runs n rows in one forward (n up to
the micro-batch), the time of a verify pass of n rows; a tg test times one-row forwards. So
  v(n) = (n / t/s of pp n) / (1 / t/s of tg) = n x tg t/s / pp n t/s,
and with two models benched, the smaller the draft: c = tg t/s of the target / tg t/s of the draft.
"""
from __future__ import annotations

import csv
import io
import json
import math
import re
from dataclasses import dataclass

from .cost import CostModel
from .lines import shown
from .read import load_texts
from .run import MAX_NAME

MAX_ROWS = 4096
TEST = re.compile(r"^(?:pp(\d+))?\+?(?:tg(\d+))?(?: @ d(\d+))?$")


@dataclass(frozen=True)
class BenchRow:
    model: str
    params: float  # the model's parameter count (its size in bytes where params are not shown)
    n_prompt: int
    n_gen: int
    depth: int
    ts: float  # tokens per second


def cost_from_llama_bench(source, c: float | None = None) -> CostModel:
    """c and v(n) from llama-bench output (a text or a path); ``c`` given when only the target was benched."""
    (name, text), = load_texts(source)
    rows = bench_rows(text)
    if not rows:
        raise ValueError(f"{name} holds no llama-bench result rows: run llama-bench -p 1,2,4,8,16 -n 64 and give its "
                         "whole output")
    models = sorted({r.model for r in rows}, key=lambda m: -max(r.params for r in rows if r.model == m))
    target = models[0]
    tg = _tg(rows, target)
    notes = [f"target {target}: tg {tg:.4g} t/s", "v(n) from pp n over tg (pp runs at depth 0, a verify pass at "
             "the context's depth: bench with -d to match)"]
    if len(models) > 1:
        draft = models[-1]
        c_bench = tg / _tg(rows, draft)
        notes.append(f"c = tg of the target / tg of the draft ({draft}) = {c_bench:.3g}")
        c = c_bench if c is None else c
    if c is None:
        raise ValueError(f"{name} benches one model ({target}): give c (a draft step over a target forward), or "
                         "bench the draft model too")
    points = {1: 1.0}
    for r in rows:
        if r.model == target and r.n_gen == 0 and r.n_prompt > 0 and r.depth == 0:
            points[r.n_prompt] = r.n_prompt * tg / r.ts
    if len(points) == 1:
        raise ValueError(f"{name} has no prompt tests (pp n) for {target}: run llama-bench -p 1,2,4,8,16")
    return CostModel(c=float(c), verify=tuple(sorted(points.items())), source=f"llama-bench ({name})",
                     notes=tuple(notes))


def _tg(rows, model: str) -> float:
    tg = [r for r in rows if r.model == model and r.n_gen > 0 and r.n_prompt == 0]
    if not tg:
        raise ValueError(f"no generation test (tg n) for {model}: run llama-bench with -n 128")
    return min(tg, key=lambda r: r.depth).ts


def bench_rows(text: str) -> list[BenchRow]:
    """Every result row of the output, in its format (JSON, JSONL, CSV or the markdown table); at most MAX_ROWS."""
    stripped = text.lstrip()
    try:
        if stripped.startswith("|"):
            rows = _markdown_rows(text)
        elif stripped.startswith(("[", "{")):
            rows = [_field_row(d) for d in _json_rows(text)]
        else:
            rows = [_field_row(d) for d in csv.DictReader(io.StringIO(text))]
    except (csv.Error, RecursionError) as error:
        raise ValueError(f"not llama-bench output ({type(error).__name__}: {str(error)[:100]})") from None
    if len(rows) > MAX_ROWS:
        raise ValueError(f"{len(rows):,} llama-bench rows: at most {MAX_ROWS:,} (a bench of a few models and sizes)")
    return rows


def _json_rows(text: str) -> list:
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        data = [json.loads(line) for line in text.splitlines() if line.strip()]
    return data if isinstance(data, list) else [data]


def _field_row(d: dict) -> BenchRow:
    try:
        return BenchRow(model=_name(f"{d['model_type']} ({d.get('model_filename', '')})"),
                        params=float(d.get("model_n_params") or d.get("model_size") or 0),
                        n_prompt=int(d["n_prompt"]), n_gen=int(d["n_gen"]), depth=int(d.get("n_depth") or 0),
                        ts=_speed(d["avg_ts"]))
    except (KeyError, TypeError, ValueError, OverflowError) as error:
        raise ValueError(f"not a llama-bench result row (needs model_type, n_prompt, n_gen, avg_ts): "
                         f"{str(error)[:100]}") from error


def _name(model: str) -> str:
    if len(model) > MAX_NAME:
        raise ValueError(f"a model named in {len(model):,} characters: not llama-bench output")
    return model


def _speed(value) -> float:
    """Tokens per second: a finite number above 0."""
    ts = float(value)
    if not math.isfinite(ts) or ts <= 0:
        raise ValueError(f"a speed in tokens per second is a finite number above 0, got {ts}")
    return ts


def _markdown_rows(text: str) -> list[BenchRow]:
    table = [[cell.strip() for cell in line.strip().strip("|").split("|")] for line in text.splitlines()
             if line.strip().startswith("|")]
    header = table[0]
    body = [row for row in table[1:] if len(row) == len(header) and row != header
            and not all(set(cell) <= set("-:") for cell in row)]
    if "test" not in header or "t/s" not in header:
        raise ValueError(f"a llama-bench table has 'test' and 't/s' columns, got {shown(header, 200)}")
    out = []
    for row in body:
        cell = dict(zip(header, row))
        test = TEST.match(cell["test"])
        if test is None or not cell["t/s"]:
            raise ValueError(f"unreadable llama-bench row: test {shown(cell['test'])}, t/s {shown(cell['t/s'])}")
        size = cell.get("params") or cell.get("size") or "0"
        out.append(BenchRow(model=_name(f"{cell.get('model', '')} {cell.get('size', '')}".strip()), params=_amount(size),
                            n_prompt=int(test.group(1) or 0), n_gen=int(test.group(2) or 0),
                            depth=int(test.group(3) or 0), ts=_speed(cell["t/s"].split()[0])))
    return out


def _amount(text: str) -> float:
    """'7.24 B' -> 7.24e9, '494.03 M' -> 4.94e8, '4.07 GiB' -> 4.37e9."""
    number, _, unit = text.partition(" ")
    scale = {"B": 1e9, "M": 1e6, "K": 1e3, "GiB": 2**30, "MiB": 2**20}.get(unit.strip(), 1.0)
    try:
        return float(number) * scale
    except ValueError:
        return 0.0
