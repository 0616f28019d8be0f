"""Which trainer's layout a draft folder holds, read from its config.json and its safetensors headers (the names,
shapes and dtypes of its tensors; no weight is read)."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

SPECULATORS_TYPES = ("eagle3", "peagle", "dflash", "dspark", "eagle", "mtp")  # speculators_model_type values
MEDUSA_FILE = "medusa_lm_head.safetensors"
NAMES = {  # kind -> what it is, in words (shown beside a local draft's name)
    "eagle3": "EAGLE-3 (speculators format)",
    "peagle": "P-EAGLE (speculators format)",
    "dflash": "DFlash (speculators format)",
    "dspark": "DSpark (speculators format)",
    "eagle": "EAGLE-1 (speculators format)",
    "mtp": "MTP head (speculators format)",
    "eagle3-midlayer": "EAGLE-3 with a midlayer.* layer (SpecForge / EAGLE authors' export)",
    "eagle3-vllm": "EAGLE-3 in vLLM's own layout (layers.0.*, no speculators_model_type)",
    "eagle1": "EAGLE-1 / HASS checkpoint",
    "medusa": "Medusa heads (FasterDecoding layout)",
}


@dataclass(frozen=True)
class Layout:
    """A draft folder as read: its kind (a key of NAMES), config.json, and every tensor's shape and dtype by name."""

    kind: str
    folder: Path
    config: dict
    tensors: dict[str, tuple[tuple[int, ...], str]] = field(repr=False)
    files: dict[str, Path] = field(repr=False)  # tensor name -> the safetensors file holding it

    @property
    def title(self) -> str:
        return NAMES[self.kind]


def read_config(folder: Path) -> dict:
    path = Path(folder) / "config.json"
    if not path.is_file():
        return {}
    try:
        config = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{path.name} is not JSON: {e}") from None
    if not isinstance(config, dict):
        raise ValueError(f"{path.name} holds a {type(config).__name__}, not an object of settings")
    return config


def weight_files(folder: Path) -> list[Path]:
    """The folder's safetensors files: Medusa's file, else model*.safetensors (one or shards)."""
    folder = Path(folder)
    if (folder / MEDUSA_FILE).is_file():
        return [folder / MEDUSA_FILE]
    return sorted(folder.glob("*.safetensors"))


def read_header(files: list[Path]) -> tuple[dict, dict]:
    """(name -> (shape, dtype), name -> file) from the files' headers alone."""
    from safetensors import safe_open

    tensors, where = {}, {}
    for path in files:
        try:
            with safe_open(str(path), "pt") as f:
                for name in f.keys():
                    s = f.get_slice(name)
                    if name in tensors:
                        raise ValueError(f"tensor {name!r} is in both {where[name].name} and {path.name}")
                    tensors[name], where[name] = (tuple(s.get_shape()), s.get_dtype()), path
        except (OSError, RuntimeError) as e:  # safetensors' own errors: a truncated or foreign file
            raise ValueError(f"{path.name} is not a readable safetensors file: {e}") from None
    return tensors, where


def kind_of(config: dict, tensors: dict, folder: Path) -> str | None:
    """The layout's kind, or None where the folder is not a draft of a kind specviz reads (a plain causal LM)."""
    if "speculators_model_type" in config:
        kind = config["speculators_model_type"]
        if kind not in SPECULATORS_TYPES:
            raise ValueError(f"speculators_model_type {kind!r} is not one specviz reads ({', '.join(SPECULATORS_TYPES)})")
        return kind
    if (Path(folder) / MEDUSA_FILE).is_file() or "medusa_num_heads" in config:
        return "medusa"
    if any(n.startswith("midlayer.") for n in tensors):
        return "eagle3-midlayer"
    if "fc.weight" in tensors and any(n.startswith("layers.") for n in tensors):
        fc_in = tensors["fc.weight"][0][-1]
        hidden = config.get("hidden_size") or tensors["fc.weight"][0][0]
        return "eagle1" if fc_in == 2 * hidden else "eagle3-vllm"
    return None


def detect(folder) -> Layout | None:
    """The draft layout in ``folder`` (config.json and safetensors headers only), or None for anything else."""
    folder = Path(folder).expanduser()
    if not folder.is_dir():
        return None
    config, files = read_config(folder), weight_files(folder)
    if not files:
        if "speculators_model_type" in config or "medusa_num_heads" in config:
            raw = sorted(p.name for p in folder.glob("*.bin")) or ["none"]
            raise ValueError(f"{folder.name}: a trained draft's config but no safetensors weights (found: "
                             f"{', '.join(raw)}); convert pickled .bin/.pt weights to safetensors first")
        return None
    tensors, where = read_header(files)
    kind = kind_of(config, tensors, folder)
    return None if kind is None else Layout(kind, folder, config, tensors, where)


def describe(folder) -> str | None:
    """A line for a local draft: its layout, tapped layers, draft vocabulary and sizes, as read (None where the
    folder is not a trained draft). Kept per folder until its config.json or a weight file changes (listings read
    it on every call)."""
    folder = Path(folder).expanduser().resolve()
    files = [folder / "config.json", *weight_files(folder)] if folder.is_dir() else []
    stamp = tuple((f.name, f.stat().st_mtime_ns, f.stat().st_size) for f in files if f.is_file())
    if _described.get(folder, (None,))[0] != stamp:
        _described[folder] = (stamp, _line(detect(folder)))
    return _described[folder][1]


_described: dict[Path, tuple[tuple, str | None]] = {}  # folder -> (its files' (name, mtime, size), its line)


def _line(layout: Layout | None) -> str | None:
    if layout is None:
        return None
    c, t = layout.config, layout.tensors
    parts = [layout.title]
    taps = c.get("eagle_aux_hidden_state_layer_ids")
    if layout.kind.startswith("eagle3") or layout.kind in ("peagle", "dflash", "dspark"):
        parts.append(f"{len(taps)} tapped layers ({', '.join(map(str, taps))})" if taps
                     else "tapped layers not given (the default 3)")
    if "t2d" in t and "d2t" in t:
        parts.append(f"draft vocabulary {t['d2t'][0][0]:,} of {t['t2d'][0][0]:,}")
    n = sum(_numel(shape) for shape, _ in t.values())
    return f"{', '.join(parts)}: {len(t)} tensors, {n:,} numbers"


def _numel(shape) -> int:
    out = 1
    for d in shape:
        out *= d
    return out
