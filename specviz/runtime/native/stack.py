"""A lean Llama layer stack run by ``stack.c``'s sv_layers: the blocks' weights packed once (``Layer`` structs held
per block), every layer of a pass in one call."""
from __future__ import annotations

import ctypes

import torch

from ..by_identity import IdentityCache
from ..threads import policy
from .library import MAX_HEAD_DIM, Dims, Head, Layer, fits, lib, ptr
from .ops import packed

_LAYERS = IdentityCache()  # Block -> (its Layer struct, the packed tensors it points into)


def _layer(blk, inter: int) -> Layer:
    return _LAYERS.cached(blk, lambda: _make_layer(blk, inter))[0]


def _make_layer(blk, inter: int) -> tuple:
    """The Layer struct sv_layers reads for blk, and the tensors its pointers point into (kept alive with it)."""
    gate_t, up_t = blk.gu_t[:, :inter].contiguous(), blk.gu_t[:, inter:].contiguous()
    gate_b, up_b = (None, None) if blk.gu_b is None else (blk.gu_b[:inter].contiguous(), blk.gu_b[inter:].contiguous())
    keep = [packed(blk.qkv_t), packed(blk.o_t), packed(gate_t), packed(up_t), packed(blk.down_t),
            gate_t, up_t, gate_b, up_b]
    s = Layer(ptr(blk.ln1), ptr(keep[0]), ptr(blk.qkv_b), ptr(keep[1]), ptr(blk.o_b), ptr(blk.ln2),
              ptr(keep[2]), ptr(gate_b), ptr(keep[3]), ptr(up_b), ptr(keep[4]), ptr(blk.down_b),
              ptr(blk.q_norm), ptr(blk.k_norm))
    return s, keep


def supports_stack(blocks, kv_dtype: torch.dtype, hd: int, rot: int) -> bool:
    """Whether these blocks (``lean_families.Block``) and their cache can run in C here."""
    if kv_dtype != torch.float32 or hd > MAX_HEAD_DIM or rot % 2 or not blocks:
        return False
    return all((b.q_norm is None) == (b.k_norm is None) and fits(b.ln1, b.qkv_t, b.qkv_b, b.o_t, b.o_b, b.gu_t, b.gu_b,
                                                                 b.down_t, b.down_b, b.q_norm, b.k_norm)
               for b in blocks)


class Stack:
    """(Block, cache) pairs as sv_layers takes them, their pointer arrays built once (a model's own stack: once per
    cache allocation). ``fits``: the caches are float32, contiguous and of one capacity."""

    def __init__(self, pairs: list, inter: int):
        self.pairs, self.count, self.cap = pairs, len(pairs), pairs[0][1].shape[1]
        self.fits = all(kv.shape[1] == self.cap and kv.dtype == torch.float32 and kv.is_contiguous() for _, kv in pairs)
        if self.fits:
            self.structs = (ctypes.c_void_p * self.count)(*[ctypes.addressof(_layer(blk, inter)) for blk, _ in pairs])
            self.caches = (ctypes.c_void_p * self.count)(*[kv.data_ptr() for _, kv in pairs])


def layers(x: torch.Tensor, start: int, stack, dims: Dims, cos: torch.Tensor, sin: torch.Tensor,
           positions: torch.Tensor | None = None, visible: torch.Tensor | None = None, head: tuple | None = None):
    """Rows x (n, d) at cache slots start..start+n-1 through ``stack`` (a ``Stack``, or pairs (Block, its cache
    (2 nkv, capacity, hd))), each writing its keys and values there; cos and sin (positions, rot) by position
    (``lean_common.rope_tables``); positions (n,) and visible (n, start + n) as ``LeanLlama.layers`` takes them.
    Returns the rows after the last block; with ``head`` = (norm weight, head W_t (d, V), its bias or None, first
    row), the final RMSNorm and the LM head in the same call: (every row normed (n, d), the logits of rows first..n-1
    (n - first, V)). None where the caches are not all float32, contiguous and of one capacity (the caller then runs
    torch's layers)."""
    if not isinstance(stack, Stack):
        stack = Stack(list(stack), dims.inter)
    if not stack.fits:
        return None
    so = lib()
    x = x.contiguous().clone()
    n = x.shape[0]
    pos = None if positions is None else positions.to(torch.int64).contiguous()
    vis = None if visible is None else visible.to(torch.uint8).contiguous()
    out, shape = None, ("layers", stack.count, n, dims.d, dims.inter)  # the call's shape, as its timings are kept
    if head is not None:
        norm, head_t, head_b, first = head
        out = torch.empty(n, x.shape[1]), torch.empty(n - first, head_t.shape[1])
        head = ctypes.byref(Head(ptr(norm), ptr(packed(head_t)), ptr(head_b), head_t.shape[1], first, ptr(out[0]),
                                 ptr(out[1])))
        shape += (n - first, head_t.shape[1])
    with policy.timed(shape) as threads:
        if so.sv_layers(ctypes.byref(dims), stack.structs, stack.caches, stack.count, x.data_ptr(), n, start, stack.cap,
                        cos.data_ptr(), sin.data_ptr(), ptr(pos), ptr(vis), head, threads) != 0:
            raise MemoryError("the native layer stack could not allocate its scratch memory")
    return x if out is None else out

