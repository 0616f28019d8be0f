"""GGUF files (llama.cpp's format) as ordinary transformers models: found, loaded dequantized, saved plain.

transformers reads a GGUF with ``from_pretrained(folder, gguf_file=name)`` (it needs the ``gguf`` package) and
dequantizes it to float; the model it returns still carries a GGUF quantizer, so ``save_pretrained`` refuses it
until that is cleared (``plain``). Converting once (``python -m specviz.runtime.gguf FILE OUT``) makes later loads
take seconds instead of a minute or more (a 262,144-token tokenizer is rebuilt from the GGUF on every load).
"""
from __future__ import annotations

import argparse
from importlib.util import find_spec
from pathlib import Path

INSTALL = "pip install gguf"  # transformers' GGUF reader needs it (>= 0.10)


def locate(name_or_path: str) -> tuple[Path, str] | None:
    """(folder, file name) when ``name_or_path`` is a .gguf file, or a folder that holds one GGUF and no
    config.json (a converted folder loads as usual); None otherwise. Several GGUFs in one folder: ValueError."""
    path = Path(name_or_path).expanduser()
    if path.suffix == ".gguf":
        if not path.is_file():
            raise ValueError(f"no GGUF file at {str(path)!r}")
        return path.parent, path.name
    if path.is_dir() and not (path / "config.json").is_file():
        found = sorted(p.name for p in path.glob("*.gguf"))
        if len(found) > 1:
            raise ValueError(f"{str(path)!r} holds {len(found)} GGUF files ({', '.join(found[:4])}): name one")
        if found:
            return path, found[0]
    return None


def architecture(folder: Path, name: str) -> str:
    """The GGUF's ``general.architecture`` (llama, gemma3, qwen2 ...), read from its header."""
    from gguf import GGUFReader

    field = GGUFReader(str(folder / name)).fields["general.architecture"]
    return bytes(field.parts[field.data[0]]).decode()


def load(folder: Path, name: str, dtype):
    """(model, tokenizer) from a GGUF, dequantized to ``dtype`` (float32 by default), with readable errors."""
    if find_spec("gguf") is None:
        raise ValueError(f"loading {name!r} needs the gguf package: {INSTALL}")
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES

    arch = architecture(folder, name)
    if arch not in GGUF_SUPPORTED_ARCHITECTURES and arch.split("-")[0] not in GGUF_SUPPORTED_ARCHITECTURES:
        raise ValueError(f"{name!r} is a GGUF of architecture {arch!r}, which transformers cannot read from GGUF "
                         f"(it reads: {', '.join(sorted(GGUF_SUPPORTED_ARCHITECTURES))})")
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(folder), gguf_file=name)
        model = AutoModelForCausalLM.from_pretrained(str(folder), gguf_file=name, dtype=dtype)
    except (OSError, ValueError, KeyError) as e:
        raise ValueError(f"could not load the GGUF {name!r} ({arch}): {str(e).splitlines()[0]}") from e
    return plain(model), tokenizer


def plain(model):
    """The model as an ordinary float one: transformers' GGUF quantizer cleared, so save_pretrained works."""
    model.hf_quantizer = None
    model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    return model


def convert(gguf_path: str, out: str) -> Path:
    """Save a GGUF as a plain folder (safetensors, config, tokenizer): later loads take seconds."""
    import torch

    found = locate(gguf_path)
    if found is None:
        raise ValueError(f"{gguf_path!r} is not a GGUF file nor a folder holding one")
    model, tokenizer = load(*found, torch.float32)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return Path(out)


def main() -> None:
    ap = argparse.ArgumentParser(description="Convert a GGUF into a plain transformers folder, once.")
    ap.add_argument("gguf", help="a .gguf file, or a folder holding one")
    ap.add_argument("out", help="the folder to write")
    args = ap.parse_args()
    print(f"wrote {convert(args.gguf, args.out)}")


if __name__ == "__main__":
    main()
