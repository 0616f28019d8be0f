"""A pilot's costs remembered per host and pair, priced again at the load seen now: once a pair, prompt and settings
have been priced, a lab's estimate and its budget gate answer at once (a refusal within two seconds, with no model
work), where a pilot on a loaded machine takes seconds to tens of seconds.

The load is read by ``probe`` (the load average over the cores). A cached price is scaled by the load now over the
load when it was measured, and its range widens by ``slack`` (the scaling's own error, more the further the load has
moved). The tree lab refreshes its entry with what its real runs measured (``put`` again), so the price follows
the machine. Entries live in this process (one host) and hold their models weakly.
"""
from __future__ import annotations

import os
import weakref
from collections import OrderedDict

import torch

from ..drafts.drafter import Drafter

SLACK = 1.2  # a cached price's range: this factor either way at an unchanged load
MAX_ENTRIES = 64
_entries: OrderedDict = OrderedDict()  # key -> (costs, the load when measured, weak refs to their modules)


def probe() -> float:
    """How slow this host runs now, as a factor (1.0 idle): the runnable work of the last minute (the load average,
    this process's own work included) over the cores, never below 1. Instant, and steadier than timing a few
    milliseconds of work, which on a loaded machine gives anything from the idle speed to twenty times it."""
    try:
        return max(1.0, (os.getloadavg()[0] + 1) / (os.cpu_count() or 1))
    except (AttributeError, OSError):  # no load average on this platform: the price as measured
        return 1.0


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


def get(key, models: tuple = ()) -> tuple | None:
    """(costs, scale) of a priced key: the load now over the load when it was priced (1.0 unchanged), or None. An
    entry whose ``models``' modules are no longer the very objects it was priced with (one was freed, and its id may
    now name another) is dropped."""
    if key not in _entries:
        return None
    costs, then, refs = _entries[key]
    models = tuple(m for obj in models for m in modules(obj))
    if len(refs) != len(models) or any(ref() is not m for ref, m in zip(refs, models)):
        del _entries[key]
        return None
    _entries.move_to_end(key)
    return costs, probe() / then if then > 0 else 1.0


def put(key, costs, models: tuple = (), probe_s: float | None = None) -> None:
    """Remembers ``costs`` for ``key`` (priced with ``models``: held weakly) at the load ``probe_s`` (now if not
    given)."""
    held = tuple(weakref.ref(m) for obj in models for m in modules(obj))
    _entries[key] = (costs, probe() if probe_s is None else probe_s, held)
    _entries.move_to_end(key)
    while len(_entries) > MAX_ENTRIES:
        _entries.popitem(last=False)


def slack(scale: float) -> float:
    """How far either way a price scaled by ``scale`` may be off: ``SLACK`` at an unchanged load, more as it moved."""
    return SLACK * max(scale, 1 / scale) ** 0.5 if scale > 0 else SLACK


def clear() -> None:
    _entries.clear()
