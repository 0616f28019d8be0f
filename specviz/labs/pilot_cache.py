"""A pilot's costs remembered per host and pair, priced again at the speed this machine runs now: once a pair,
prompt and settings have been priced, a lab's estimate and its budget gate answer at once (a refusal within two
seconds, after a few target passes), where a pilot on a loaded machine takes seconds to tens of seconds.

The speed is read by ``pass_now``: a few one-row target passes timed on the calling thread. Every entry keeps the
pass price timed beside its pilot, on the pilot's thread; a later request prices the entry by its own passes over
that one. So a pilot taken while the machine was busier (or on a thread at a lower CPU priority, as the start-up's
prices are: ``app.warm``) is never used as it was measured: its costs follow the passes timed now, where the
load average read the same for a nice-19 thread starved 40-60x and for a visitor's request. The range widens by
``slack`` (the scaling's own error, more the further the speed has moved). The tree lab refreshes its entry with
what its real runs measured (``put`` again). Entries live in this process (one host) and hold their models weakly.
"""
from __future__ import annotations

import statistics
import time
import weakref
from collections import OrderedDict
from dataclasses import replace

import torch

from ..config import DecodeConfig
from ..drafts.drafter import Drafter
from .sweep import baseline_run

SLACK = 1.2  # a cached price's range: this factor either way at an unchanged load
MAX_ENTRIES = 64
PASSES = 6  # timed one-row passes (after two untimed ones: a model's first calls lay out its weights)
_entries: OrderedDict = OrderedDict()  # key -> (costs, the pass price beside them, weak refs to their modules)


def pass_now(target, ids, cfg: DecodeConfig | None = None) -> float:
    """Seconds of one one-row target pass on the fastest one-row forward here (the baseline's,
    ``labs.sweep.baseline_run``), timed now on the calling thread: the median of PASSES passes, the prefill left out.
    It is the speed a request gets as the machine is loaded now, at its own thread's priority."""
    short = replace(cfg or DecodeConfig(), max_new_tokens=2, tree=None, k_policy="fixed", record=False)
    baseline_run(target, ids, short)
    start = time.perf_counter()
    trace = baseline_run(target, ids, replace(short, max_new_tokens=PASSES + 1, record=True))
    walls = [r.wall_s for r in trace.rounds[1:]] or [(time.perf_counter() - start) / (PASSES + 1)]
    return statistics.median(walls)


def identity(obj, depth: int = 2) -> tuple:
    """A model's or drafter's key: a module by its object, a drafter by its class, name and the modules it holds
    (a drafter rebuilt around the same weights keeps its key)."""
    if isinstance(obj, torch.nn.Module):
        return ("module", id(obj))
    parts = [type(obj).__qualname__, str(getattr(obj, "name", ""))]
    if depth and hasattr(obj, "__dict__"):
        for name, value in sorted(vars(obj).items()):
            if isinstance(value, (torch.nn.Module, Drafter)):
                parts.append((name, identity(value, depth - 1)))
    return tuple(parts)


def modules(obj, depth: int = 2) -> list:
    """The modules ``identity`` keys ``obj`` by: what must still be the very same objects for its entry to hold."""
    if isinstance(obj, torch.nn.Module):
        return [obj]
    values = vars(obj).values() if depth and hasattr(obj, "__dict__") else ()
    return [m for v in values if isinstance(v, (torch.nn.Module, Drafter)) for m in modules(v, depth - 1)]


def prompt_key(ids) -> tuple:
    return tuple(int(t) for t in torch.as_tensor(ids).flatten().tolist())


def get(key, models: tuple, now_s: float) -> tuple | None:
    """(costs, scale) of a priced key: ``now_s`` (a pass timed now, ``pass_now``) over the pass timed beside its
    costs (1.0 unchanged), or None. An entry whose ``models``' modules are no longer the very objects it was priced
    with (one was freed, and its id may now name another) is dropped."""
    if key not in _entries:
        return None
    costs, then, refs = _entries[key]
    models = tuple(m for obj in models for m in modules(obj))
    if len(refs) != len(models) or any(ref() is not m for ref, m in zip(refs, models)):
        del _entries[key]
        return None
    _entries.move_to_end(key)
    return costs, now_s / then if then > 0 and now_s > 0 else 1.0


def put(key, costs, models: tuple, pass_s: float) -> None:
    """Remembers ``costs`` for ``key`` (priced with ``models``: held weakly) beside ``pass_s``, a pass timed with
    them on the same thread (``pass_now``): what a later request's pass is compared with."""
    held = tuple(weakref.ref(m) for obj in models for m in modules(obj))
    _entries[key] = (costs, pass_s, held)
    _entries.move_to_end(key)
    while len(_entries) > MAX_ENTRIES:
        _entries.popitem(last=False)


def slack(scale: float) -> float:
    """How far either way a price scaled by ``scale`` may be off: ``SLACK`` at an unchanged speed, more as it moved."""
    return SLACK * max(scale, 1 / scale) ** 0.5 if scale > 0 else SLACK


def clear() -> None:
    _entries.clear()
