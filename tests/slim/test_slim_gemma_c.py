"""specviz.slim on specviz's own C stack (runtime.gemma_sequence.GemmaSequence): a Gemma-3 GGUF decoded from numpy,
no torch, on a tiny GGUF written here. Its logits are the torch side's C stack's (the same kernels; RoPE tables
rounded from float64 here), a row's floats do not depend on the rows sharing its pass, greedy speculative text equals
its own greedy text, its trace names the forward, a process decoding on it never imports torch, and what it cannot
run is refused in words before any work."""
import ctypes
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from specviz.config import DecodeConfig
from specviz.runtime import quant
from specviz.runtime.native import gemma as native_gemma
from specviz.slim import Lookup, autoregressive, speculative
from tests.helpers.tiny_gguf import write_tiny_gemma

gguf = pytest.importorskip("gguf")
pytestmark = pytest.mark.skipif(not native_gemma.available(), reason="the C Gemma-3 pass needs AVX-512 VNNI")

IDS = [2, 9, 5, 13, 7, 4, 4, 11, 6, 14, 5, 3, 8, 9, 10, 12, 6, 7, 8, 9, 4, 5, 6]


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """(the GGUF's path, the torch side's quantized model of it), the config cached as the loader builds it."""
    from specviz.runtime import gguf as loader

    folder, cache = tmp_path_factory.mktemp("gguf"), tmp_path_factory.mktemp("cache")
    path = write_tiny_gemma(folder / "tiny-gemma3.gguf", kinds=("Q8_0", "Q5_0"))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SPECVIZ_GGUF_CACHE", str(cache))
        mp.setenv(quant.ACTIVATIONS_ENV, "int8")
        model, _ = loader.load(folder, path.name, torch.float32)
        yield path, model, cache


@pytest.fixture
def seq(written, monkeypatch):
    from specviz.runtime.gemma_sequence import GemmaSequence

    monkeypatch.setenv("SPECVIZ_GGUF_CACHE", str(written[2]))
    return GemmaSequence.from_gguf(written[0])


def test_its_logits_are_the_torch_sides_c_stacks(written, monkeypatch):
    """On the torch side's own RoPE tables the same floats (the same kernels, one call a pass either way); its own
    tables (float64, rounded once) lie within float32 rounding of transformers' (float32 throughout)."""
    from specviz.runtime import gemma_sequence
    from specviz.runtime.lean_gemma import LeanGemma3
    from specviz.runtime.lm import CachedLM

    monkeypatch.setenv("SPECVIZ_GGUF_CACHE", str(written[2]))
    lean = LeanGemma3(written[1])
    tables = {("sliding_attention" if sliding else "full_attention"): tuple(t.numpy() for t in pair)
              for sliding, pair in lean.rope.items()}
    own = gemma_sequence.GemmaSequence.from_gguf(written[0])
    for kind, (cos, sin) in tables.items():
        np.testing.assert_allclose(own.rope[kind][0], cos[: own.capacity], atol=1e-4)
        np.testing.assert_allclose(own.rope[kind][1], sin[: own.capacity], atol=1e-4)
    bases = {kind: base for kind, base in own.bases.items()}
    monkeypatch.setattr(gemma_sequence, "rope_tables", lambda base, hd, n: next(
        (c[:n].copy(), s[:n].copy()) for kind, (c, s) in tables.items() if bases[kind] == base))
    seq = gemma_sequence.GemmaSequence.from_gguf(written[0])
    lm = CachedLM(written[1])
    assert lm.forward_name == "lean-c"
    theirs = torch.cat([lm.feed(IDS[:5]), lm.feed(IDS[5:6]), lm.feed(IDS[6:])]).numpy()
    ours = np.concatenate([seq.decode(IDS[:5]), seq.decode(IDS[5:6]), seq.decode(IDS[6:])])
    np.testing.assert_allclose(ours, theirs, atol=1e-5, rtol=1e-5)


def test_a_row_gets_the_same_floats_whatever_rows_share_its_pass(seq):
    together = seq.decode(IDS)
    seq.crop(0)
    alone = np.concatenate([seq.decode(IDS[i: i + 1]) for i in range(len(IDS))])
    assert np.array_equal(together, alone)
    seq.crop(3)  # rolled back: the same rows again
    assert np.array_equal(seq.decode(IDS[3:9]), together[3:9])


def test_a_pass_can_skip_the_head_for_all_but_its_last_rows(seq):
    """head_rows: the last rows' logits only, the same floats, and every row's features; 0 or more than the rows
    is refused."""
    together, features = seq.decode(IDS), seq.features().copy()
    seq.crop(0)
    assert np.array_equal(seq.decode(IDS, head_rows=2), together[-2:])
    assert np.array_equal(seq.features(), features)
    for bad in (0, len(IDS) + 1, 1.5):
        with pytest.raises(ValueError, match="head_rows"):
            seq.decode(IDS, head_rows=bad)
    assert seq.decode(np.zeros(0, np.int32)).shape == (0, seq.vocab)  # nothing to append: no rows, whatever head_rows says


@pytest.mark.parametrize("k", [1, 3, 6])
def test_greedy_speculative_equals_its_own_greedy_decode(seq, k):
    prompt = [2, 6, 7, 8, 6, 7, 8, 6]
    cfg = DecodeConfig(k=k, temperature=0, max_new_tokens=24)
    own = autoregressive(seq, prompt, cfg)
    trace = speculative(seq, Lookup(), prompt, cfg)
    assert trace.new_tokens == own.new_tokens and trace.forward == own.forward == "gemma-c"
    assert sum(r.n_accepted for r in trace.rounds) > 0


def test_k_quant_matrices_regrouped_give_the_file_blocks_logits(tmp_path, monkeypatch):
    """A GGUF of Q4_K and Q6_K matrices (as a Q4_K_M file holds), regrouped by 16 rows as the sequence loads them: the
    logits of the torch side's C stack, which reads the file's blocks row by row, to float rounding until an 8-bit
    rounding of x falls the other way (then within 1% of the logits' size, the same argmax); greedy speculative
    decoding its own greedy decode."""
    from specviz.runtime import gguf as loader
    from specviz.runtime.gemma_sequence import GemmaSequence
    from specviz.runtime.lm import CachedLM
    from specviz.runtime.native import build

    monkeypatch.setenv("SPECVIZ_GGUF_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv(quant.ACTIVATIONS_ENV, "int8")
    path = write_tiny_gemma(tmp_path / "k.gguf", kinds=("Q6_K", "Q4_K", "Q8_0"))
    model, _ = loader.load(tmp_path, path.name, torch.float32)
    seq = GemmaSequence.from_gguf(path)
    types = {ctypes.cast(getattr(layer, f), ctypes.POINTER(build.QMat))[0].type
             for layer in seq.w.layers for f in ("qkv", "o", "gu", "down")}
    assert {build.Q6_K_R16, build.Q4_K_R16} <= types
    lm = CachedLM(model)
    theirs = torch.cat([lm.feed(IDS[:5]), lm.feed(IDS[5:6]), lm.feed(IDS[6:])]).numpy()
    ours = np.concatenate([seq.decode(IDS[:5]), seq.decode(IDS[5:6]), seq.decode(IDS[6:])])
    assert np.isfinite(ours).all() and np.abs(ours).max() > 0.1
    gap, top = np.abs(ours - theirs).max(-1), np.abs(theirs).max()
    assert gap[:4].max() <= 1e-6 * top  # the first rows: float rounding alone
    assert gap.max() <= 1e-2 * top  # later an 8-bit rounding of x may fall the other way (the Q4_0 test's caveat)
    assert (ours.argmax(-1) == theirs.argmax(-1)).mean() >= 0.9
    seq.crop(0)
    prompt, cfg = [2, 6, 7, 8, 6, 7, 8, 6], DecodeConfig(k=3, temperature=0, max_new_tokens=16)
    own = autoregressive(seq, prompt, cfg)
    assert speculative(seq, Lookup(), prompt, cfg).new_tokens == own.new_tokens


def test_embedding_rows_are_the_files_read_without_its_mapping(seq):
    """A lookup reads the table's rows with pread (a page touched through the mapping maps its neighbours, and a long
    run's lookups held ever more of a real table resident): the file's bytes, in the order asked, repeats and runs of
    consecutive ids alike; ids outside the vocabulary refused."""
    t, shape, offset = seq.w.header.tensors["token_embd.weight"]
    rb = seq.w.embed_row_bytes
    table = np.asarray(seq.w.map[offset: offset + seq.vocab * rb]).reshape(seq.vocab, rb)
    for ids in ([5, 3, 3, 4, 15, 0], [7, 8, 9, 10], [0], list(range(seq.vocab))[::-1]):
        assert np.array_equal(seq.w.embed_rows(np.asarray(ids)), table[ids])
    assert seq.w.embed_rows(np.zeros(0, np.int64)).shape == (0, rb)
    for bad in ([seq.vocab], [-1]):
        with pytest.raises(ValueError, match="embedding ids"):
            seq.w.embed_rows(np.asarray(bad))


def test_what_it_cannot_run_is_refused_in_words(written, seq, tmp_path, monkeypatch):
    import json

    from specviz.runtime.gemma_sequence import GemmaSequence

    with pytest.raises(ValueError, match=r"token ids must lie in \[0, 16\)"):
        seq.decode([3, 16])
    with pytest.raises(ValueError, match="integer ids"):
        seq.decode(np.array([1.0]))
    with pytest.raises(ValueError, match="0 or more positions"):
        seq.crop(-1)
    with pytest.raises(ValueError, match="holds 20 positions; 21 asked"):
        GemmaSequence.from_gguf(written[0], limit=20).decode(list(range(1, 15)) + list(range(1, 8)))
    from specviz.runtime.gguf import described

    monkeypatch.setenv("SPECVIZ_GGUF_CACHE", str(written[2]))
    config = json.loads((described(written[0].parent, written[0].name) / "config.json").read_text())
    for change, message in (({"model_type": "llama"}, "runs Gemma-3 text models, not 'llama'"),
                            ({"final_logit_softcapping": 30.0}, "soft-capping"),
                            ({"rope_parameters": {**config["rope_parameters"], "full_attention": {
                                "rope_type": "linear", "factor": 8.0, "rope_theta": 1e6}}}, "RoPE is scaled"),
                            ({"intermediate_size": 512}, "ffn_gate.weight, blk.0.ffn_up.weight hold 512 rows, not 1024")):
        with pytest.raises(ValueError, match=message):
            GemmaSequence(written[0], {**config, **change})
    other = write_tiny_gemma(tmp_path / "f16.gguf", kinds=("Q8_0", "F16"))
    with pytest.raises(ValueError, match="stored as GGML type F16; the C stack reads Q4_0, Q5_0, Q8_0, Q4_K, Q6_K"):
        GemmaSequence(other, config)


def test_a_process_decoding_on_it_never_imports_torch(written):
    root = Path(__file__).resolve().parents[2]
    code = (f"import sys; sys.path.insert(0, {str(root)!r})\n"
            "from specviz.slim import Lookup, speculative; from specviz.config import DecodeConfig\n"
            "from specviz.runtime.gemma_sequence import GemmaSequence\n"
            f"seq = GemmaSequence.from_gguf({str(written[0])!r})\n"
            "t = speculative(seq, Lookup(), [2, 6, 7, 6, 7], DecodeConfig(temperature=0.8, max_new_tokens=9))\n"
            "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers', 'pandas',"
            " 'tokenizers'))\n"
            "print(len(t.new_tokens), heavy)")
    env = {"SPECVIZ_GGUF_CACHE": str(written[2]), "PATH": "/usr/bin:/bin", "HOME": str(Path.home())}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=root, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["9", "[]"]


def test_it_drops_to_one_thread_once_its_passes_stall(seq):
    """Other work holding a core makes OpenMP threads spin at barriers: after three passes of a row count at over
    four times its fastest, the sequence runs on one thread, and after RETRY passes there on the threads asked for
    again (the other work may have ended)."""
    from specviz.runtime.cpus import RETRY

    seq.threads = seq.asked_threads = 2
    seq._watch(3, 0.010)
    for _ in range(2):
        seq._watch(3, 0.050)
    assert seq.threads == 2  # two stalls are not yet three
    seq._watch(3, 0.011)  # an ordinary pass between does not reset the count
    seq._watch(3, 0.060)
    assert seq.threads == 1
    seq._watch(3, 0.001)
    assert seq.threads == 1
    for _ in range(RETRY - 2):
        seq._watch(3, 0.020)
    assert seq.threads == 1
    seq._watch(3, 0.020)
    assert seq.threads == 2


def test_taps_keep_each_layers_output_and_change_no_logit(written, seq, monkeypatch):
    """A sequence that keeps some layers' outputs (taps) gives the same logits and features as one that keeps none; a
    tap is the residual stream after its layer, transformers' hidden state there (within the two sides' RoPE tables'
    rounding), the last layer's normed by the final norm the features; it rolls back with the cache; what the C side
    would refuse is refused in words first."""
    from specviz.runtime.gemma_sequence import MAX_TAPS, GemmaSequence

    monkeypatch.setenv("SPECVIZ_GGUF_CACHE", str(written[2]))
    layers = len(seq.config["layer_types"])
    tapped = GemmaSequence.from_gguf(written[0], taps=tuple(range(layers)))
    assert np.array_equal(tapped.decode(IDS[:6]), seq.decode(IDS[:6]))
    assert np.array_equal(tapped.decode(IDS[6:]), seq.decode(IDS[6:]))
    assert np.array_equal(tapped.features(), seq.features()) and tapped.tapped().shape == (len(IDS), layers, seq.d)
    from specviz.runtime import gguf as loader

    monkeypatch.setenv("SPECVIZ_GGUF", "dequantize")  # transformers' own forward, on the weights in float32
    model, _ = loader.load(written[0].parent, written[0].name, torch.float32)
    with torch.no_grad():
        hidden = model(torch.tensor([IDS]), output_hidden_states=True).hidden_states
    for layer in range(layers - 1):  # within the 8-bit rounding of the C side's activations
        ours, want = tapped.tapped()[:, layer].ravel(), hidden[layer + 1][0].numpy().ravel()
        assert np.abs(ours - want).max() <= 0.05 * np.abs(want).max() and np.corrcoef(ours, want)[0, 1] > 0.999, layer
    x = tapped.tapped()[:, -1].astype(np.float64)
    eps = float(seq.config["rms_norm_eps"])
    normed = x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * seq.w.norm
    np.testing.assert_allclose(normed, tapped.features(), rtol=1e-4, atol=1e-5)
    kept = tapped.tapped(4).copy()
    tapped.crop(4)
    tapped.decode(IDS[4:5])
    assert np.array_equal(tapped.tapped(4), kept) and tapped.tapped().shape[0] == 5
    for bad in ((layers,), (1, 0), (0, 0), tuple(range(MAX_TAPS + 1)), (-1,)):
        with pytest.raises(ValueError, match="taps must be"):
            GemmaSequence.from_gguf(written[0], taps=bad)


def test_several_sequences_in_one_pass_get_each_ones_own_floats(written, seq):
    """GemmaRows: three sequences of different lengths, their prompts in one pass and then a token each a pass (past
    the sliding layers' window of 4), every last row's logits and every feature and tap the very floats a
    GemmaSequence gives each sequence decoded alone."""
    from specviz.runtime.gemma_rows import GemmaRows
    from specviz.runtime.gemma_sequence import GemmaSequence

    tapped = GemmaSequence(seq.path, seq.config, weights=seq.w, taps=(1, 3))
    rows = GemmaRows(tapped, sequences=3, limit=32)
    texts = [IDS[:7], IDS[3:5], IDS[9:20]]
    last = rows.decode([2, 0, 1], [texts[2], texts[0], texts[1]])
    steps = [list(rng_ids) for rng_ids in np.random.default_rng(3).integers(2, 15, size=(9, 3))]
    for step in steps:
        last = rows.decode([0, 1, 2], [[t] for t in step])
    for b in range(3):
        alone = GemmaSequence(seq.path, seq.config, weights=seq.w, taps=(1, 3))
        text = texts[b] + [s[b] for s in steps]
        logits = alone.decode(text)
        assert np.array_equal(last[b], logits[-1])
        assert np.array_equal(rows.features(b), alone.features()) and np.array_equal(rows.tapped(b), alone.tapped())
    rows.reset(1)
    assert rows.features(1).shape == (0, seq.d)


def test_several_sequences_refuse_what_does_not_fit(seq):
    from specviz.runtime.gemma_rows import GemmaRows

    rows = GemmaRows(seq, sequences=2, limit=8)
    for which, tokens, said in (([2], [[3]], "index"), ([0, 0], [[3], [4]], "once a pass"), ([0], [[]], "at least one"),
                                ([0], [[seq.vocab]], "token ids"), ([1], [list(range(2, 11))], "holds 8 positions"),
                                ([0.5], [[3]], "index"), ([], [], "at least one")):
        with pytest.raises(ValueError, match=said):
            rows.decode(which, tokens)
    for bad in (dict(sequences=0, limit=8), dict(sequences=2, limit=seq.limit + 1)):
        with pytest.raises(ValueError):
            GemmaRows(seq, **bad)
    x = np.zeros((2, seq.d), np.float32)
    slots, first, wrong = (np.asarray(v, np.int64) for v in ([0, 9], [0, 8], [0, 0]))  # a position not slot - first
    out = np.empty((2, seq.vocab), np.float32)
    from specviz.runtime.native import build

    head = build.GHead(seq.w.head, seq.w.norm.ctypes.data, 1, seq.vocab, 0, x.ctypes.data, out.ctypes.data, 0.0,
                       seq.taps.ctypes.data, 0, None)
    (cos, sin) = rows.rope["full_attention"]
    assert seq.so.sv_gemma_layers_rows(ctypes.byref(seq.dims), seq.w.layers, rows.caches, len(seq.w.layers),
                                       x.ctypes.data, 2, slots.ctypes.data, first.ctypes.data, wrong.ctypes.data, 16,
                                       cos.ctypes.data, sin.ctypes.data, cos.ctypes.data, sin.ctypes.data, seq.window,
                                       ctypes.byref(head), 1) == -2
