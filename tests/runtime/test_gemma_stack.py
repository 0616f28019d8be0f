"""Gemma-3's quantized layer stack in C (specviz.runtime.native.gemma, stack.c's sv_gemma_layers): on a tiny Gemma-3
GGUF written here it gives the logits the lean forward's operator-by-operator pass gives on the same 8-bit
activations (sliding windows, several passes, a pass of more rows than one attention block, an early exit on a
pruned head), a row the same floats whatever other rows share its pass, the greedy text of speculative decoding equal
to its own greedy decode; wrong arguments are refused in Python before C, and by C itself."""
import ctypes

import pytest
import torch

from specviz import DecodeConfig, PromptLookupDrafter, speculative_generate
from specviz import autoregressive_generate as ar
from specviz.runtime import lean_gemma, native, quant
from specviz.runtime.native import gemma as native_gemma
from tests.helpers.tiny_gguf import WINDOW, write_tiny_gemma

gguf = pytest.importorskip("gguf")
pytestmark = pytest.mark.skipif(not native_gemma.available(), reason="the 8-bit kernels need AVX-512 VNNI")

IDS = [2, 9, 5, 13, 7, 4, 4, 11, 6, 14, 5, 3, 8, 9, 10, 12, 6, 7, 8, 9, 4, 5, 6]
CUTS = [3, 4, 15, 16, 23]  # passes of 3, 1, 11 (more rows than an attention block of 16 lanes / 2 heads), 1, 7 rows


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from specviz.runtime import gguf as loader

    folder = tmp_path_factory.mktemp("gguf")
    path = write_tiny_gemma(folder / "tiny-gemma3.gguf", kinds=("Q8_0", "Q5_0", "Q8_0"))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SPECVIZ_GGUF_CACHE", str(tmp_path_factory.mktemp("cache")))
        mp.setenv(quant.ACTIVATIONS_ENV, "int8")
        model, _ = loader.load(folder, path.name, torch.float32)
        yield model


@pytest.fixture(autouse=True)
def int8(monkeypatch):
    monkeypatch.setenv(quant.ACTIVATIONS_ENV, "int8")


def passes(model, cuts=CUTS) -> torch.Tensor:
    from specviz.runtime.lm import CachedLM

    lm, out, at = CachedLM(model), [], 0
    assert lm.path == "lean"
    for cut in cuts:
        out.append(lm.feed(IDS[at:cut]))
        at = cut
    return torch.cat(out)


def counted(monkeypatch) -> list:
    calls, real = [], native_gemma.layers
    monkeypatch.setattr(native_gemma, "layers", lambda *a, **k: calls.append(a[2].shape[0]) or real(*a, **k))
    return calls


def test_the_c_stack_gives_the_operator_by_operator_logits(tiny, monkeypatch):
    assert len(IDS) > 4 * WINDOW  # the sliding layers forget
    calls = counted(monkeypatch)
    ours = passes(tiny)
    assert calls == [3, 1, 11, 1, 7]
    monkeypatch.setattr(lean_gemma, "in_c", lambda *a: False)
    theirs = passes(tiny)
    torch.testing.assert_close(ours, theirs, atol=2e-5, rtol=1e-5)


def test_a_row_gets_the_same_floats_whatever_rows_share_its_pass(tiny):
    one_by_one = passes(tiny, list(range(1, len(IDS) + 1)))
    assert torch.equal(passes(tiny), one_by_one)
    assert torch.equal(passes(tiny, [len(IDS)]), one_by_one)


def test_an_early_exit_on_a_pruned_head_runs_in_c_too(tiny, monkeypatch):
    from specviz.drafts.early_exit import early_exit

    exit2 = early_exit(tiny, 2, vocab=[1, 4, 6, 7, 8, 11])
    calls = counted(monkeypatch)
    ours = passes(exit2)
    assert calls and set(ours[:, [0, 2, 3]].flatten().tolist()) == {float("-inf")}  # outside the pruned head
    monkeypatch.setattr(lean_gemma, "in_c", lambda *a: False)
    torch.testing.assert_close(ours, passes(exit2), atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize("k", [2, 5, 9])
def test_greedy_speculative_equals_its_own_greedy_decode_in_c(tiny, k, monkeypatch):
    calls = counted(monkeypatch)
    prompt = torch.tensor([[2, 6, 7, 8, 6, 7, 8, 6]])
    cfg = DecodeConfig(k=k, temperature=0, max_new_tokens=24)
    own = ar(tiny, prompt, cfg).new_tokens
    trace = speculative_generate(tiny, PromptLookupDrafter(), prompt, cfg)
    assert trace.new_tokens == own and max(calls) > 1  # verify passes of several rows ran in C


def test_wrong_arguments_are_refused_before_c(tiny):
    from specviz.runtime.lean_gemma import LeanGemma3

    lm = LeanGemma3(tiny)
    x = torch.randn(2, lm.dims.d)
    args = dict(w=lm.w, dims=lm.dims, x=x, kv=lm.kv, start=0, rope=lm.rope, window=lm.window)
    before = lm.kv.clone()
    for change, message in ((dict(kv=lm.kv[:, :1].contiguous()), "the cache must be of shape"),
                            (dict(kv=lm.kv[:, :, :3]), "the cache must be contiguous"),
                            (dict(start=lm.capacity - 1), "must lie in the cache's"),
                            (dict(start=-1), "must lie in the cache's"),
                            (dict(window=0), "sliding window must be a positive int"),
                            (dict(x=torch.randn(2, 7)), "x must be of shape"),
                            (dict(x=x.double()), "x must be float32"),
                            (dict(x=x[:0]), "x has no rows")):
        with pytest.raises(ValueError, match=message):
            native_gemma.layers(**{**args, **change})
    assert torch.equal(lm.kv, before)


def test_c_refuses_shapes_and_types_it_does_not_read(tiny):
    """The last line: sv_gemma_layers called directly with a matrix of the wrong rows, type or width, no rows, a
    window of 0 or slots past the cache returns -2 and writes nothing."""
    from specviz.runtime.lean_gemma import LeanGemma3

    lm, so = LeanGemma3(tiny), native.lib()
    arr, _ = native_gemma._make(lm.w, lm.dims)
    caches = (ctypes.c_void_p * len(lm.w.blocks))(*[lm.kv[i].data_ptr() for i in range(len(lm.w.blocks))])
    (cos, sin), x = lm.rope[True], torch.randn(3, lm.dims.d)
    kept = x.clone()

    def call(n=3, start=0, window=WINDOW, layers=arr, dims=lm.dims):
        return so.sv_gemma_layers(ctypes.byref(dims), layers, caches, len(lm.w.blocks), x.data_ptr(), n, start,
                                  lm.capacity, cos.data_ptr(), sin.data_ptr(), cos.data_ptr(), sin.data_ptr(), window,
                                  None, 1)

    assert call(n=0) == call(window=0) == call(start=lm.capacity - 2) == -2
    held = caches[1]
    caches[1] = None  # a layer without its cache
    assert call() == -2
    caches[1] = held
    wrong = native.Dims(lm.dims.d, lm.dims.nh, lm.dims.nkv, lm.dims.hd, lm.dims.inter * 2, lm.dims.rot, lm.dims.eps,
                        lm.dims.scale)
    assert call(dims=wrong) == -2  # gate/up and down of other widths than the dims say
    part = lm.w.blocks[0].o_t._structs[0]
    saved = (part.rows, part.type)
    for rows, kind in ((saved[0] - 1, saved[1]), (saved[0], 0), (saved[0], 3)):  # a row short; F32; Q4_1
        part.rows, part.type = rows, kind
        assert call() == -2
    part.rows, part.type = saved
    assert torch.equal(x, kept)
    assert call() == 0 and not torch.equal(x, kept)


def test_a_q4_0_file_runs_in_c_as_near_the_float_forward_as_operator_by_operator(tmp_path, monkeypatch):
    """Q4_0 (the type of Gemma-3's quantization-aware GGUFs) through the whole C pass: as near the float-activation
    forward as the operator-by-operator pass on 8-bit activations (here a rounding of x falls the other way between
    the two from the third pass on, so they are not compared to each other float for float), the same top tokens."""
    from specviz.runtime import gguf as loader

    monkeypatch.setenv("SPECVIZ_GGUF_CACHE", str(tmp_path / "cache"))
    path = write_tiny_gemma(tmp_path / "q4_0.gguf", kinds=("Q4_0", "Q8_0"))
    model, _ = loader.load(tmp_path, path.name, torch.float32)
    assert {p.kind for p in model.quantized.blocks[0].qkv_t.parts} == {"Q4_0", "Q8_0"}
    calls = counted(monkeypatch)
    ours = passes(model)
    assert calls == [3, 1, 11, 1, 7]
    monkeypatch.setattr(lean_gemma, "in_c", lambda *a: False)
    ops = passes(model)
    torch.testing.assert_close(ours[:5], ops[:5], atol=2e-5, rtol=1e-5)  # the first two passes, before any flip
    monkeypatch.setenv(quant.ACTIVATIONS_ENV, "float")
    exact = passes(model)
    assert 0 < (ours - exact).abs().max() <= 2 * (ops - exact).abs().max()
    assert (exact.argmax(-1) == ours.argmax(-1)).float().mean() > 0.9
