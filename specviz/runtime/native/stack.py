"""A lean Llama layer stack run by ``stack.c``'s sv_layers: the blocks' weights packed once (``Layer`` structs held
per block), every layer of a pass in one call."""
from __future__ import annotations

import ctypes

import torch

from ..by_identity import IdentityCache
from ..threads import policy
from ..timing import head_clock
from .library import MAX_HEAD_DIM, Dims, Head, Layer, check_tensor, fits, lib, need, ptr
from .ops import packed

_LAYERS = IdentityCache()  # Block -> (its Layer struct, the packed tensors it points into, the shapes it was checked for)


def _shapes(dims: Dims) -> tuple:
    return dims.d, dims.nh, dims.nkv, dims.hd, dims.inter


def _layer(blk, dims: Dims) -> Layer:
    s, _, checked = _LAYERS.cached(blk, lambda: _make_layer(blk, dims))
    if checked != _shapes(dims):  # the same block in a stack of other dimensions: its shapes must fit them too
        _check_block(blk, dims)
    return s


def _check_block(blk, dims: Dims) -> None:
    """That a block's weights are float32 CPU tensors of the shapes ``dims`` says (ggml's GGML_ASSERT at the boundary:
    a wrong size stops here, not as a stray read in C)."""
    d, hd, inter, width = dims.d, dims.hd, dims.inter, (dims.nh + 2 * dims.nkv) * dims.hd
    for name, t, shape in (("ln1", blk.ln1, (d,)), ("qkv_b", blk.qkv_b, (width,)), ("o_b", blk.o_b, (d,)),
                           ("ln2", blk.ln2, (d,)), ("down_b", blk.down_b, (d,)), ("q_norm", blk.q_norm, (hd,)),
                           ("k_norm", blk.k_norm, (hd,))):
        if t is not None:
            check_tensor(f"a block's {name}", t, shape)
    for name, t, shape in (("qkv_t", blk.qkv_t, (d, width)), ("o_t", blk.o_t, (dims.nh * hd, d)),
                           ("gu_t", blk.gu_t, (d, 2 * inter)), ("gu_b", blk.gu_b, (2 * inter,)),
                           ("down_t", blk.down_t, (inter, d))):
        if t is not None:  # packed or cut into contiguous copies before C reads them
            check_tensor(f"a block's {name}", t, shape, contiguous=False)
    need((blk.q_norm is None) == (blk.k_norm is None), "a block's q_norm and k_norm come together or not at all")


def _make_layer(blk, dims: Dims) -> tuple:
    """The Layer struct sv_layers reads for blk, the tensors its pointers point into (kept alive with it), and the
    shapes it was checked for."""
    _check_block(blk, dims)
    inter = dims.inter
    gate_t, up_t = blk.gu_t[:, :inter].contiguous(), blk.gu_t[:, inter:].contiguous()
    gate_b, up_b = (None, None) if blk.gu_b is None else (blk.gu_b[:inter].contiguous(), blk.gu_b[inter:].contiguous())
    keep = [packed(blk.qkv_t), packed(blk.o_t), packed(gate_t), packed(up_t), packed(blk.down_t),
            gate_t, up_t, gate_b, up_b]
    s = Layer(ptr(blk.ln1), ptr(keep[0]), ptr(blk.qkv_b), ptr(keep[1]), ptr(blk.o_b), ptr(blk.ln2),
              ptr(keep[2]), ptr(gate_b), ptr(keep[3]), ptr(up_b), ptr(keep[4]), ptr(blk.down_b),
              ptr(blk.q_norm), ptr(blk.k_norm))
    return s, keep, _shapes(dims)


def supports_stack(blocks, kv_dtype: torch.dtype, hd: int, rot: int) -> bool:
    """Whether these blocks (``lean_families.Block``) and their cache can run in C here."""
    if kv_dtype != torch.float32 or hd > MAX_HEAD_DIM or rot % 2 or not blocks:
        return False
    return all((b.q_norm is None) == (b.k_norm is None) and fits(b.ln1, b.qkv_t, b.qkv_b, b.o_t, b.o_b, b.gu_t, b.gu_b,
                                                                 b.down_t, b.down_b, b.q_norm, b.k_norm)
               for b in blocks)


class Stack:
    """(Block, cache) pairs as sv_layers takes them, their pointer arrays built once (a model's own stack: once per
    cache allocation) and their shapes checked against ``dims``. ``fits``: the caches are float32, contiguous, on the
    CPU and of one capacity (else the caller runs torch's layers); a cache or a block of other shapes is refused."""

    def __init__(self, pairs: list, dims: Dims):
        _check_dims(dims)
        need(len(pairs) > 0, "the stack needs at least one (block, cache) pair")
        self.pairs, self.count, self.cap, self.shapes = pairs, len(pairs), pairs[0][1].shape[1], _shapes(dims)
        self.fits = all(kv.dim() == 3 and kv.shape[1] == self.cap and kv.dtype == torch.float32 and
                        kv.device.type == "cpu" and kv.is_contiguous() for _, kv in pairs)
        if self.fits:
            for i, (_, kv) in enumerate(pairs):
                check_tensor(f"layer {i}'s cache", kv, (2 * dims.nkv, self.cap, dims.hd))
            self.structs = (ctypes.c_void_p * self.count)(*[ctypes.addressof(_layer(blk, dims)) for blk, _ in pairs])
            self.caches = (ctypes.c_void_p * self.count)(*[kv.data_ptr() for _, kv in pairs])


def _check_dims(dims) -> None:
    need(isinstance(dims, Dims), f"dims must be a native.Dims, not {type(dims).__name__}")
    need(min(dims.d, dims.nh, dims.nkv, dims.hd, dims.inter) > 0, "dims' sizes must all be positive")
    need(dims.hd <= MAX_HEAD_DIM, f"a head of {dims.hd} dims is over the C stack's {MAX_HEAD_DIM}")
    need(dims.nh % dims.nkv == 0, f"{dims.nh} query heads do not share {dims.nkv} key/value heads evenly")
    need(0 <= dims.rot <= dims.hd and dims.rot % 2 == 0, f"rot must be even and in [0, {dims.hd}], not {dims.rot}")


def _check_rows(x, start, cap: int, dims: Dims) -> int:
    """That rows x (n, d) fit slots start..start+n-1 of a cache of ``cap`` positions; n."""
    check_tensor("x", x, (None, dims.d), contiguous=False)
    n = x.shape[0]
    need(n > 0, "x has no rows")
    need(isinstance(start, int) and not isinstance(start, bool) and start >= 0,
         f"start must be a slot (an int >= 0), not {start!r}")
    need(start + n <= cap, f"slots {start}..{start + n - 1} run past the cache's capacity of {cap} positions "
                           f"(LeanLlama.reserve({start + n}) first)")
    return n


def _positions(positions, n: int, start: int, cos, sin, dims: Dims):
    """Each row's position as int64 (n,) for C (None: slot = position), checked against the RoPE tables' rows."""
    check_tensor("cos", cos, (None, dims.rot))
    check_tensor("sin", sin, tuple(cos.shape))
    rows = cos.shape[0]
    if positions is None:
        need(start + n <= rows, f"slots up to {start + n - 1} run past the RoPE tables' {rows} positions")
        return None
    got = tuple(positions.shape) if isinstance(positions, torch.Tensor) else type(positions).__name__
    need(got == (n,), f"positions must be a tensor of shape ({n},), one per row, not {got}")
    need(not positions.is_floating_point() and not positions.is_complex() and positions.dtype != torch.bool,
         f"positions must be integers, not {positions.dtype}")
    need(positions.device.type == "cpu", f"positions must be on the CPU for the C stack, not {positions.device}")
    low, high = int(positions.min()), int(positions.max())
    need(low >= 0 and high < rows, f"positions must lie in [0, {rows}) (the RoPE tables' rows), not {low}..{high}")
    return positions.to(torch.int64).contiguous()


def _visible(visible, n: int, start: int):
    """The tree mask (n, start + n) as uint8 for C (None: causal)."""
    if visible is None:
        return None
    need(isinstance(visible, torch.Tensor) and visible.dtype == torch.bool,
         f"visible must be a bool tensor, not {getattr(visible, 'dtype', type(visible).__name__)}")
    need(visible.shape == (n, start + n), f"visible must be of shape ({n}, {start + n}) (rows, slots 0..start + n - 1), "
                                          f"not {tuple(visible.shape)}")
    need(visible.device.type == "cpu", f"visible must be on the CPU for the C stack, not {visible.device}")
    return visible.to(torch.uint8).contiguous()


def _head(head, n: int, dims: Dims):
    """The Head struct for (norm weight, head W_t (d, V), its bias or None, first row), and its outputs (h, logits)."""
    need(isinstance(head, tuple) and len(head) == 4, "head must be (norm weight, head W_t, its bias or None, first)")
    norm, head_t, head_b, first = head
    check_tensor("the final norm's weight", norm, (dims.d,))
    check_tensor("the head's W_t", head_t, (dims.d, None), contiguous=False)
    vocab = head_t.shape[1]
    if head_b is not None:
        check_tensor("the head's bias", head_b, (vocab,))
    need(isinstance(first, int) and not isinstance(first, bool) and 0 <= first < n,
         f"first must be a row in [0, {n}), not {first!r}")
    out = (torch.empty(n, dims.d, dtype=torch.float32, device="cpu"),
           torch.empty(n - first, vocab, dtype=torch.float32, device="cpu"))
    struct = Head(ptr(norm), ptr(packed(head_t)), ptr(head_b), vocab, first, ptr(out[0]), ptr(out[1]))
    return struct, out


def layers(x: torch.Tensor, start: int, stack, dims: Dims, cos: torch.Tensor, sin: torch.Tensor,
           positions: torch.Tensor | None = None, visible: torch.Tensor | None = None, head: tuple | None = None):
    """Rows x (n, d) at cache slots start..start+n-1 through ``stack`` (a ``Stack``, or pairs (Block, its cache
    (2 nkv, capacity, hd))), each writing its keys and values there; cos and sin (positions, rot) by position
    (``lean_common.rope_tables``); positions (n,) and visible (n, start + n) as ``LeanLlama.layers`` takes them.
    Returns the rows after the last block; with ``head`` = (norm weight, head W_t (d, V), its bias or None, first
    row), the final RMSNorm and the LM head in the same call: (every row normed (n, d), the logits of rows first..n-1
    (n - first, V)). None where the caches are not all float32, contiguous and of one capacity (the caller then runs
    torch's layers). Every argument is checked before a pointer reaches C: ValueError where one is wrong."""
    stack = _fitting(stack, dims)
    if stack is None:
        return None
    n = _check_rows(x, start, stack.cap, dims)
    pos, vis = _positions(positions, n, start, cos, sin, dims), _visible(visible, n, start)
    x = x.contiguous().clone()
    return _called("layers", stack, x, n, dims, head, "its arguments (a position past the cache's capacity)",
                   lambda head, threads: lib().sv_layers(
                       ctypes.byref(dims), stack.structs, stack.caches, stack.count, x.data_ptr(), n, start,
                       stack.cap, cos.data_ptr(), sin.data_ptr(), ptr(pos), ptr(vis), head, threads))


def _fitting(stack, dims: Dims):
    """The stack (built from a list of layers where it is not one yet), checked against ``dims``; None where its
    caches do not fit the C stack (the caller then runs torch's layers)."""
    if not isinstance(stack, Stack):
        stack = Stack(list(stack), dims)
    _check_dims(dims)
    need(stack.shapes == _shapes(dims), f"the stack was built for dims {stack.shapes}, not {_shapes(dims)}")
    return stack if stack.fits else None


def _called(name: str, stack, x: torch.Tensor, n: int, dims: Dims, head, refused: str, call):
    """One C call of the stack on ``n`` rows, on the threads the policy gives the call's shape (with ``head``, the
    final norm and LM head too): the rows (or the head's outputs); ValueError where C refused, saying ``refused``."""
    out, shape, struct = None, (name, stack.count, n, dims.d, dims.inter), None  # its shape, as its timings are kept
    if head is not None:
        struct, out = _head(head, n, dims)
        head = ctypes.byref(struct)
        shape += tuple(out[1].shape)
    with policy.timed(shape) as threads:
        done = call(head, threads)
    need(done != -2, f"the native layer stack refused {refused}")
    if done != 0:
        raise MemoryError("the native layer stack could not allocate its scratch memory")
    if struct is not None:
        head_clock.add(struct.seconds)  # the final norm and the head, timed in C inside the one call
    return x if out is None else out


def _row_indices(name: str, t, n: int) -> torch.Tensor:
    """One int per row, (n,) on the CPU, as int64 for C."""
    got = tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
    need(got == (n,), f"{name} must be a tensor of shape ({n},), one per row, not {got}")
    need(not t.is_floating_point() and not t.is_complex() and t.dtype != torch.bool, f"{name} must be integers, not {t.dtype}")
    need(t.device.type == "cpu", f"{name} must be on the CPU for the C stack, not {t.device}")
    return t.to(torch.int64).contiguous()


def _sequences(slots: torch.Tensor, first: torch.Tensor, positions: torch.Tensor, cap: int, rows: int) -> None:
    """That each row's slot lies in the cache, its first slot at or before it, its position in the RoPE tables' rows,
    and that a sequence's rows (consecutive, one first slot) take slots in order."""
    need(int(slots.min()) >= 0 and int(slots.max()) < cap,
         f"slots must lie in [0, {cap}) (the cache's capacity), not {int(slots.min())}..{int(slots.max())}")
    need(bool((first >= 0).all()) and bool((first <= slots).all()), "each row's first slot must lie in 0..its slot")
    need(int(positions.min()) >= 0 and int(positions.max()) < min(rows, cap),
         f"positions must lie in [0, {min(rows, cap)}) (the RoPE tables' rows and the cache), not "
         f"{int(positions.min())}..{int(positions.max())}")
    same = first[1:] == first[:-1]
    need(bool((slots[1:][same] > slots[:-1][same]).all()), "a sequence's rows (one first slot) must take slots in order")


def layers_rows(x: torch.Tensor, slots, first, positions, stack, dims: Dims, cos: torch.Tensor, sin: torch.Tensor,
                head: tuple | None = None):
    """Rows x (n, d) of several sequences in ONE call of the stack (batched decoding over one cache of per-sequence
    regions): row i writes its keys and values at slot ``slots[i]`` and attends to slots ``first[i]..slots[i]`` (its
    sequence's region, causally) at RoPE position ``positions[i]``; a sequence's rows are consecutive. Returns as
    ``layers`` (with ``head``, its outputs); None where the caches do not fit the C stack. ValueError where an
    argument is wrong, before a pointer reaches C."""
    stack = _fitting(stack, dims)
    if stack is None:
        return None
    n = _check_rows(x, 0, stack.cap, dims)
    check_tensor("cos", cos, (None, dims.rot))
    check_tensor("sin", sin, tuple(cos.shape))
    slots, first, positions = (_row_indices(name, t, n) for name, t in
                               (("slots", slots), ("first", first), ("positions", positions)))
    _sequences(slots, first, positions, stack.cap, cos.shape[0])
    x = x.contiguous().clone()
    return _called("layers_rows", stack, x, n, dims, head, "its rows (a slot, first slot or position out of place)",
                   lambda head, threads: lib().sv_layers_rows(
                       ctypes.byref(dims), stack.structs, stack.caches, stack.count, x.data_ptr(), n,
                       slots.data_ptr(), first.data_ptr(), stack.cap, cos.data_ptr(), sin.data_ptr(),
                       positions.data_ptr(), head, threads))
