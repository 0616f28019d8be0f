"""Weights kept quantized as a GGUF stores them (specviz.runtime.quant, quant_gguf): the C kernels expand every block
type exactly as the gguf package's reference does; a tiny Gemma-3 written here as a GGUF of Q8_0 and Q5_0 matrices
loads quantized (no float copy), matches transformers' float32 forward of the same file to float rounding, decodes
greedy speculative output equal to its own greedy output token for token, and keeps the target's law when sampling;
its config and tokenizer are cached by the file's hash and read back from there."""
import ctypes
import os

import numpy as np
import pytest
import torch

from specviz import DecodeConfig, PromptLookupDrafter, speculative_generate
from specviz import autoregressive_generate as ar
from specviz.runtime import native, quant
from specviz.sampling import logits_to_probs
from tests.helpers.stats import chi2_pvalue
from tests.helpers.tiny_gguf import HD, LAYERS, D, write_tiny_gemma

gguf = pytest.importorskip("gguf")
pytestmark = pytest.mark.skipif(native.unavailable() is not None, reason=f"{native.unavailable()}")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """(folder, file name, the quantized model, its tokenizer), the cache in a folder of its own."""
    from specviz.runtime import gguf as loader

    folder = tmp_path_factory.mktemp("gguf")
    path = write_tiny_gemma(folder / "tiny-gemma3.gguf")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SPECVIZ_GGUF_CACHE", str(tmp_path_factory.mktemp("cache")))
        model, tok = loader.load(folder, path.name, torch.float32)
        yield folder, path.name, model, tok


@pytest.fixture(scope="module")
def reference(tiny):
    """transformers' float32 forward of the same file (dequantized by the gguf package)."""
    from transformers import AutoModelForCausalLM

    folder, name, _, _ = tiny
    return AutoModelForCausalLM.from_pretrained(str(folder), gguf_file=name, dtype=torch.float32).eval()


# -- the kernels -----------------------------------------------------------------------------------------------------
def random_blocks(kind: str, rows: int, cols: int, seed: int) -> np.ndarray:
    """Random bytes of rows x cols weights in ``kind``, each block's float16 scales set to ordinary numbers."""
    rng = np.random.default_rng(seed)
    _, block, size = quant.TYPES[kind]
    data = rng.integers(0, 256, size=(rows, cols // block, size), dtype=np.uint8)
    scales = rng.uniform(0.001, 0.02, size=(rows, cols // block, 2)).astype(np.float16).view(np.uint8)
    at = {"Q4_0": [0], "Q8_0": [0], "Q5_0": [0], "Q4_K": [0, 2], "Q6_K": [208]}[kind]  # where the block's float16 scales sit
    for i, offset in enumerate(at):
        data[:, :, offset: offset + 2] = scales[:, :, 2 * (i % 1): 2 * (i % 1) + 2]
    return data.reshape(rows, -1)


@pytest.mark.parametrize("kind", ["Q4_0", "Q8_0", "Q5_0", "Q4_K", "Q6_K"])
def test_each_block_type_expands_as_the_gguf_reference_does(kind):
    raw = random_blocks(kind, 13, 512, seed=len(kind))
    m = quant.QuantMatrix(torch.from_numpy(raw), kind, 13, 512)
    ref = torch.from_numpy(gguf.quants.dequantize(raw, getattr(gguf.GGMLQuantizationType, kind))).reshape(13, 512)
    assert torch.equal(quant.dequantize(m), ref)  # the very same floats: the kernels use the file's arithmetic


def rounded_activations(x: torch.Tensor) -> torch.Tensor:
    """x as sv_qlinear8 takes it: each block of 32 rounded to int8 with scale max|x| / 127 (half away from zero, in
    float32, as roundf), back as float64."""
    blocks = x.reshape(x.shape[0], -1, 32)
    d = blocks.abs().amax(-1, keepdim=True) / 127
    inv = torch.where(d > 0, 1 / d, torch.zeros_like(d))
    v = blocks * inv
    q = (torch.sign(v) * torch.floor(v.abs() + 0.5)).clamp(-127, 127)
    return (q.double() * d.double()).reshape(x.shape)


needs_int8 = pytest.mark.skipif(native.unavailable() is not None or not native.lib().sv_qlinear8_available(),
                                reason="8-bit activations need AVX-512 VNNI")


@pytest.mark.parametrize("activations", ["float", pytest.param("int8", marks=needs_int8)])
@pytest.mark.parametrize("rows", [1, 5, 11, 17])  # 11 and 17: more rows than share each expanded chunk
def test_a_matmul_over_parts_side_by_side_is_x_times_their_floats(rows, activations, monkeypatch):
    monkeypatch.setenv(quant.ACTIVATIONS_ENV, activations)
    g = torch.Generator().manual_seed(rows)
    parts = (quant.quantize_q8_0(torch.randn(40, 512, generator=g)),
             quant.QuantMatrix(torch.from_numpy(random_blocks("Q4_K", 24, 512, 3)), "Q4_K", 24, 512),
             quant.QuantMatrix(torch.from_numpy(random_blocks("Q6_K", 9, 512, 4)), "Q6_K", 9, 512),
             quant.QuantMatrix(torch.from_numpy(random_blocks("Q5_0", 7, 512, 5)), "Q5_0", 7, 512),
             quant.QuantMatrix(torch.from_numpy(random_blocks("Q4_0", 5, 512, 6)), "Q4_0", 5, 512))
    x, b, res = torch.randn(rows, 512, generator=g), torch.randn(85, generator=g), torch.randn(rows, 85, generator=g)
    w = torch.cat([quant.dequantize(p) for p in parts]).double()
    xs = x.double() if activations == "float" else rounded_activations(x)
    want = res.double() + xs @ w.T + b.double()
    got = quant.linear(x, quant.QuantLinear(parts), b, res)
    assert got.dtype == torch.float32 and got.shape == (rows, 85)
    torch.testing.assert_close(got.double(), want, atol=1e-4 * want.abs().max().item(), rtol=1e-5)
    if activations == "int8":  # and not what float activations give: the rounding is there
        assert (got.double() - (res.double() + x.double() @ w.T + b.double())).abs().max() > 1e-3


@needs_int8
def test_with_int8_activations_a_row_gets_what_it_gets_alone(monkeypatch):
    """A verify pass of n rows gives each row the very floats a one-row pass gives it (greedy exactness on this
    forward rests on it)."""
    monkeypatch.setenv(quant.ACTIVATIONS_ENV, "int8")
    g = torch.Generator().manual_seed(0)
    w = quant.QuantLinear((quant.quantize_q8_0(torch.randn(33, 640, generator=g)),
                           quant.QuantMatrix(torch.from_numpy(random_blocks("Q5_0", 21, 640, 2)), "Q5_0", 21, 640)))
    x = torch.randn(19, 640, generator=g)
    together = quant.linear(x, w)
    assert torch.equal(together, torch.cat([quant.linear(x[i: i + 1], w) for i in range(19)]))


def regrouped(kind: str, data: np.ndarray, rows: int, cols: int) -> np.ndarray:
    """A Q5_0, Q8_0, Q4_K or Q6_K matrix's bytes in stack.c's regrouped layout (build.REGROUPED), written by its
    repack."""
    from specviz.runtime.native import build

    src = np.ascontiguousarray(data)
    out = np.empty(build.regrouped_bytes(kind, rows, cols), dtype=np.uint8)
    build.regroup(kind, src.ctypes.data, rows, cols, out.ctypes.data)
    return out


@needs_int8
@pytest.mark.parametrize("kind", ["Q5_0", "Q8_0", "Q4_K", "Q6_K"])
@pytest.mark.parametrize("rows", [1, 2, 3, 5, 8, 9, 17])
def test_a_matrix_regrouped_by_16_rows_multiplies_as_its_rows_do(kind, rows):
    """The regrouped kernel against the row-major one on the same bytes, beside another part (its columns offset):
    the same products to float rounding (only the order of additions differs), bias and residual added; and a row's
    floats do not depend on the rows sharing its pass."""
    from specviz.runtime.native import build

    g = torch.Generator().manual_seed(rows)
    data = (quant.quantize_q8_0(torch.randn(48, 512, generator=g)).data.numpy() if kind == "Q8_0"
            else random_blocks(kind, 48, 512, rows))
    packed, other = regrouped(kind, data, 48, 512), quant.quantize_q8_0(torch.randn(5, 512, generator=g))
    x, b, res = torch.randn(rows, 512, generator=g), torch.randn(53, generator=g), torch.randn(rows, 53, generator=g)
    so = build.lib()

    def run(first, xs, bias=None, residual=None):
        parts = (build.QMat * 2)(first, build.QMat(other.data.data_ptr(), 8, 5))
        y = torch.empty(len(xs), 53)
        assert so.sv_qlinear8(xs.data_ptr(), len(xs), 512, parts, 2, None if bias is None else bias.data_ptr(),
                              None if residual is None else residual.data_ptr(), y.data_ptr(), 2) == 0
        return y

    mine = build.QMat(packed.ctypes.data, build.REGROUPED[kind][0], 48)
    plain = run(build.QMat(data.ctypes.data, quant.TYPES[kind][0], 48), x, b, res)
    got = run(mine, x, b, res)
    torch.testing.assert_close(got, plain, atol=1e-5 * plain.abs().max().item(), rtol=1e-5)
    assert torch.equal(run(mine, x), torch.cat([run(mine, x[i: i + 1]) for i in range(rows)]))


@needs_int8
@pytest.mark.parametrize("kind", ["Q5_0", "Q8_0", "Q4_K", "Q6_K"])
def test_asking_for_the_weights_ahead_changes_no_bit(kind):
    """sv_set_prefetch and sv_set_prefetch_l2 move when the weights are read, not what is computed: every kernel
    (regrouped or row-major) gives the same bits with the weights asked for ahead (into L1, into L2, both) or not;
    the settings are clamped (0 off, at most 1 MiB and 4 MiB) and the one replaced comes back."""
    from specviz.runtime.native import build

    g = torch.Generator().manual_seed(7)
    data = (quant.quantize_q8_0(torch.randn(64, 512, generator=g)).data.numpy() if kind == "Q8_0"
            else random_blocks(kind, 64, 512, 3))
    held = regrouped(kind, data, 64, 512) if kind in build.REGROUPED else np.ascontiguousarray(data)
    part = build.QMat(held.ctypes.data, build.REGROUPED[kind][0] if kind in build.REGROUPED else quant.TYPES[kind][0], 64)
    x, so = torch.randn(5, 512, generator=g), build.lib()
    before = so.sv_set_prefetch(0), so.sv_set_prefetch_l2(0)
    try:
        outs = []
        for ahead, l2 in ((0, 0), (64, 0), (12288, 0), (1 << 20, 0), (0, 49152), (12288, 49152), (64, 1 << 22)):
            so.sv_set_prefetch(ahead), so.sv_set_prefetch_l2(l2)
            y = torch.empty(5, 64)
            assert so.sv_qlinear8(x.data_ptr(), 5, 512, ctypes.byref(part), 1, None, None, y.data_ptr(), 2) == 0
            outs.append(y)
        assert all(torch.equal(outs[0], y) for y in outs[1:])
        assert so.sv_set_prefetch(-3) == 64 and so.sv_set_prefetch((1 << 20) + 1) == 0
        assert so.sv_set_prefetch(4096) == 0
        assert so.sv_set_prefetch_l2(-3) == 1 << 22 and so.sv_set_prefetch_l2((1 << 22) + 1) == 0
        assert so.sv_set_prefetch_l2(4096) == 0
    finally:
        so.sv_set_prefetch(before[0]), so.sv_set_prefetch_l2(before[1])


@needs_int8
def test_the_regrouped_layout_is_refused_where_it_does_not_fit():
    """Regrouping needs whole groups of 16 rows and whole chunks of 64 columns (Q4_K, Q6_K: whole super-blocks of
    256); the 8-bit kernel refuses a regrouped part of rows not a multiple of 16, or a Q4_K or Q6_K one of columns
    not whole super-blocks, writing nothing."""
    import ctypes

    from specviz.runtime.native import build

    so, m = build.lib(), quant.quantize_q8_0(torch.randn(40, 640))
    out = np.zeros(3 * 20 * 576, dtype=np.uint8)
    for rows, cols in ((40, 640), (0, 640), (32, 96), (32, 32)):
        assert so.sv_repack_q8_0_r16(m.data.data_ptr(), rows, cols, out.ctypes.data) == -2
    for rows, cols in ((40, 256), (32, 128), (32, 320)):
        assert so.sv_repack_q4_k_r16(m.data.data_ptr(), rows, cols, out.ctypes.data) == -2
        assert so.sv_repack_q6_k_r16(m.data.data_ptr(), rows, cols, out.ctypes.data) == -2
    for rows, cols in ((40, 640), (32, 96)):
        assert so.sv_repack_q5_0_r16(m.data.data_ptr(), rows, cols, out.ctypes.data) == -2
    x, y = torch.randn(1, 640), torch.full((1, 40), 7.0)
    for kind, rows, cols in ((build.Q8_0_R16, 40, 640), (build.Q4_K_R16, 32, 640), (build.Q4_K_R16, 40, 512),
                             (build.Q6_K_R16, 32, 640), (build.Q6_K_R16, 40, 512)):
        part = build.QMat(out.ctypes.data, kind, rows)
        assert so.sv_qlinear8(x.data_ptr(), 1, cols, ctypes.byref(part), 1, None, None, y.data_ptr(), 1) == -2
    for kind in (build.Q5_0_R16, build.Q8_0_R16, build.Q4_K_R16, build.Q6_K_R16):  # the float path and the lookup
        # read GGML's own
        part = build.QMat(out.ctypes.data, kind, 32)
        assert so.sv_qlinear(x.data_ptr(), 1, 512, ctypes.byref(part), 1, None, None, y.data_ptr(), 1) == -2
        assert so.sv_qrows(out.ctypes.data, kind, 32, 512, torch.tensor([1]).data_ptr(), 1, y.data_ptr()) == -2
    assert torch.equal(y, torch.full((1, 40), 7.0))


def test_the_activations_setting_is_read_and_checked(monkeypatch):
    monkeypatch.setenv(quant.ACTIVATIONS_ENV, "float")
    assert quant.activations() == "float"
    monkeypatch.setenv(quant.ACTIVATIONS_ENV, "fp8")
    with pytest.raises(ValueError, match="SPECVIZ_QUANT_ACTIVATIONS is int8 or float, not 'fp8'"):
        quant.activations()
    monkeypatch.delenv(quant.ACTIVATIONS_ENV)
    assert quant.activations() == ("int8" if native.lib().sv_qlinear8_available() else "float")


def test_q8_0_quantized_here_is_the_gguf_packages_q8_0():
    w = torch.randn(6, 96, generator=torch.Generator().manual_seed(0))
    ours = quant.quantize_q8_0(w)
    theirs = gguf.quants.quantize(w.numpy(), gguf.GGMLQuantizationType.Q8_0)
    assert torch.equal(quant.dequantize(ours), torch.from_numpy(
        gguf.quants.dequantize(theirs, gguf.GGMLQuantizationType.Q8_0)).reshape(6, 96))


# -- the tiny Gemma-3 GGUF -------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_the_model_holds_the_files_bytes_not_a_float_copy(tiny):
    from specviz.runtime import quant_gguf

    _, _, model, _ = tiny
    w = model.quantized
    assert w.head_t.parts[0] is w.embed  # tied: one table
    assert all(p.data.dtype == torch.uint8 for blk in w.blocks for p in blk.qkv_t.parts + blk.gu_t.parts)
    floats = sum(p.numel() * p.element_size() for p in model.parameters() if p.device.type == "cpu"
                 and p.stride() != (0, 0))
    assert floats == 0  # every float parameter of the transformers shell is meta or a zero-stride placeholder
    header = quant_gguf.Header(tiny[0] / tiny[1])
    matrices = [(quant_gguf.GGUF_TYPES[t], shape) for t, shape, _ in header.tensors.values() if len(shape) == 2]
    assert len(matrices) == 1 + 7 * LAYERS
    assert quant_gguf.resident_bytes(w) == sum(rows * quant.row_bytes(kind, cols) for kind, (cols, rows) in matrices)


def test_after_decoding_every_weight_byte_held_is_the_files_own(tiny):
    """Counted after a decode (when a float re-layout would have been made): every quantized matrix is a view of
    the file's memory map (not a copy), the floats the weights hold are the norms' vectors and the embedding's scale
    alone (hand-counted), and no float re-layout of the model is cached."""
    from specviz.runtime import lean_gemma

    if not os.path.exists("/proc/self/maps"):
        pytest.skip("reads the process's memory maps from /proc (Linux)")
    _, _, model, _ = tiny
    ar(model, torch.tensor([[2, 6, 7, 8]]), DecodeConfig(temperature=0, max_new_tokens=8))
    w = model.quantized
    mats = {id(p): p for blk in w.blocks for lin in (blk.qkv_t, blk.o_t, blk.gu_t, blk.down_t) for p in lin.parts}
    mats[id(w.embed)] = w.embed
    path = str((tiny[0] / tiny[1]).resolve())
    ranges = [tuple(int(a, 16) for a in line.split()[0].split("-")) for line in open("/proc/self/maps")
              if line.rstrip().endswith(path)]
    assert ranges, "the GGUF is not memory-mapped"
    inside = lambda p: any(lo <= p.data.data_ptr() and p.data.data_ptr() + p.nbytes <= hi for lo, hi in ranges)
    assert all(inside(p) for p in mats.values())  # views of the file's pages, not copies
    floats = [t for blk in w.blocks for t in (blk.ln_in, blk.q_norm, blk.k_norm, blk.ln_post_attn, blk.ln_pre_mlp,
                                              blk.ln_post_mlp)] + [w.norm, w.scale]
    assert sum(t.numel() for t in floats) == LAYERS * (4 * D + 2 * HD) + D + 1
    assert w.head_t.parts == (w.embed,) and model not in lean_gemma._WEIGHTS


def test_a_truncated_or_foreign_file_is_refused_in_words(tiny, tmp_path):
    from specviz.runtime import quant_gguf

    raw = (tiny[0] / tiny[1]).read_bytes()
    (tmp_path / "cut.gguf").write_bytes(raw[:200])
    with pytest.raises(ValueError, match="cut.gguf is not a readable GGUF file"):
        quant_gguf.Header(tmp_path / "cut.gguf")
    (tmp_path / "other.gguf").write_bytes(b"PK" + raw[2:])
    with pytest.raises(ValueError, match="no GGUF magic"):
        quant_gguf.Header(tmp_path / "other.gguf")


@pytest.mark.slow
def test_logits_match_transformers_float32_forward_of_the_same_file(tiny, reference, monkeypatch):
    from specviz.runtime.lm import CachedLM

    monkeypatch.setenv(quant.ACTIVATIONS_ENV, "float")
    _, _, model, _ = tiny
    ids = [2, 9, 5, 13, 7, 4, 4, 11, 6, 14, 5]  # longer than the sliding window
    lm = CachedLM(model)
    assert lm.path == "lean"
    ours = torch.cat([lm.feed(ids[:3]), lm.feed(ids[3:4]), lm.feed(ids[4:])])  # several passes, as decoding runs
    with torch.no_grad():
        theirs = reference(torch.tensor([ids])).logits[0]
    torch.testing.assert_close(ours, theirs, atol=2e-4, rtol=1e-4)
    assert torch.equal(ours.argmax(-1), theirs.argmax(-1))


@needs_int8
def test_int8_activations_stay_near_the_float_forward_and_say_how_near(tiny, monkeypatch):
    """The 8-bit activations change the logits by rounding only: within a tenth of their spread of the float32
    forward's here, the same top token at every position."""
    from specviz.runtime.lm import CachedLM

    _, _, model, _ = tiny
    ids, logits = [2, 9, 5, 13, 7, 4, 4, 11, 6, 14, 5], {}
    for mode in ("float", "int8"):
        monkeypatch.setenv(quant.ACTIVATIONS_ENV, mode)
        lm = CachedLM(model)
        logits[mode] = torch.cat([lm.feed(ids[:3]), lm.feed(ids[3:4]), lm.feed(ids[4:])])
    gap = (logits["int8"] - logits["float"]).abs().max()
    assert 0 < gap < 0.1 * logits["float"].std()
    assert torch.equal(logits["int8"].argmax(-1), logits["float"].argmax(-1))


@pytest.mark.slow
@pytest.mark.parametrize("k", [1, 3, 6])
def test_greedy_speculative_equals_its_own_greedy_decode(tiny, k):
    _, _, model, _ = tiny
    prompt = torch.tensor([[2, 6, 7, 8, 6, 7, 8, 6]])  # repeats: prompt lookup proposes
    cfg = DecodeConfig(k=k, temperature=0, max_new_tokens=24)
    own = ar(model, prompt, cfg).new_tokens
    trace = speculative_generate(model, PromptLookupDrafter(), prompt, cfg)
    assert trace.new_tokens == own
    assert sum(r.n_accepted for r in trace.rounds) > 0 or k == 1


@pytest.mark.slow
@pytest.mark.parametrize("vocab", [None, [1, 4, 6, 7, 8, 11]])
def test_an_early_exit_of_the_quantized_model_drafts_and_keeps_the_greedy_output(tiny, vocab):
    from specviz.drafts.early_exit import early_exit
    from specviz.runtime import lean_gemma

    _, _, model, _ = tiny
    exit2 = early_exit(model, 2, vocab=vocab)
    w = lean_gemma.lean_weights(exit2)
    assert len(w.blocks) == 2 and w.blocks[0] is model.quantized.blocks[0]  # the target's own layers, no copy
    if vocab is not None:  # the head's rows: the table's own blocks of those tokens
        assert torch.equal(quant.dequantize(w.head_t.parts[0]), quant.dequantize(model.quantized.embed)[vocab])
    prompt = torch.tensor([[2, 6, 7, 8, 6, 7, 8, 6]])
    cfg = DecodeConfig(k=3, temperature=0, max_new_tokens=16)
    assert speculative_generate(model, exit2, prompt, cfg).new_tokens == ar(model, prompt, cfg).new_tokens


def exact_first_two(model, prompt: list[int], cfg) -> torch.Tensor:
    """P(t1, t2) on the quantized forward itself, (V, V)."""
    from specviz.runtime.lm import CachedLM

    probs = lambda ids: logits_to_probs(CachedLM(model).feed(ids)[-1], cfg.temperature, cfg.top_k, cfg.top_p)
    p1 = probs(prompt)
    return torch.stack([p1[t] * probs(prompt + [t]) for t in range(p1.shape[0])])


@pytest.mark.law
@pytest.mark.slow
def test_speculative_sampling_keeps_the_quantized_targets_law(tiny, tmp_path, monkeypatch):
    from specviz.runtime import gguf as loader

    folder, _, model, _ = tiny
    monkeypatch.setattr(model.generation_config, "eos_token_id", None)  # two tokens every run: the law of both
    draft, _ = loader.load(tmp_path, write_tiny_gemma(tmp_path / "draft.gguf", seed=1).name, torch.float32)
    prompt, runs = [2, 6, 7, 6, 7, 6], 500
    cfg = DecodeConfig(k=2, temperature=1.0, max_new_tokens=2)
    exact = exact_first_two(model, prompt, cfg)
    counts, rejected = torch.zeros_like(exact), 0
    # seed by seed: batched decoding refuses a sliding window (4 here) narrower than a batch's cache columns
    for seed in range(runs):
        trace = speculative_generate(model, draft, torch.tensor([prompt]), DecodeConfig(**{**cfg.to_dict(), "seed": seed}))
        counts[trace.new_tokens[0], trace.new_tokens[1]] += 1
        rejected += trace.rounds[0].n_accepted < len(trace.rounds[0].drafted)
    assert 10 < rejected < runs - 10  # both branches taken: a draft token rejected, and all accepted
    assert chi2_pvalue(counts, exact) > 1e-3


def test_the_config_and_tokenizer_come_back_from_the_cache(tiny, tmp_path, monkeypatch):
    from specviz.runtime import gguf as loader

    folder, name, _, tok = tiny
    monkeypatch.setenv("SPECVIZ_GGUF_CACHE", str(tmp_path))
    first = loader.described(folder, name)
    built = {p.name: p.stat().st_mtime_ns for p in first.iterdir()}
    monkeypatch.setattr(loader, "_describe", lambda *a: pytest.fail("built again though cached"))
    assert loader.described(folder, name) == first
    assert {p.name: p.stat().st_mtime_ns for p in first.iterdir()} == built
    assert loader.tokenizer(folder, name)("a b").input_ids == tok("a b").input_ids
    (first / "config.json").write_text("{}")  # changed after it was written: not trusted, built again
    monkeypatch.undo()
    monkeypatch.setenv("SPECVIZ_GGUF_CACHE", str(tmp_path))
    assert loader.described(folder, name) == first and (first / "config.json").read_text() != "{}"


def test_the_store_counts_a_quantized_models_matrices_not_its_placeholder(tiny):
    """The tied embedding and head's zero-stride placeholder holds 4 bytes, not rows x d floats: the model store
    counts each storage once and the quantized matrices at their bytes in the file."""
    from specviz.app.store import param_bytes
    from specviz.runtime.quant_gguf import resident_bytes

    model = tiny[2]
    placeholder = model.get_output_embeddings().weight
    assert placeholder.numel() * placeholder.element_size() > 4 and placeholder.untyped_storage().nbytes() == 4
    floats = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in model.parameters()}
    floats.update({t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in model.buffers()})
    assert param_bytes(model) == sum(floats.values()) + resident_bytes(model.quantized)
    assert param_bytes((model, tiny[3])) == param_bytes(model)  # a (model, tokenizer) pair: the model's
