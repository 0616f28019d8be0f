"""The lean forward's several-row matmuls through oneDNN with packed weights (specviz.runtime.packed_linear): the same
product as x @ W_t to fp32 rounding, one row and other dtypes left on the plain matmul, a bad pack refused, and
fp32 speculative decoding (chain and tree, whose verify passes take this path) still equal to greedy decoding; and
per model, the packed path kept only where this host timed it faster (or as SPECVIZ_PACKED forces). The lean forward
runs on torch here (``native.disabled``): where the C stack is built, it takes these matmuls instead."""
import pytest
import torch

from specviz.runtime import lean_llama, native, packed_linear
from tests.helpers.models import assert_greedy_speculative_equals_autoregressive, gqa_llama, perturbed

pytestmark = pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="this torch has no oneDNN")


@pytest.fixture(autouse=True)
def torch_layers():
    with native.disabled():
        yield


def operands(rows, d_in, d_out, seed=0, bias=False):
    g = torch.Generator().manual_seed(seed)
    x, w_t = torch.randn(rows, d_in, generator=g), torch.randn(d_in, d_out, generator=g) / d_in ** 0.5
    return x, w_t, torch.randn(d_out, generator=g) if bias else None, torch.randn(rows, d_out, generator=g)


@pytest.mark.parametrize("rows", [2, 7, 13, 33])
@pytest.mark.parametrize(("bias", "with_residual"), [(False, False), (True, False), (False, True), (True, True)])
def test_packed_product_equals_the_exact_product(rows, bias, with_residual):
    x, w_t, b, residual = operands(rows, 96, 200, seed=rows, bias=bias)
    residual = residual if with_residual else None
    got = packed_linear.linear(x, w_t, b, residual)
    assert got is not None  # the packed path was taken
    want = x.double() @ w_t.double()
    want = want + (0 if b is None else b.double()) + (0 if residual is None else residual.double())
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)


def test_one_row_other_dtypes_and_switched_off_stay_on_the_plain_matmul():
    x, w_t, _, _ = operands(5, 32, 48)
    assert packed_linear.linear(x[:1], w_t, None) is None
    assert packed_linear.linear(x.double(), w_t.double(), None) is None
    assert packed_linear.linear(x.bfloat16(), w_t.bfloat16(), None) is None
    before = packed_linear.set_enabled(False)
    try:
        assert packed_linear.linear(x, w_t, None) is None
    finally:
        packed_linear.set_enabled(before)
    assert packed_linear.linear(x, w_t, None) is not None


def test_a_pack_that_does_not_reproduce_the_product_is_refused(monkeypatch):
    x, w_t, _, _ = operands(4, 32, 48, seed=3)
    real = packed_linear._run
    monkeypatch.setattr(packed_linear, "_run", lambda *a: real(*a) * 1.001)  # a kernel off by 0.1%
    assert packed_linear._pack(w_t, None) is None
    assert packed_linear.linear(x, w_t, None) is None  # ... and the caller falls back to x @ W_t


@pytest.mark.parametrize("path", ["on", "off"])
def test_lean_rows_agree_with_one_row_passes(monkeypatch, path):
    """A 9-row pass (packed, or plain) gives each row the logits that 9 one-row passes (plain matmuls) give, to fp32
    rounding."""
    monkeypatch.setenv(packed_linear.ENV, path)
    model = gqa_llama(seed=7, dtype=torch.float32, tied=True)
    ids = torch.randint(0, 64, (40,), generator=torch.Generator().manual_seed(1))
    lean = lean_llama.LeanLlama(model)
    lean.forward(ids[:31])
    many = lean.forward(ids[31:])
    lean.crop(31)
    one = torch.cat([lean.forward(ids[i: i + 1]) for i in range(31, 40)])
    torch.testing.assert_close(many, one, rtol=1e-5, atol=1e-5)
    w = lean_llama.lean_weights(model)
    assert {packed_linear.chosen(t) for b in w.blocks for t in (b.qkv_t, b.down_t)} == {
        "packed" if path == "on" else "plain"}
    qkv_t = w.blocks[0].qkv_t
    assert (packed_linear.linear(torch.randn(2, qkv_t.shape[0]), qkv_t, None) is None) == (path == "off")


def _steps(n=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(48, 64, generator=g), None, i % 2 == 1) for i in range(n)]


def _slowed(fn, seconds=2e-3):
    import time

    def slow(*a, **k):
        time.sleep(seconds)
        return fn(*a, **k)
    return slow


def test_calibration_keeps_the_packed_path_only_where_it_was_faster(monkeypatch):
    monkeypatch.delenv(packed_linear.ENV, raising=False)
    steps = _steps()
    monkeypatch.setattr(packed_linear, "_run", _slowed(packed_linear._run))  # packed: 2 ms more a matmul
    assert packed_linear.calibrate(steps) == "plain"
    x = torch.randn(7, 48)
    assert all(packed_linear.chosen(w) == "plain" and packed_linear.linear(x, w, None) is None for w, _, _ in steps)
    monkeypatch.undo()
    monkeypatch.setattr(packed_linear, "plain", _slowed(packed_linear.plain))  # plain: 2 ms more a matmul
    assert packed_linear.calibrate(steps) == "packed"  # timed afresh: the earlier choice does not stick
    assert all(packed_linear.chosen(w) == "packed" and packed_linear.linear(x, w, None) is not None
               for w, _, _ in steps)


@pytest.mark.parametrize(("forced", "path"), [("on", "packed"), ("off", "plain")])
def test_specviz_packed_forces_a_path_without_timing(monkeypatch, forced, path):
    monkeypatch.setenv(packed_linear.ENV, forced)
    monkeypatch.setattr(packed_linear.time, "perf_counter", lambda: pytest.fail("timed"))
    steps = _steps(seed=1)
    assert packed_linear.calibrate(steps) == path
    assert {packed_linear.chosen(w) for w, _, _ in steps} == {path}


@pytest.mark.slow
@pytest.mark.parametrize("path", ["on", "off"])
@pytest.mark.parametrize("tree", [None, "3,2,1", "chain:6,2"])
def test_fp32_greedy_speculative_equals_autoregressive(monkeypatch, tree, path):
    monkeypatch.setenv(packed_linear.ENV, path)
    target = gqa_llama(seed=8, layers=3, dtype=torch.float32, tied=True, sharpen=3.0)
    ids = torch.randint(0, 64, (1, 5), generator=torch.Generator().manual_seed(2))
    assert_greedy_speculative_equals_autoregressive(target, perturbed(target, 0.05, seed=9), ids, 6, tree)


def test_a_layer_adopts_the_path_timed_for_its_like_without_timing_again(monkeypatch):
    monkeypatch.delenv(packed_linear.ENV, raising=False)
    timed, fresh = _steps(seed=2), _steps(seed=3)
    monkeypatch.setattr(packed_linear, "_run", _slowed(packed_linear._run))
    assert packed_linear.calibrate(timed) == "plain"
    monkeypatch.setattr(packed_linear.time, "perf_counter", lambda: pytest.fail("timed again"))
    assert packed_linear.adopt(fresh, like=timed[0][0]) == "plain"
    assert {packed_linear.chosen(w) for w, _, _ in fresh} == {"plain"}


@pytest.mark.parametrize("c_stack", [True, False])
def test_nothing_is_timed_or_packed_where_the_c_stack_runs(monkeypatch, c_stack):
    """Where the C stack runs every row count, laying out a model and an early exit with its own adapter layer times
    nothing (calibrate is the torch fallback's); without it, both are calibrated (the exit adopting its model's)."""
    from specviz.drafts.early_exit import early_exit, new_adapter

    calls = []
    monkeypatch.setattr(native, "enabled", lambda: c_stack)
    record = packed_linear._choose  # what calibrate keeps, untimed
    monkeypatch.setattr(packed_linear, "calibrate", lambda steps: calls.append(len(steps)) or record(steps, "plain"))
    model = gqa_llama(seed=10, layers=3, dtype=torch.float32, tied=True)
    lean_llama.lean_weights(early_exit(model, 1, new_adapter(model, 1)))
    assert calls == ([] if c_stack else [3 * 4 + 1])  # 4 matmuls a layer and the head, the adapter adopting those
