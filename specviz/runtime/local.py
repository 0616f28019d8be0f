"""Models an operator serves from local folders or GGUF files, by name: ``SPECVIZ_EXTRA_MODELS=name=PATH,...``,
read when asked (the app reads it at start). A visitor picks the name; no path ever comes from the web form."""
from __future__ import annotations

import os
from pathlib import Path

EXTRA_ENV = "SPECVIZ_EXTRA_MODELS"


def extra_models(value: str | None = None) -> dict[str, str]:
    """name -> path from ``value`` (default: the environment), each path a folder or a .gguf that exists."""
    value = os.environ.get(EXTRA_ENV, "") if value is None else value
    out = {}
    for item in filter(None, (part.strip() for part in value.split(","))):
        name, sep, path = item.partition("=")
        name, path = name.strip(), path.strip()
        if not sep or not name or not path:
            raise ValueError(f"{EXTRA_ENV}: {item!r} is not name=PATH (several: name=PATH,name2=PATH2)")
        if not Path(path).expanduser().exists():
            raise ValueError(f"{EXTRA_ENV}: {name!r} points at {path!r}, which does not exist")
        out[name] = str(Path(path).expanduser())
    return out
