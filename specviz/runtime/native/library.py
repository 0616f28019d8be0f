"""The C library's Python side for torch (``build`` compiles and loads it without torch): the checks every tensor passes
before a pointer reaches C, a tensor's address, and the switch that sends every lean forward to torch (``disabled``)."""
from __future__ import annotations

from contextlib import contextmanager

import torch

from .build import (  # noqa: F401
    CACHE_ENV,
    ENV,
    FLAGS,
    MAX_HEAD_DIM,
    PIN_ENV,
    SOURCE,
    Dims,
    GHead,
    GLayer,
    Head,
    Layer,
    QMat,
    disagreement,
    lib,
    need,
    unavailable,
)


def check_tensor(name: str, t, shape: tuple | None = None, contiguous: bool = True) -> None:
    """That t is a float32 tensor on the CPU (contiguous, of this shape where given: None in it takes any size), as C
    reads or writes it. Each message is built only where its check fails (a pass checks some 20 tensors)."""
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"{name} must be a tensor, not {type(t).__name__}")
    if t.dtype is not torch.float32:
        raise ValueError(f"{name} must be float32 for the C stack, not {t.dtype}")
    if t.device.type != "cpu":
        raise ValueError(f"{name} must be on the CPU for the C stack, not {t.device}")
    if contiguous and not t.is_contiguous():
        raise ValueError(f"{name} must be contiguous for the C stack")
    if shape is not None and (t.dim() != len(shape) or any(w is not None and g != w for g, w in zip(t.shape, shape))):
        raise ValueError(f"{name} must be of shape {_shape(shape)}, not {_shape(t.shape)}")


def _shape(shape) -> str:
    """(2, *) for (2, None): a shape as an error message shows it."""
    sizes = ["*" if size is None else str(size) for size in shape]
    return f"({sizes[0]},)" if len(sizes) == 1 else f"({', '.join(sizes)})"


def ptr(t: torch.Tensor | None) -> int | None:
    """A tensor's data address for ctypes, None for None."""
    return None if t is None else t.data_ptr()


def fits(*tensors: torch.Tensor | None) -> bool:
    """Whether these tensors can go through the C stack: float32 on the CPU, the library loaded and not switched
    off (``disabled``)."""
    return _on[0] and all(t is None or (t.dtype == torch.float32 and t.device.type == "cpu") for t in tensors) \
        and lib() is not None


_on = [True]


@contextmanager
def disabled():
    """Within it, every lean forward runs on torch (a benchmark's or a test's other side)."""
    before, _on[0] = _on[0], False
    try:
        yield
    finally:
        _on[0] = before


def enabled() -> bool:
    return _on[0] and lib() is not None
