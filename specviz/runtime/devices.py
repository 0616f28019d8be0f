"""Where and in what precision models load: the device (SPECVIZ_DEVICE, else CUDA where present, else the CPU),
the dtype per device, and whether a model's weights need spreading over devices."""
from __future__ import annotations

import os


def default_device() -> str:
    """SPECVIZ_DEVICE if set, else "cuda" where available, else "cpu"."""
    import torch

    return os.environ.get("SPECVIZ_DEVICE") or ("cuda" if torch.cuda.is_available() else "cpu")


def default_dtype(device: str | None):
    """float32 on CPUs (half precision is slow there), bfloat16 on CUDA (float16 where bf16 is missing)."""
    import torch

    device = device or "cpu"
    if device.startswith("cuda"):
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.float32 if device == "cpu" else "auto"


def needs_device_map(n_params: int | None, dtype, free_bytes: int, headroom: float = 0.85) -> bool:
    """Whether the weights (n_params in dtype) overflow ``headroom`` of a GPU's free memory."""
    import torch

    size = torch.empty((), dtype=dtype).element_size() if isinstance(dtype, torch.dtype) else 2
    return n_params is not None and n_params * size > headroom * free_bytes
