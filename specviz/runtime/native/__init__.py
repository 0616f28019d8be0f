"""The lean forwards' layer stacks and matmuls in C (``stack.c``): ``build`` compiles and loads it without torch (or
says why not), ``library`` holds the torch side's checks and switch, ``ops`` its single operators (a packed matmul,
RMSNorm), ``stack`` a Llama pass of every layer in one call, ``gemma`` a quantized Gemma-3 pass. Names are imported
at first use, so that a process without torch (``specviz.slim``) can load the library through ``build``."""
from __future__ import annotations

import importlib

_HOMES = {"MAX_HEAD_DIM": "build", "Dims": "build", "Layer": "build", "lib": "build", "unavailable": "build",
          "disabled": "library", "enabled": "library", "fits": "library", "linear": "ops", "packed": "ops",
          "rms_norm": "ops", "Stack": "stack", "layers": "stack", "layers_rows": "stack", "supports_stack": "stack"}

__all__ = sorted(_HOMES)


def __getattr__(name: str):
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_HOMES[name]}", __name__), name)
