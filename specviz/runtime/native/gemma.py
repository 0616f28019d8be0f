"""Gemma-3's layer stack on quantized weights run by ``stack.c``'s sv_gemma_layers: every layer of a pass and the LM
head in one call, each matmul on 8-bit activations (``quant.activations``: AVX-512 VNNI). The structs (``GLayer``
per block, pointing at the blocks' ``QuantLinear`` parts) are built once per weights and checked against the model's
dimensions; every argument is checked here before a pointer reaches C, and C checks the shapes and types once more.

The arithmetic is ``lean_gemma.LeanGemma3``'s on the same activations setting: only the order of float additions
differs, which can tip a rounding of x to 8 bits the other way, and from there the two drift apart by such
roundings (tests/runtime/test_gemma_stack.py)."""
from __future__ import annotations

import ctypes

import torch

from ..by_identity import IdentityCache
from ..threads import policy
from ..timing import head_clock
from .library import Dims, GHead, GLayer, check_tensor, lib, need, ptr

_LAYERS = IdentityCache()  # Weights -> (the GLayer array, the dims it was checked for)


def available() -> bool:
    """Whether the C library is loaded with its 8-bit-activation kernels (AVX-512 VNNI)."""
    so = lib()
    return so is not None and bool(so.sv_qlinear8_available())


def _check(w, dims: Dims) -> None:
    d, width, inter = dims.d, (dims.nh + 2 * dims.nkv) * dims.hd, dims.inter
    for i, blk in enumerate(w.blocks):
        for name, m, rows, cols in (("qkv", blk.qkv_t, width, d), ("o", blk.o_t, d, dims.nh * dims.hd),
                                    ("gate/up", blk.gu_t, 2 * inter, d), ("down", blk.down_t, d, inter)):
            need(m.int8 and (m.rows, m.cols) == (rows, cols),
                 f"layer {i}'s {name} is {m.rows} x {m.cols} (8-bit kernels: {m.int8}), not {rows} x {cols}")
        for name, t, size in (("ln_in", blk.ln_in, d), ("q_norm", blk.q_norm, dims.hd), ("k_norm", blk.k_norm, dims.hd),
                              ("ln_post_attn", blk.ln_post_attn, d), ("ln_pre_mlp", blk.ln_pre_mlp, d),
                              ("ln_post_mlp", blk.ln_post_mlp, d)):
            check_tensor(f"layer {i}'s {name}", t, (size,))
    need(w.head_t.int8 and w.head_t.cols == d, f"the head reads {w.head_t.cols} features, not {d}")
    check_tensor("the final norm's scale", w.norm, (d,))


def _make(w, dims: Dims):
    _check(w, dims)
    arr = (GLayer * len(w.blocks))()
    for s, blk in zip(arr, w.blocks):
        for name in ("ln_in", "q_norm", "k_norm", "ln_post_attn", "ln_pre_mlp", "ln_post_mlp"):
            setattr(s, name, ptr(getattr(blk, name)))
        for name, m in (("qkv", blk.qkv_t), ("o", blk.o_t), ("gu", blk.gu_t), ("down", blk.down_t)):
            setattr(s, name, ctypes.addressof(m._structs))
            setattr(s, "n" + name, len(m.parts))
        s.sliding = int(blk.sliding)
    return arr, (dims.d, dims.nh, dims.nkv, dims.hd, dims.inter)


def layers(w, dims: Dims, x: torch.Tensor, kv: torch.Tensor, start: int, rope: dict, window: int):
    """Logits (n, V) of rows x (n, d) (embedded and scaled) at cache slots start..start+n-1 of ``kv`` (layers,
    2 nkv, capacity, hd), through every layer and the head of Gemma weights ``w``; ``rope`` {sliding: (cos, sin)}
    as ``lean_gemma`` keeps its tables, ``window`` the sliding layers' positions. ValueError where an argument is
    wrong, before a pointer reaches C."""
    arr, checked = _LAYERS.cached(w, lambda: _make(w, dims))
    need(checked == (dims.d, dims.nh, dims.nkv, dims.hd, dims.inter),
         f"the stack was built for dims {checked}, not those given")
    n, cap = _check_call(w, dims, x, kv, start, window)
    tables = [rope.get(False) or rope[True], rope.get(True) or rope[False]]  # the full layers', the sliding ones'

    for cos, sin in tables:
        check_tensor("cos", cos, (None, dims.hd))
        check_tensor("sin", sin, tuple(cos.shape))
        need(cos.shape[0] >= start + n, f"slots up to {start + n - 1} run past the RoPE tables' {cos.shape[0]} rows")
    x = x.contiguous().clone()
    caches = (ctypes.c_void_p * len(w.blocks))(*[kv[i].data_ptr() for i in range(len(w.blocks))])
    h, logits = torch.empty(n, dims.d), torch.empty(n, w.head_t.rows)
    head = GHead(ctypes.addressof(w.head_t._structs), ptr(w.norm), len(w.head_t.parts), w.head_t.rows, 0, ptr(h),
                 ptr(logits))
    with policy.timed(("gemma", len(w.blocks), n, dims.d, dims.inter, w.head_t.rows)) as threads:
        done = lib().sv_gemma_layers(ctypes.byref(dims), arr, caches, len(w.blocks), x.data_ptr(), n, start, cap,
                                     tables[0][0].data_ptr(), tables[0][1].data_ptr(), tables[1][0].data_ptr(),
                                     tables[1][1].data_ptr(), window, ctypes.byref(head), threads)
    need(done != -2, "the native Gemma-3 stack refused its arguments (a matrix type or shape it does not read)")
    if done != 0:
        raise MemoryError("the native Gemma-3 stack could not allocate its scratch memory")
    head_clock.add(head.seconds)
    return logits


def _check_call(w, dims: Dims, x, kv, start, window) -> tuple[int, int]:
    check_tensor("x", x, (None, dims.d), contiguous=False)
    n = x.shape[0]
    need(n > 0, "x has no rows")
    check_tensor("the cache", kv, (len(w.blocks), 2 * dims.nkv, None, dims.hd))
    cap = kv.shape[2]
    need(isinstance(start, int) and not isinstance(start, bool) and start >= 0 and start + n <= cap,
         f"slots {start}..{start + n - 1} must lie in the cache's {cap} positions")
    need(isinstance(window, int) and window > 0, f"the sliding window must be a positive int, not {window!r}")
    return n, cap


