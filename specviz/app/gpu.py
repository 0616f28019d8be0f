"""ZeroGPU on Hugging Face Spaces: a GPU is attached only while a function decorated with
``spaces.GPU`` runs. ``gpu_task`` applies that decorator there and nowhere else, so the same
handlers run unchanged on a CPU, on a local GPU and on a Space."""
from __future__ import annotations

import os
from collections.abc import Callable

ZERO_GPU_ENV = "SPACES_ZERO_GPU"  # set by Hugging Face on ZeroGPU Spaces
GPU_SECONDS = 120  # the longest a decorated call may hold the GPU (ZeroGPU's default is 60)


def on_zero_gpu() -> bool:
    return os.environ.get(ZERO_GPU_ENV, "").strip().lower() not in {"", "0", "false", "no"}


def gpu_task(fn: Callable) -> Callable:
    """``spaces.GPU(duration=GPU_SECONDS)(fn)`` on ZeroGPU with the ``spaces`` package importable; else fn itself."""
    if not on_zero_gpu():
        return fn
    try:
        import spaces
    except ImportError:
        return fn
    return spaces.GPU(duration=GPU_SECONDS)(fn)
