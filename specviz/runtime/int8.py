"""Weights stored in 8 bits, computed in full precision: how the bundled family fits its size budget.

Every matrix is stored as int8 rows with one float16 scale per row (symmetric: w ~ q * scale, scale =
max|row| / 127); vectors (norms, biases) stay float16. Loading dequantizes once into an ordinary transformers
model in the requested dtype, so the model that runs IS the dequantized one: its logits, its greedy text and
every figure measured on it describe exactly what is shipped (the quantization step happened before, like the
float32 -> float16 step of a float16 checkpoint).
"""
from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

FILE = "model.int8.safetensors"
SCALE = ".int8_scale"


def quantize(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(int8 rows, float16 scale per row) of a matrix: w ~ q * scale."""
    w = w.detach().float()
    scale = (w.abs().amax(dim=1, keepdim=True) / 127).clamp(min=1e-12).half()
    q = torch.round(w / scale.float()).clamp(-127, 127).to(torch.int8)
    return q, scale


def dequantize(q: torch.Tensor, scale: torch.Tensor, dtype=torch.float32) -> torch.Tensor:
    return (q.float() * scale.float()).to(dtype)


def save(model, folder) -> Path:
    """Write the model's config and its weights in 8 bits (tied weights once) to folder; returns the file."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    model.config.save_pretrained(folder)
    if getattr(model, "generation_config", None) is not None:
        model.generation_config.save_pretrained(folder)
    save_file(pack(model.state_dict()), folder / FILE)
    return folder / FILE


def pack(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Tensors to store: every matrix as int8 rows plus its scales, vectors as float16, tied weights once."""
    tensors, seen = {}, set()
    for name, t in state.items():
        if t.data_ptr() in seen:  # a tied weight (the LM head): stored once
            continue
        seen.add(t.data_ptr())
        if t.dim() == 2:
            tensors[name], tensors[name + SCALE] = quantize(t)
        else:
            tensors[name] = t.detach().half()
    return {k: v.contiguous() for k, v in tensors.items()}


def unpack(raw: dict[str, torch.Tensor], dtype=torch.float32) -> dict[str, torch.Tensor]:
    """The weights ``pack`` stored, dequantized (a tensor without a scale is simply cast)."""
    return {name: dequantize(t, raw[name + SCALE], dtype) if name + SCALE in raw else t.to(dtype)
            for name, t in raw.items() if not name.endswith(SCALE)}


def stored(folder) -> bool:
    return (Path(folder) / FILE).is_file()


def state_dict(folder, dtype=torch.float32) -> dict[str, torch.Tensor]:
    """The dequantized weights, by parameter name."""
    return unpack(load_file(Path(folder) / FILE), dtype)


def load(folder, dtype=torch.float32):
    """An ordinary transformers causal LM with the dequantized weights (tied weights re-tied)."""
    from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig

    config = AutoConfig.from_pretrained(folder, local_files_only=True)
    model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    missing, unexpected = model.load_state_dict(state_dict(folder, dtype), strict=False)
    tied = {name for name in missing if name.endswith("lm_head.weight")} if config.tie_word_embeddings else set()
    if set(missing) - tied or unexpected:
        raise ValueError(f"{folder}: weights do not match the config (missing {sorted(set(missing) - tied)}, "
                         f"unexpected {sorted(unexpected)})")
    model.tie_weights()
    if (Path(folder) / "generation_config.json").is_file():
        model.generation_config = GenerationConfig.from_pretrained(folder)
    return model.eval()


def parameter_count(folder) -> int:
    raw = load_file(Path(folder) / FILE)
    return sum(t.numel() for name, t in raw.items() if not name.endswith(SCALE))
