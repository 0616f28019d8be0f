"""The C stack's single operators: a weight packed into column panels once, a matmul over it, RMSNorm of rows."""
from __future__ import annotations

import torch

from ..by_identity import IdentityCache
from ..threads import policy
from .library import check_tensor, lib, need, ptr

# -- packed weights, one per weight tensor (held weakly: a model's weights live as long as it does) ----------------
_PACKED = IdentityCache()  # W_t -> its packed panels


def packed(w_t: torch.Tensor) -> torch.Tensor:
    """W_t (K, N) packed into column panels (sv_pack), once per weight tensor."""
    return _PACKED.cached(w_t, lambda: _pack(w_t))


def _pack(w_t: torch.Tensor) -> torch.Tensor:
    check_tensor("W_t", w_t, (None, None), contiguous=False)
    need(min(w_t.shape) > 0, f"W_t must have rows and columns, not {tuple(w_t.shape)}")
    so, (k, n) = lib(), w_t.shape
    width = so.sv_panel_width()
    out = torch.empty(((n + width - 1) // width) * width * k, dtype=torch.float32, device="cpu")
    so.sv_pack(ptr(w_t.contiguous()), k, n, out.data_ptr())
    return out


def linear(x: torch.Tensor, w_t: torch.Tensor, b: torch.Tensor | None = None,
           residual: torch.Tensor | None = None) -> torch.Tensor:
    """residual + x @ W_t + b for x (M, K) in C over W_t's packed panels."""
    check_tensor("x", x, (None, None), contiguous=False)
    check_tensor("W_t", w_t, (x.shape[1], None), contiguous=False)
    m, n = x.shape[0], w_t.shape[1]
    if b is not None:
        check_tensor("the bias", b, (n,))
    if residual is not None:
        check_tensor("the residual", residual, (m, n), contiguous=False)
    so = lib()
    x = x.contiguous()
    out = torch.empty(m, n, dtype=torch.float32, device="cpu")
    residual, panels = None if residual is None else residual.contiguous(), packed(w_t)
    with policy.timed(("linear", *x.shape, w_t.shape[1])) as threads:  # threads chosen for this shape, timed
        so.sv_linear(x.data_ptr(), x.shape[0], x.shape[1], panels.data_ptr(), w_t.shape[1], ptr(b),
                     ptr(residual), out.data_ptr(), threads)
    return out


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm of each row of x (n, d) in C (torch's F.rms_norm, one call instead of a dispatch per operator)."""
    check_tensor("x", x, (None, None), contiguous=False)
    check_tensor("the norm's weight", weight, (x.shape[1],))
    need(isinstance(eps, (int, float)) and eps >= 0, f"eps must be a number >= 0, not {eps!r}")
    x = x.contiguous()
    out = torch.empty(x.shape, dtype=torch.float32, device="cpu")
    lib().sv_rms_norm(x.data_ptr(), x.shape[0], x.shape[1], weight.data_ptr(), eps, out.data_ptr())
    return out
