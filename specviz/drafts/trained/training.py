"""A trainer's per-step accuracies beside serving's acceptance per draft position.

The trainers log, per training-time-test step i (draft position i + 1), how often the draft's argmax equals the
target's (speculators ``models/eagle3/metrics.py`` and ``models/metrics.py``, ``compute_accuracy_single_step``):
``full_acc_i`` counts positions where steps 0..i were all right, of every position (the share of rounds whose draft
i + 1 is accepted); ``cond_acc_i`` counts step i right among positions whose steps 0..i-1 were right (accepted given
reached). DFlash, DSpark and P-EAGLE log ``position_i_acc`` per block position (the first present is the first
draft), SpecForge and the EAGLE authors' scripts ``acc_i`` per step; both are taken as the conditional rate, as their
own expected-length sums take them (a product over positions). speculators writes them as ``train/<name>`` each
logged step and ``val/<name>_epoch`` each epoch (its console lines read ``train/full_acc_0=0.734, ...``).

Serving's side is a run's trace: at draft position i, accepted / drafted (the full rate) and accepted / reached
(the conditional one). A draft that serves as it was trained accepts about what it scored at every position; one
below at every position, the first included, is not seeing what it saw in training (tapped layers, norms, the
vocabulary map, the chat template: a serving or feature mismatch), since the first position has no drafted token
before it to blame. Pure: text in, DataFrames and words out.
"""
from __future__ import annotations

import json
import math
import re

import pandas as pd

from ...trace import Trace

KEYS = (  # (pattern on a metric's name, its kind, the index of the first draft position or None: the least present)
    (re.compile(r"(?:^|/)full_acc_(\d+)(?:_epoch)?$"), "full", 0),
    (re.compile(r"(?:^|/)cond_acc_(\d+)(?:_epoch)?$"), "cond", 0),
    (re.compile(r"(?:^|/)position_(\d+)_acc(?:_epoch)?$"), "step", None),
    (re.compile(r"(?:^|/)acc_(\d+)(?:_epoch)?$"), "step", 0),
)
PAIR = re.compile(r"([A-Za-z_][\w/.\-]*)\s*[=:]\s*(-?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)")  # key=value in a log line
STEP_KEYS = ("global_step", "step", "_step", "train/global_step")
LAST = 20  # logged steps averaged per split: one training step's accuracy is a small batch's
MAX_CHARS = 20_000_000


def read_trainer_metrics(text: str) -> pd.DataFrame:
    """The per-position accuracies in a trainer's metrics (JSON, JSON lines, or its log's key=value lines), one row
    per logged value: ``step`` (its step, or its line's number), ``split`` (train or val), ``kind`` (full, cond,
    step), ``position`` (the draft position, from 1) and ``value``. ValueError where none is found."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError("no trainer metrics given: upload or paste the trainer's log, or its metrics as JSON lines")
    if len(text) > MAX_CHARS:
        raise ValueError(f"the trainer's metrics run to {len(text):,} characters; at most {MAX_CHARS:,} are read")
    rows = []
    for n, record in enumerate(_records(text)):
        flat = _flatten(record)
        step = next((flat[k] for k in STEP_KEYS if isinstance(flat.get(k), (int, float))), n)
        rows += [dict(step=int(step), **found) for key, value in flat.items() if (found := _metric(key, value))]
    if not rows:
        raise ValueError("no per-position accuracy found: expected speculators' full_acc_0 / cond_acc_0, DFlash's, "
                         "DSpark's or P-EAGLE's position_1_acc, or SpecForge's acc_0 (as JSON, JSON lines or the "
                         "trainer's key=value log lines)")
    frame = pd.DataFrame(rows)
    for (split, kind), g in frame.groupby(["split", "kind"]):  # position_i: the least index logged is position 1
        if (g.first_index == -1).any():
            frame.loc[g.index, "position"] = g.position - g.position.min() + 1
    return frame.drop(columns="first_index").sort_values(["split", "kind", "position", "step"], ignore_index=True)


def _records(text: str) -> list:
    """Each logged record: the JSON value (a list's items), each JSON line, or each log line's key=value pairs."""
    try:
        whole = json.loads(text)
        return whole if isinstance(whole, list) else [whole]
    except json.JSONDecodeError:
        pass
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
                continue
            except json.JSONDecodeError:
                pass
        pairs = {k: float(v) for k, v in PAIR.findall(line)}
        if pairs:
            out.append(pairs)
    return out


def _flatten(record, prefix: str = "") -> dict:
    """A nested record's values by their path ("train/full_acc_0"), as speculators' loggers flatten them."""
    if not isinstance(record, dict):
        return {}
    out = {}
    for key, value in record.items():
        if isinstance(value, dict):
            out.update(_flatten(value, f"{prefix}{key}/"))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _metric(key: str, value) -> dict | None:
    """A per-position accuracy's split, kind, position and value (None for any other metric or a non-number)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    for pattern, kind, first in KEYS:
        if m := pattern.search(key):
            if not 0 <= value <= 1:
                raise ValueError(f"{key} = {value}: an accuracy is a share between 0 and 1")
            index = int(m.group(1))
            return dict(split="val" if key.startswith("val") else "train", kind=kind, value=float(value),
                        position=index + 1 if first is not None else index, first_index=0 if first is not None else -1)
    return None


def trained_rates(metrics: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """Per kind and position, the mean of the last LAST logged values of the validation split where there is one,
    else of training; and the split's description."""
    split = "val" if (metrics.split == "val").any() else "train"
    part = metrics[metrics.split == split]
    steps = sorted(part.step.unique())[-LAST:]
    last = part[part.step.isin(steps)]
    rates = last.groupby(["kind", "position"], as_index=False).value.mean().rename(columns={"value": "training"})
    said = ("validation" if split == "val" else "training") + (
        f", the mean of its last {len(steps)} logged steps ({steps[0]}-{steps[-1]})" if len(steps) > 1
        else f", step {steps[0]}")
    return rates, said


def serving_rates(trace: Trace) -> pd.DataFrame:
    """A run's acceptance per draft position (chain rounds): ``drafted``, ``reached`` (every earlier draft accepted),
    ``accepted``, ``full`` = accepted / drafted and ``cond`` = accepted / reached."""
    rows = {}
    for r in trace.rounds:
        if r.tree is not None:
            continue
        for i in range(len(r.drafted)):
            row = rows.setdefault(i + 1, dict(position=i + 1, drafted=0, reached=0, accepted=0))
            row["drafted"] += 1
            row["reached"] += i <= r.n_accepted  # positions 1..n_accepted + 1 were verified
            row["accepted"] += i < r.n_accepted
    if not rows:
        raise ValueError("the run drafted no chain: serving's acceptance per position needs a run with drafts")
    frame = pd.DataFrame(sorted(rows.values(), key=lambda row: row["position"]))
    frame["full"] = frame.accepted / frame.drafted
    frame["cond"] = frame.accepted / frame.reached.where(frame.reached > 0)
    return frame


def beside(metrics: pd.DataFrame, trace: Trace) -> pd.DataFrame:
    """The trainer's rates beside the run's, at every draft position both have: ``kind`` (the trainer's), ``position``,
    ``training``, ``serving`` (the run's full rate beside full_acc, its conditional rate beside the others), ``n``
    (the run's drafts behind it) and ``noise`` (two standard errors of that rate)."""
    rates, _ = trained_rates(metrics)
    served = serving_rates(trace)
    rows = []
    for kind, g in rates.groupby("kind", sort=True):
        rate, count = ("full", "drafted") if kind == "full" else ("cond", "reached")
        joined = g.merge(served[["position", rate, count]], on="position")
        for row in joined.itertuples():
            n, s = int(getattr(row, count)), getattr(row, rate)
            if n and not math.isnan(s):
                rows.append(dict(kind=kind, position=int(row.position), training=float(row.training), serving=float(s),
                                 n=n, noise=2 * math.sqrt(max(s * (1 - s), 1 / n) / n)))
    if not rows:
        raise ValueError(f"no draft position in common: the trainer logged positions "
                         f"{sorted(rates.position.unique())}, the run drafted {list(served.position)}")
    return pd.DataFrame(rows)


WITHIN = 0.05  # a gap under 5% of the trained rate (or under the run's noise) counts as none


def gaps(frame: pd.DataFrame) -> pd.Series:
    """Per row, -1 where serving is below training beyond the band (WITHIN of the trained rate, or the run's noise),
    +1 where above, 0 within it."""
    band = (frame.training * WITHIN).clip(lower=0).combine(frame.noise, max)
    return (frame.serving > frame.training + band).astype(int) - (frame.serving < frame.training - band).astype(int)


def reading(frame: pd.DataFrame, temperature: float = 0.0) -> str:
    """What the gap says, read from the numbers: below at every position including the first (a serving or feature
    mismatch), the first in agreement and later ones below (the draft weaker over its own drafts), or none."""
    kind = "cond" if "cond" in set(frame.kind) else "step" if "step" in set(frame.kind) else "full"
    rows = frame[frame.kind == kind].sort_values("position").reset_index(drop=True)
    side = gaps(rows)
    first = rows.iloc[0]
    at = f"serving {first.serving:.2f} against training {first.training:.2f} at position {int(first.position)}"
    below = [int(p) for p, s in zip(rows.position, side) if s < 0]
    if len(below) == len(rows) and first.position == 1:
        text = (f"Serving accepts less than training at every draft position, the first included ({at}). The first "
                "position has no drafted token before it to blame: the draft is not given in serving what it was "
                "trained on. Look for a serving or feature mismatch (tapped layers, the norms' switches, the "
                "vocabulary map, the chat template), not a weak draft.")
    elif below and side.iloc[0] >= 0:
        text = (f"Serving and training agree at the first position ({at}) and serving falls below from position "
                f"{below[0]} ({', '.join(map(str, below))}): the features reach the draft as trained; it weakens over "
                "its own drafts (deeper than it was trained to, or a weaker draft at depth), not a serving mismatch.")
    elif below:
        text = (f"Serving accepts less than training at positions {', '.join(map(str, below))} of {len(rows)} ({at}); "
                "not at every one, so this is no clear sign of a serving mismatch.")
    else:
        text = (f"Serving is below training beyond the run's noise at no position compared ({at}): no sign of a "
                "serving or feature mismatch.")
    if temperature:
        text += (f" This run sampled at temperature {temperature:g}: its acceptance is not the trainer's argmax "
                 "agreement (run at temperature 0 to compare like with like).")
    return text
