"""GGUF files (llama.cpp's format): found, loaded quantized as shipped (Gemma-3) or dequantized, saved plain.

A Gemma-3 GGUF whose matrices are of the types ``quant`` reads (F32, F16, Q4_0, Q5_0, Q8_0, Q4_K, Q6_K: Gemma-3 270M's
Q4_K_M file) loads quantized (``load_quantized``): its tensors stay the file's bytes, memory-mapped, and the lean
forward computes on them in C; its config and tokenizer are built once by transformers from the GGUF and kept in a
private cache folder named by the file's SHA-256 (``SPECVIZ_GGUF_CACHE``/tokenizers/), so a second load takes
seconds; the tokenizer then runs on the ``tokenizers`` library alone (``gguf_tokenizer``). Other GGUFs (or
``SPECVIZ_GGUF=dequantize``) load as below.

transformers reads a GGUF with ``from_pretrained(folder, gguf_file=name)`` (it needs the ``gguf`` package) and
dequantizes it to float; the model it returns still carries a GGUF quantizer, so ``save_pretrained`` refuses it
until that is cleared (``plain``). Converting once (``python -m specviz.runtime.gguf FILE OUT``) makes later loads
take seconds instead of a minute or more (a 262,144-token tokenizer is rebuilt from the GGUF on every load).
"""
from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from importlib.util import find_spec
from pathlib import Path

from .private_cache import cache_folder, digest, private_folder, record, trusted

INSTALL = "pip install gguf"  # transformers' GGUF reader needs it (>= 0.10)
MODE_ENV = "SPECVIZ_GGUF"  # "dequantize": load every GGUF dequantized to float (transformers' reader)


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


def load(folder: Path, name: str, dtype, quantized: bool = True):
    """(model, tokenizer) from a GGUF: quantized as shipped where ``quantized_refusal`` finds nothing against it and
    dtype is float32, else dequantized to ``dtype`` (float32 by default), with readable errors."""
    import torch

    if find_spec("gguf") is None:
        raise ValueError(f"loading {name!r} needs the gguf package: {INSTALL}")
    if quantized and dtype in (None, torch.float32) and quantized_refusal(folder, name) is None:
        return load_quantized(folder, name)
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
    return shipped_file(plain(model), folder / name), tokenizer


def shipped_file(model, path: Path):
    """``model`` with the GGUF it was loaded from recorded (``llamacpp.from_file``), so that llama.cpp's forward runs
    that file as shipped instead of a float32 copy of the dequantized weights; unrecorded where the file's
    architecture or vocabulary is not the config's (that forward then writes its own file, or refuses)."""
    from . import llamacpp

    try:
        return llamacpp.from_file(model, path)  # checks the file against the config once
    except ValueError:
        return model


def quantized_refusal(folder: Path, name: str) -> str | None:
    """Why this GGUF cannot load quantized (``load_quantized``), in words; None where it can."""
    from . import native
    from .quant_gguf import GGUF_TYPES, Header

    if os.environ.get(MODE_ENV, "").strip().lower() == "dequantize":
        return f"{MODE_ENV}=dequantize"
    if native.unavailable() is not None:
        return native.unavailable()
    header = Header(folder / name)
    arch = header.fields.get("general.architecture")
    if arch != "gemma3":
        return f"the quantized forward runs Gemma-3 GGUFs; this one is {arch!r}"
    other = sorted({t for t, shape, _ in header.tensors.values() if t not in GGUF_TYPES})
    if other:
        return f"it holds tensors of GGML types {other}, which the quantized forward does not read"
    return None


def load_quantized(folder: Path, name: str):
    """(model, tokenizer) for a Gemma-3 GGUF whose weights stay quantized as the file stores them
    (``quant_gguf.gemma_model``); the config and tokenizer from the cache, built once."""
    from .quant_gguf import gemma_model

    return gemma_model(folder / name, config(folder, name)), tokenizer(folder, name)


def config(folder: Path, name: str):
    """The GGUF's model config, from the cache where it was built before (``described``), read without transformers
    (``gguf_shell.TextConfig``: the config.json transformers wrote there)."""
    from .gguf_shell import TextConfig

    return TextConfig.from_folder(described(folder, name))


def tokenizer(folder: Path, name: str):
    """The GGUF's tokenizer on the ``tokenizers`` library alone (``gguf_tokenizer``), from the cache where it was
    built before (``described``): the same ids as transformers' tokenizer of the file, in less memory."""
    from .gguf_tokenizer import load as load_tokenizer

    if find_spec("gguf") is None:
        raise ValueError(f"reading {name!r} needs the gguf package: {INSTALL}")
    return load_tokenizer(described(folder, name))


def described(folder: Path, name: str) -> Path:
    """The cache folder holding this GGUF's config and tokenizer as transformers builds them from it, named by the
    file's SHA-256: built here the first time (a minute or more for a 262,144-token vocabulary), then read back in
    seconds. A folder whose files changed since they were written is built again."""
    root = private_folder(cache_folder() / "tokenizers")
    out = root / digest(folder / name)[:32]
    files = [p for p in out.glob("*") if not p.name.endswith(".sha256")] if out.is_dir() else []
    if files and (out / "config.json").is_file() and all(trusted(p) for p in files):
        return out
    shutil.rmtree(out, ignore_errors=True)
    with tempfile.TemporaryDirectory(dir=root) as tmp:
        _describe(folder, name, Path(tmp))
        os.replace(tmp, out)
        os.mkdir(tmp)  # for TemporaryDirectory's cleanup
    for p in out.glob("*"):
        record(p)
    return out


def _describe(folder: Path, name: str, out: Path) -> None:
    from transformers import AutoConfig, AutoTokenizer

    if find_spec("gguf") is None:
        raise ValueError(f"reading {name!r} the first time needs the gguf package: {INSTALL}")
    try:
        AutoConfig.from_pretrained(str(folder), gguf_file=name).save_pretrained(out)
        AutoTokenizer.from_pretrained(str(folder), gguf_file=name).save_pretrained(out)
    except (OSError, ValueError, KeyError) as e:
        raise ValueError(f"could not read the config and tokenizer of {name!r}: {str(e).splitlines()[0]}") from e


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
    model, tokenizer = load(*found, torch.float32, quantized=False)
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
