"""The C stack's boundary (specviz.runtime.native): each entry (the layer stack, the matmul, RMSNorm, the packing)
refuses every kind of wrong argument with a ValueError before a pointer reaches C, and writes nothing (the caches
are compared before and after); its outputs are float32 on the CPU whatever torch's default dtype (checked against
the same call under float32); the limits and struct sizes that library.py keeps are compared with stack.c's when
the library loads (a disagreement: unavailable, with the reason)."""
import ctypes
import dataclasses

import pytest
import torch

from specviz.runtime import lean_llama, native
from specviz.runtime.native import library
from tests.helpers.models import tiny_llama

pytestmark = pytest.mark.skipif(native.unavailable() is not None, reason=f"{native.unavailable()}")

F32 = dict(dtype=torch.float32, device="cpu")


@pytest.fixture(scope="module")
def lean():
    lm = lean_llama.LeanLlama(tiny_llama(layers=2).float().cpu())
    lm.kv.zero_()  # every slot a pass may attend to holds numbers
    return lm


def valid(lm, n: int = 3, start: int = 0) -> dict:
    """native.layers' arguments for a pass of n rows at slots start.. through the model's own stack, with its head."""
    x = torch.randn(n, lm.dims.d, generator=torch.Generator().manual_seed(n), **F32)
    w, stack = lm.w, lm._c_stack(lm._stack(None))
    return dict(x=x, start=start, stack=stack, dims=lm.dims, cos=lm.cos, sin=lm.sin, positions=None, visible=None,
                head=(w.norm, w.head_t, w.head_b, 0))


def other_dims(lm, **change) -> native.Dims:
    fields = {name: getattr(lm.dims, name) for name, _ in native.Dims._fields_}
    return native.Dims(**{**fields, **change})


def block_with(lm, **change) -> list:
    """The model's own (Block, cache) pairs with the first block's weights changed."""
    pairs = list(zip(lm.w.blocks, lm.kv))
    return [(dataclasses.replace(pairs[0][0], **change), pairs[0][1]), *pairs[1:]]


META = torch.empty(3, 32, device="meta")  # a tensor on no CPU (stands for a CUDA one where there is none)
WRONG_LAYERS = {
    "x float64": lambda lm, a: dict(x=a["x"].double()),
    "x float16": lambda lm, a: dict(x=a["x"].half()),
    "x of another width": lambda lm, a: dict(x=torch.zeros(3, lm.dims.d + 1, **F32)),
    "x one-dimensional": lambda lm, a: dict(x=torch.zeros(lm.dims.d, **F32)),
    "x without rows": lambda lm, a: dict(x=torch.zeros(0, lm.dims.d, **F32)),
    "x not on the CPU": lambda lm, a: dict(x=META),
    "start negative": lambda lm, a: dict(start=-1),
    "start not an int": lambda lm, a: dict(start=0.0),
    "past the capacity": lambda lm, a: dict(start=lm.capacity - 2),
    "positions too few": lambda lm, a: dict(positions=torch.tensor([0, 1])),
    "positions floats": lambda lm, a: dict(positions=torch.tensor([0.0, 1.0, 2.0])),
    "positions negative": lambda lm, a: dict(positions=torch.tensor([0, -1, 2])),
    "positions past the tables": lambda lm, a: dict(positions=torch.tensor([0, 1, lm.capacity])),
    "positions past the cache": lambda lm, a: dict(positions=torch.tensor([0, 1, lm.capacity]),
                                                   cos=torch.cat([lm.cos, lm.cos]), sin=torch.cat([lm.sin, lm.sin])),
    "visible of another shape": lambda lm, a: dict(visible=torch.ones(3, 4, dtype=torch.bool)),
    "visible floats": lambda lm, a: dict(visible=torch.ones(3, 3)),
    "visible not a tensor": lambda lm, a: dict(visible=[[True] * 3] * 3),
    "first negative": lambda lm, a: dict(head=(*a["head"][:3], -1)),
    "first past the rows": lambda lm, a: dict(head=(*a["head"][:3], 3)),
    "head not four things": lambda lm, a: dict(head=a["head"][:3]),
    "head norm of another width": lambda lm, a: dict(head=(torch.ones(5, **F32), *a["head"][1:])),
    "head W_t float64": lambda lm, a: dict(head=(a["head"][0], a["head"][1].double(), *a["head"][2:])),
    "head bias of another width": lambda lm, a: dict(head=(*a["head"][:2], torch.zeros(3, **F32), 0)),
    "cos float64": lambda lm, a: dict(cos=lm.cos.double()),
    "cos of another rot": lambda lm, a: dict(cos=lm.cos[:, :-2].contiguous()),
    "sin not as cos": lambda lm, a: dict(sin=lm.sin[:10].contiguous()),
    "a head over the limit": lambda lm, a: dict(dims=other_dims(lm, hd=library.MAX_HEAD_DIM + 2)),
    "heads not shared evenly": lambda lm, a: dict(dims=other_dims(lm, nkv=3)),
    "rot odd": lambda lm, a: dict(dims=other_dims(lm, rot=lm.dims.rot - 1)),
    "dims not Dims": lambda lm, a: dict(dims=(32, 2, 2, 16, 64, 16)),
    "dims not the stack's": lambda lm, a: dict(dims=other_dims(lm, inter=lm.dims.inter * 2)),
    "a cache of another shape": lambda lm, a: dict(stack=[(lm.w.blocks[0], torch.zeros(4, lm.capacity, 8, **F32))]),
    "no pairs": lambda lm, a: dict(stack=[]),
    "a block's norm of another width": lambda lm, a: dict(stack=block_with(lm, ln1=torch.ones(7, **F32))),
    "a block's weight float64": lambda lm, a: dict(stack=block_with(lm, o_t=lm.w.blocks[0].o_t.double())),
    "a block's q_norm alone": lambda lm, a: dict(stack=block_with(lm, q_norm=torch.ones(lm.hd, **F32))),
}

SAYS = {  # what the refusal of each says (the check meant for it fired, not another one)
    "x float64": "x must be float32", "x float16": "x must be float32",
    "x of another width": r"x must be of shape \(\*, 32\), not \(3, 33\)",
    "x one-dimensional": r"x must be of shape \(\*, 32\)", "x without rows": "no rows",
    "x not on the CPU": "x must be on the CPU",
    "start negative": "start must be a slot", "start not an int": "start must be a slot",
    "past the capacity": r"slots 254..256 run past the cache's capacity of 256 positions \(LeanLlama.reserve\(257\)",
    "positions too few": r"positions must be a tensor of shape \(3,\)", "positions floats": "positions must be integers",
    "positions negative": r"positions must lie in \[0, 256\)", "positions past the tables": r"not 0..256",
    "positions past the cache": "refused its arguments", "visible of another shape": r"visible must be of shape \(3, 3\)",
    "visible floats": "visible must be a bool tensor", "visible not a tensor": "visible must be a bool tensor, not list",
    "first negative": r"first must be a row in \[0, 3\)", "first past the rows": r"first must be a row in \[0, 3\), not 3",
    "head not four things": "head must be", "head norm of another width": "final norm's weight must be of shape",
    "head W_t float64": "head's W_t must be float32", "head bias of another width": "head's bias must be of shape",
    "cos float64": "cos must be float32", "cos of another rot": r"cos must be of shape \(\*, 16\)",
    "sin not as cos": "sin must be of shape", "a head over the limit": "over the C stack's 512",
    "heads not shared evenly": "do not share", "rot odd": "rot must be even", "dims not Dims": "dims must be a native.Dims",
    "dims not the stack's": "the stack was built for dims", "a cache of another shape": "layer 0's cache must be of shape",
    "no pairs": "at least one", "a block's norm of another width": "a block's ln1 must be of shape",
    "a block's weight float64": "a block's o_t must be float32", "a block's q_norm alone": "q_norm and k_norm come together",
}


@pytest.mark.parametrize("case", list(WRONG_LAYERS))
def test_the_layer_stack_refuses_a_wrong_argument_and_writes_nothing(lean, case):
    args = valid(lean)
    args.update(WRONG_LAYERS[case](lean, args))
    caches = lean.kv.clone()  # compared bit for bit (unwritten slots may hold NaNs)
    with pytest.raises(ValueError, match=SAYS[case]):
        native.layers(**args)
    assert torch.equal(lean.kv.view(torch.int32), caches.view(torch.int32))  # nothing reached C: no slot written
    h, logits = native.layers(**valid(lean))  # and the next right call still runs
    assert h.shape == (3, lean.dims.d) and logits.shape == (3, lean.w.head_t.shape[1])


def test_a_right_call_matches_the_torch_layers(lean):
    """The checks pass what is right: a tree pass (positions, visible, first) agrees with torch's layers."""
    args = valid(lean, n=4, start=2)
    args.update(positions=torch.tensor([2, 3, 3, 4]), head=(*args["head"][:3], 1),
                visible=torch.tensor([[1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 0, 0], [1, 1, 1, 0, 1, 0],
                                      [1, 1, 1, 1, 0, 1]], dtype=torch.bool))
    h, logits = native.layers(**args)
    x = lean._torch_layers(args["x"], 2, list(zip(lean.w.blocks, lean.kv)), args["positions"], args["visible"])
    want = lean_llama.rms_norm(x, lean.w.norm, lean.eps)
    torch.testing.assert_close(h, want, atol=2e-5, rtol=1e-4)
    torch.testing.assert_close(logits, lean.logits(want[1:]), atol=2e-5, rtol=1e-4)


def test_a_pass_over_the_models_own_cache_reserves_what_it_writes():
    lm = lean_llama.LeanLlama(tiny_llama(layers=2).float().cpu())
    start, x = lm.capacity - 1, torch.zeros(3, lm.dims.d, **F32)
    lm.kv.zero_()
    lm.length = start  # slots 0..start-1 written (zeros), kept when the cache grows
    with pytest.raises(ValueError, match="capacity"):  # a given stack cannot grow: refused
        native.layers(x, start, list(zip(lm.w.blocks, lm.kv)), lm.dims, lm.cos, lm.sin)
    h, logits = lm.through_head(x, start)  # its own cache: grown first
    assert lm.capacity >= start + 3 and h.shape == (3, lm.dims.d) and torch.isfinite(logits).all()


W = torch.randn(20, 45, generator=torch.Generator().manual_seed(0), **F32)
X = torch.randn(3, 20, generator=torch.Generator().manual_seed(1), **F32)
WRONG_OPS = {
    "pack float64": lambda: native.packed(W.double()),
    "pack float16": lambda: native.packed(W.half()),
    "pack one-dimensional": lambda: native.packed(torch.zeros(5, **F32)),
    "pack not on the CPU": lambda: native.packed(torch.empty(4, 4, device="meta")),
    "pack without rows": lambda: native.packed(torch.zeros(0, 4, **F32)),
    "linear x float64": lambda: native.linear(X.double(), W),
    "linear x of another width": lambda: native.linear(X[:, :19], W),
    "linear x not on the CPU": lambda: native.linear(torch.empty(3, 20, device="meta"), W),
    "linear W_t float16": lambda: native.linear(X, W.half()),
    "linear bias of another width": lambda: native.linear(X, W, torch.zeros(44, **F32)),
    "linear bias not contiguous": lambda: native.linear(X, W, torch.zeros(90, **F32)[::2]),
    "linear bias float64": lambda: native.linear(X, W, torch.zeros(45, dtype=torch.float64)),
    "linear residual of another shape": lambda: native.linear(X, W, None, torch.zeros(2, 45, **F32)),
    "linear residual float64": lambda: native.linear(X, W, None, torch.zeros(3, 45, dtype=torch.float64)),
    "norm x float64": lambda: native.rms_norm(X.double(), torch.ones(20, **F32), 1e-6),
    "norm x one-dimensional": lambda: native.rms_norm(X[0], torch.ones(20, **F32), 1e-6),
    "norm weight of another width": lambda: native.rms_norm(X, torch.ones(21, **F32), 1e-6),
    "norm weight not contiguous": lambda: native.rms_norm(X, torch.ones(40, **F32)[::2], 1e-6),
    "norm weight float16": lambda: native.rms_norm(X, torch.ones(20, dtype=torch.float16), 1e-6),
    "norm eps negative": lambda: native.rms_norm(X, torch.ones(20, **F32), -1.0),
    "norm eps not a number": lambda: native.rms_norm(X, torch.ones(20, **F32), "1e-6"),
}


@pytest.mark.parametrize("case", list(WRONG_OPS))
def test_the_matmul_norm_and_packing_refuse_a_wrong_argument(case):
    with pytest.raises(ValueError):
        WRONG_OPS[case]()


@pytest.fixture(params=[torch.float16, torch.float64])
def default_dtype(request):
    before = torch.get_default_dtype()
    torch.set_default_dtype(request.param)
    try:
        yield request.param
    finally:
        torch.set_default_dtype(before)


def test_outputs_are_float32_whatever_torchs_default_dtype(lean, default_dtype):
    """Under a float16 default the packing wrote past its buffer, under float64 C's floats were read as doubles."""
    w = torch.randn(33, 70, generator=torch.Generator().manual_seed(3), **F32)  # never packed before: packed here
    x, b = torch.randn(5, 33, generator=torch.Generator().manual_seed(4), **F32), torch.ones(70, **F32)
    got = native.linear(x, w, b)
    norm = native.rms_norm(x, torch.ones(33, **F32), 1e-6)
    h, logits = native.layers(**valid(lean))
    assert native.packed(w).dtype == torch.float32 and torch.get_default_dtype() == default_dtype
    torch.set_default_dtype(torch.float32)
    torch.testing.assert_close(got, x.double().mm(w.double()).add(1).float(), rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(norm, torch.nn.functional.rms_norm(x, (33,), eps=1e-6))
    want_h, want_logits = native.layers(**valid(lean))
    assert torch.equal(h, want_h) and torch.equal(logits, want_logits)


@pytest.mark.parametrize("struct", ["Layer", "GLayer", "GHead"])
def test_a_limit_or_struct_that_disagrees_with_stack_c_leaves_the_library_unavailable(monkeypatch, struct):
    from specviz.runtime.native import build

    assert build.disagreement(build.lib()) is None  # as shipped, they agree
    monkeypatch.setattr(build, "_state", {})
    monkeypatch.setattr(build, "MAX_HEAD_DIM", 256)
    assert native.unavailable() == library.unavailable() == build.unavailable()
    assert "MAX_HEAD_DIM is 256 here, 512 in stack.c" in library.unavailable() and library.lib() is None

    class Short(ctypes.Structure):  # one field short
        _fields_ = getattr(build, struct)._fields_[:-1]

    monkeypatch.setattr(build, "_state", {})
    monkeypatch.setattr(build, "MAX_HEAD_DIM", 512)
    monkeypatch.setattr(build, struct, Short)
    assert f"sizeof({struct})" in library.unavailable() and not native.enabled()


# -- the quantized matmul and lookup (specviz.runtime.quant): the torch side refuses, and so does C -------------------
def q8(rows: int = 5, cols: int = 64):
    from specviz.runtime import quant

    return quant.quantize_q8_0(torch.randn(rows, cols, generator=torch.Generator().manual_seed(rows)))


WRONG_QUANT = {
    "x float64": (lambda m: dict(x=torch.zeros(2, 64, dtype=torch.float64)), "x must be float32"),
    "x of another width": (lambda m: dict(x=torch.zeros(2, 96, **F32)), r"x must be of shape \(\*, 64\), not \(2, 96\)"),
    "x not on the CPU": (lambda m: dict(x=torch.empty(2, 64, device="meta")), "x must be on the CPU"),
    "x without rows": (lambda m: dict(x=torch.zeros(0, 64, **F32)), "no rows"),
    "bias of another width": (lambda m: dict(b=torch.zeros(4, **F32)), r"bias must be of shape \(5,\)"),
    "residual of another shape": (lambda m: dict(residual=torch.zeros(2, 4, **F32)), r"residual must be of shape"),
    "weights as a tensor": (lambda m: dict(w=torch.zeros(64, 5, **F32)), "w must be a QuantLinear"),
}


@pytest.mark.parametrize("case", list(WRONG_QUANT))
def test_the_quantized_matmul_refuses_a_wrong_argument(case):
    from specviz.runtime import quant

    m = q8()
    args = dict(x=torch.randn(2, 64, **F32), w=quant.QuantLinear((m,)), b=None, residual=None)
    change, says = WRONG_QUANT[case]
    args.update(change(m))
    with pytest.raises(ValueError, match=says):
        quant.linear(**args)


def test_a_quantized_matrix_refuses_bytes_that_are_not_its_blocks():
    from specviz.runtime import quant

    m = q8()
    with pytest.raises(ValueError, match=r"5 rows of 64 Q8_0 weights are \(5, 68\) bytes, not \(5, 67\)"):
        quant.QuantMatrix(m.data[:, :67].contiguous(), "Q8_0", 5, 64)
    with pytest.raises(ValueError, match="multiple of 256"):
        quant.QuantMatrix(m.data, "Q4_K", 5, 64)  # a K-quant block is 256 weights
    with pytest.raises(ValueError, match="type 'Q2_K' are not read here"):
        quant.QuantMatrix(m.data, "Q2_K", 5, 64)
    with pytest.raises(ValueError, match="must be a uint8 tensor"):
        quant.QuantMatrix(m.data.to(torch.int8), "Q8_0", 5, 64)
    with pytest.raises(ValueError, match="contiguous"):
        quant.QuantMatrix(torch.zeros(68, 5, dtype=torch.uint8).t(), "Q8_0", 5, 64)
    with pytest.raises(ValueError, match="share one input width"):
        quant.QuantLinear((m, q8(3, 96)))
    with pytest.raises(ValueError, match=r"ids must lie in \[0, 5\), not 0..5"):
        quant.rows(m, torch.tensor([0, 5]))
    with pytest.raises(ValueError, match="integer tensor"):
        quant.rows(m, torch.tensor([0.0]))


def test_c_refuses_a_type_or_block_size_it_does_not_read():
    """The last line: called directly with what the torch side would refuse, sv_qlinear and sv_qrows return -2 and
    write nothing."""
    m = q8()
    so, x, y = native.lib(), torch.randn(1, 64, **F32), torch.full((1, 5), 7.0, **F32)
    for kind, cols in ((3, 64), (99, 64), (12, 64), (8, 48)):  # Q4_1, unknown, Q4_K of 64, Q8_0 of 48
        part = library.QMat(m.data.data_ptr(), kind, 5)
        assert so.sv_qlinear(x.data_ptr(), 1, cols, ctypes.byref(part), 1, None, None, y.data_ptr(), 1) == -2
        assert so.sv_qrows(m.data.data_ptr(), kind, 5, cols, torch.zeros(1, dtype=torch.int64).data_ptr(), 1,
                           y.data_ptr()) == -2
    part = library.QMat(m.data.data_ptr(), 8, 5)
    assert so.sv_qrows(m.data.data_ptr(), 8, 5, 64, torch.tensor([5]).data_ptr(), 1, y.data_ptr()) == -2  # past rows
    assert so.sv_qlinear(x.data_ptr(), 0, 64, ctypes.byref(part), 1, None, None, y.data_ptr(), 1) == -2  # no rows
    assert torch.equal(y, torch.full((1, 5), 7.0))
    assert so.sv_qlinear(x.data_ptr(), 1, 64, ctypes.byref(part), 1, None, None, y.data_ptr(), 1) == 0  # and a right one
    assert not torch.equal(y, torch.full((1, 5), 7.0))


def test_c_int8_matmul_refuses_what_it_does_not_unpack():
    """sv_qlinear8 (8-bit activations) reads Q4_0, Q5_0, Q8_0, Q4_K and Q6_K of a width a multiple of 64: anything else,
    or a CPU without VNNI, returns -2 and writes nothing."""
    m = q8(5, 96)
    so, x, y = native.lib(), torch.randn(1, 128, **F32), torch.full((1, 5), 7.0, **F32)
    cases = [(0, 64, 1), (1, 64, 1), (3, 64, 1), (99, 64, 1), (12, 64, 1), (8, 96, 1), (8, 32, 1), (8, 64, 0)]
    for kind, cols, rows in cases:  # F32, F16, Q4_1, unknown, Q4_K of 64, widths 96 and 32, no rows
        part = library.QMat(m.data.data_ptr(), kind, 5)
        assert so.sv_qlinear8(x.data_ptr(), rows, cols, ctypes.byref(part), 1, None, None, y.data_ptr(), 1) == -2
    assert torch.equal(y, torch.full((1, 5), 7.0))
    part = library.QMat(q8(5, 64).data.data_ptr(), 8, 5)
    done = so.sv_qlinear8(x.data_ptr(), 1, 64, ctypes.byref(part), 1, None, None, y.data_ptr(), 1)
    assert done == (0 if so.sv_qlinear8_available() else -2)
