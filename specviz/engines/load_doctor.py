"""Speculation under load, read from engine runs: acceptance and tokens/s against the running requests (or a
benchmark's concurrency), binned; where speculation stops paying when runs with it on and off are given; how the
acceptance moved with load; advice per load range in the engine's own syntax.

A load is what the engine printed beside an interval's figures (``run.Load``): requests running (vLLM 'Running: N
reqs', SGLang '#running-req') or, for a benchmark, its '--max-concurrency'. tokens/s is the interval's generation
throughput as printed (the whole server's, not one request's). Loads are binned by powers of two (1, 2-3, 4-7, ...);
a bin keeps the range of its intervals, and every verdict is read off those ranges: a speedup whose range holds 1 is
said to be undecided, and fewer than two loads seen both ways is "too few loads to tell". The model's crossover
comes from ``specviz.goodput`` (its assumptions hold there), fitted on the run with speculation off.
Each row is one producer's interval (``producers``: the engine, DP rank or server that printed it) with the load that
same producer printed beside it, so a row never pairs one engine's load with another's figures; rows are binned by
load, and no finding here reads their order as time.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from .. import goodput
from .finding import Finding
from .means import MeanRun
from .run import EngineRun

COLUMNS = ("run", "speculation", "engine", "producer", "load", "load_kind", "tokens_per_s", "mean_length",
           "context_per_request")
TOO_FEW = "too few loads to tell"
# vllm/config/speculative.py, SpeculativeConfig.disable_by_batch_size (ge=2): "Disable speculative decoding for new
# incoming requests when the number of enqueued requests is larger than this value"; V0's engine argument
# --speculative-disable-by-batch-size is the same setting.
VLLM_SETTING = "disable_by_batch_size"
# SGLang's docs (advanced_features/adaptive_speculative_decoding): adaptive mode adjusts speculative_num_steps at
# runtime, EAGLE/EAGLE3 with --speculative-eagle-topk 1 only; a static chain is --speculative-num-steps k with
# --speculative-num-draft-tokens k + 1.
SGLANG_ADAPTIVE = "adaptive speculative decoding (docs: advanced_features/adaptive_speculative_decoding)"


def engine_of(source: str) -> str:
    """The engine a run's source format names: "vLLM", "SGLang", "llama.cpp" or "other"."""
    low = source.lower()
    for name, key in (("vLLM", "vllm"), ("SGLang", "sglang"), ("llama.cpp", "llama")):
        if key in low:
            return name
    return "other"


def _parts(run):
    return list(run.series) if run.series else [run]


def _mean_length(part) -> float | None:
    if isinstance(part, MeanRun):
        return part.mean_length
    return 1 + part.accepted / part.steps if part.steps else None


def _speculating(run) -> bool:
    if isinstance(run, EngineRun):
        return True
    return any(p.mean_length is not None or p.acceptance_rate is not None for p in _parts(run))


def _row(label: str, speculating: bool, engine: str, part) -> dict | None:
    load = part.load
    if load is None or (load.running is None and load.concurrency is None):
        return None
    running = load.running if load.running is not None else load.concurrency
    if running < 1:  # no request decoding: nothing to compare
        return None
    context = load.tokens / load.running if load.tokens is not None and load.running else None
    return {"run": label, "speculation": "on" if speculating else "off", "engine": engine,
            "producer": getattr(part, "producer", None), "load": running,
            "load_kind": "running requests" if load.running is not None else "concurrency",
            "tokens_per_s": load.gen_tps, "mean_length": _mean_length(part) if speculating else None,
            "context_per_request": context}


def load_frame(runs) -> pd.DataFrame:
    """One row per interval (or benchmark run) that printed a load: ``runs`` is a list of EngineRun / MeanRun, or a
    dict of them by label. A run speaks of speculation off when it carries no acceptance figure (a MeanRun of a
    log or benchmark without it). Intervals with no load printed beside them are left out."""
    labelled = runs.items() if isinstance(runs, dict) else ((f"run {i}", r) for i, r in enumerate(runs, 1))
    rows = []
    for label, run in labelled:
        if not isinstance(run, (EngineRun, MeanRun)):
            raise ValueError(f"{label}: expected an EngineRun or MeanRun, got {type(run).__name__}")
        on, engine = _speculating(run), engine_of(run.source)
        rows += [r for r in (_row(label, on, engine, p) for p in _parts(run)) if r is not None]
    frame = pd.DataFrame(rows, columns=list(COLUMNS))
    return frame.astype({"tokens_per_s": float, "mean_length": float, "context_per_request": float})


def load_bin(load: int) -> int:
    """The lower edge of a load's power-of-two bin (1, 2, 4, 8, ...; 0 stays 0)."""
    return 0 if load < 1 else 2 ** int(math.floor(math.log2(load)))


def binned(frame: pd.DataFrame) -> pd.DataFrame:
    """Per (speculation, bin): how many intervals, the loads they span, tokens/s and mean length mean/min/max."""
    if frame.empty:
        return pd.DataFrame(columns=["speculation", "bin", "intervals", "load_min", "load_max", "tps_mean",
                                     "tps_min", "tps_max", "length_mean", "length_min", "length_max"])
    grouped = frame.assign(bin=frame["load"].map(load_bin)).groupby(["speculation", "bin"])
    out = grouped.agg(intervals=("load", "size"), load_min=("load", "min"), load_max=("load", "max"),
                      tps_mean=("tokens_per_s", "mean"), tps_min=("tokens_per_s", "min"),
                      tps_max=("tokens_per_s", "max"), length_mean=("mean_length", "mean"),
                      length_min=("mean_length", "min"), length_max=("mean_length", "max"))
    return out.reset_index()


def speedups(frame: pd.DataFrame) -> pd.DataFrame:
    """Per bin seen both ways: speedup = mean tokens/s on / off, and its range [min on / max off, max on / min off]."""
    b = binned(frame[frame["tokens_per_s"] > 0])  # an interval that generated nothing (prefill only) compares nothing
    on, off = (b[b["speculation"] == s].set_index("bin") for s in ("on", "off"))
    both = on.join(off, lsuffix="_on", rsuffix="_off", how="inner")
    return pd.DataFrame({"bin": both.index, "first": np.minimum(both["load_min_on"], both["load_min_off"]),
                         "last": np.maximum(both["load_max_on"], both["load_max_off"]),
                         "speedup": both["tps_mean_on"] / both["tps_mean_off"],
                         "low": both["tps_min_on"] / both["tps_max_off"],
                         "high": both["tps_max_on"] / both["tps_min_off"]}).reset_index(drop=True)


def _loads(row, first: str = "first", last: str = "last") -> str:
    """The loads a bin's intervals span, as seen ("8", "8-12")."""
    lo, hi = int(row[first]), int(row[last])
    return f"{lo}" if lo == hi else f"{lo}-{hi}"


def crossover_finding(frame: pd.DataFrame) -> Finding:
    """Where speculation stops paying along the bins seen both ways, as an interval of loads, or why it cannot
    be told (fewer than two shared bins; a range that holds 1 at the change)."""
    s = speedups(frame)
    kind = frame["load_kind"].iloc[0] if len(frame) else "running requests"
    if len(s) < 2:
        need = "; the crossover needs at least two" if set(frame["speculation"]) == {"on", "off"} else \
            ": give a run with speculation off at the same loads beside it"
        return Finding("load_crossover", "info", f"{TOO_FEW}: speculation on and off share {len(s)} load bin(s) of "
                       f"{kind}{need}", {"shared_bins": len(s)})
    cross = goodput.crossover(list(s["bin"]), list(s["speedup"]))
    numbers = {"bins": list(s["bin"]), "speedups": [round(x, 3) for x in s["speedup"]],
               "verdict": cross.verdict, "crossover_bin": cross.batch, "last_paying_bin": cross.last_paying}
    if cross.batch is None:
        words = {"never pays": "speculation was slower at every load seen both ways",
                 "pays throughout": "speculation paid at every load seen both ways: no crossover in range",
                 "pays only at larger batches": "speculation was slower at the smaller loads and paid at larger"}
        return Finding("load_crossover", "info", f"{words[cross.verdict]} ({_range_text(s)})", numbers)
    at = s[s["bin"] == cross.batch].iloc[0]
    before = s[s["bin"] == cross.last_paying].iloc[0]
    sure = before["low"] >= 1 and at["high"] < 1
    numbers.update(last_paying_load=int(before["last"]), first_losing_load=int(at["first"]))
    text = (f"speculation stops paying between {_loads(before)} and {_loads(at)} {kind}: speedup "
            f"{_speedup_text(before)} then {_speedup_text(at)}")
    if not sure:
        text += "; a range holds 1, so the intervals do not tell the two loads apart: measure longer there"
    return Finding("load_crossover", "warning" if sure else "info", text, {**numbers, "decided": bool(sure)})


def _speedup_text(row) -> str:
    """A bin's speedup, with its range where its intervals spread one."""
    spread = f" (range {row['low']:.2f}-{row['high']:.2f})" if row["low"] != row["high"] else ""
    return f"{row['speedup']:.2f}{spread}"


def _range_text(s: pd.DataFrame) -> str:
    return ", ".join(f"{_loads(row)}: {row['speedup']:.2f}" for _, row in s.iterrows())


def drift_finding(frame: pd.DataFrame) -> Finding:
    """How the mean acceptance length moved from the lowest to the highest load bin, read off their ranges."""
    b = binned(frame[frame["speculation"] == "on"].dropna(subset=["mean_length"]))
    if len(b) < 2:
        return Finding("load_drift", "info", f"acceptance against load: {TOO_FEW} ({len(b)} load bin with an "
                       "acceptance figure)", {"bins": len(b)})
    lo, hi = b.iloc[0], b.iloc[-1]
    if min(lo["intervals"], hi["intervals"]) < 2:
        word = "untold"
    elif hi["length_min"] > lo["length_max"]:
        word = "rose"
    elif hi["length_max"] < lo["length_min"]:
        word = "fell"
    else:
        word = "stayed"
    change = {"rose": "rose from", "fell": "fell from", "untold": "(one interval at an end: no range to read a "
              "change against):"}.get(word, "stayed about the same (the ranges overlap):")
    text = (f"mean acceptance length {change} {lo['length_mean']:.2f} at {_loads(lo, 'load_min', 'load_max')} to "
            f"{hi['length_mean']:.2f} at {_loads(hi, 'load_min', 'load_max')} {frame['load_kind'].iloc[0]}")
    return Finding("load_drift", "warning" if word == "fell" else "info", text,
                   {"low_bin": int(lo["bin"]), "high_bin": int(hi["bin"]), "low": lo["length_mean"],
                    "high": hi["length_mean"], "direction": word.split()[0]})


def model_crossover(frame: pd.DataFrame, k: int) -> goodput.Crossover | None:
    """The goodput model's crossover over the off run's loads: the target's step cost fitted from its throughput
    at each load (``goodput.passes_from_throughput``), the on run's mean length as tau for k drafts, a draft that
    costs nothing (so the model's crossover is the latest it can be). None: fewer than two loads off."""
    off = frame[frame["speculation"] == "off"].dropna(subset=["tokens_per_s"]).groupby("load")["tokens_per_s"].mean()
    lengths = frame[frame["speculation"] == "on"]["mean_length"].dropna()
    if len(off) < 2 or lengths.empty or (off <= 0).any():
        return None
    step = goodput.fit_step_cost(goodput.passes_from_throughput(list(off.index), list(off.values)))
    alpha = _alpha_for(float(lengths.mean()), k)
    free = goodput.DraftCost("ngram")
    batches = list(range(1, int(off.index.max()) + 1))
    return goodput.crossover(batches, [goodput.speedup(b, 0.0, k, alpha, step, free) for b in batches])


def _alpha_for(tau: float, k: int) -> float:
    """The alpha whose chain of k emits tau tokens a round (bisection on goodput.chain_tokens)."""
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if goodput.chain_tokens([mid] * k) < tau else (lo, mid)
    return (lo + hi) / 2


def advice_findings(frame: pd.DataFrame, cross: Finding, k: int | None = None) -> list[Finding]:
    """Per load range, what to set, in the engine's own syntax where it has one."""
    if cross.numbers.get("crossover_bin") is None or not cross.numbers.get("decided"):
        return []
    last, losing = cross.numbers["last_paying_load"], cross.numbers["first_losing_load"]
    engine = frame[frame["speculation"] == "on"]["engine"].iloc[0]
    plain = (f"turn speculation off above {last} concurrent requests (it paid at {last}, not at {losing}; between "
             "them the run does not say)")
    if engine == "vLLM" and last >= 2:
        text = (f"vLLM: --speculative-config '{{..., \"{VLLM_SETTING}\": {last}}}' stops new requests speculating "
                f"while more than {last} are enqueued (SpeculativeConfig.{VLLM_SETTING}, vllm/config/speculative.py; "
                f"V0: --speculative-disable-by-batch-size {last}); where your version lacks it, {plain}")
    elif engine == "SGLang":
        steps = (f"; up to {last}, the chain as run: --speculative-num-steps {k} --speculative-num-draft-tokens "
                 f"{k + 1} --speculative-eagle-topk 1") if k else ""
        text = (f"SGLang: {plain}{steps}; its {SGLANG_ADAPTIVE} lowers speculative_num_steps as batches grow "
                "(EAGLE/EAGLE3 with --speculative-eagle-topk 1 only)")
    elif engine == "llama.cpp":
        draft_n = f" --spec-draft-n-max {k}" if k else ""
        text = (f"llama.cpp: llama-server sets speculation at launch for every slot (its per-request "
                "speculative.n_max is compiled out, '#if 0' in tools/server/server-schema.cpp as of commit 0c1e570), "
                f"so per range: up to {last} concurrent requests, serve with -md <draft>{draft_n}; above {last}, a "
                f"server without -md (it paid at {last}, not at {losing}; between them the run does not say)")
    else:
        text = f"{engine}: {plain}"
    return [Finding("load_advice", "warning", text, {"off_above": last, "engine": engine})]


def diagnose_load(runs, k: int | None = None) -> list[Finding]:
    """The load findings of one run or several (speculation on and off): crossover, drift, the model's crossover
    where a run with speculation off gives two loads or more, and the advice per range."""
    frame = load_frame(runs)
    if frame.empty:
        return [Finding("load_crossover", "info", f"{TOO_FEW}: no interval printed a load beside its figures", {})]
    cross = crossover_finding(frame)
    out = [cross, drift_finding(frame)]
    if k and (frame["speculation"] == "on").any():
        model = model_crossover(frame, k)
        if model is not None:
            out.append(Finding("load_model", "info", f"the goodput model (step cost fitted on the run without "
                               f"speculation, a draft costing nothing, k = {k}): {model.verdict}"
                               + (f" at batch {model.batch}" if model.batch else ""),
                               {"verdict": model.verdict, "batch": model.batch, "assumptions": goodput.ASSUMPTIONS}))
    return out + advice_findings(frame, cross, k)

