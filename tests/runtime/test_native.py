"""The lean forward's layer stack in C (specviz.runtime.native): its matmul against the exact product, logits against
transformers' and the torch layers' (Llama, Qwen2 biases, Qwen3 q/k norms, Phi-3's partial rotary; token trees), a
row's logits the same bits whatever the pass's row count or thread count (so greedy speculation reproduces the
target's own greedy decode bit for bit), greedy speculation with the feature draft, and what it says where it cannot
build."""
import pytest
import torch

from specviz import DecodeConfig, PromptLookupDrafter, speculative_generate
from specviz.runtime import lean_llama, native
from specviz.runtime import threads as thread_policy
from specviz.runtime.lm import CachedLM
from specviz.runtime.native import build, library
from tests.helpers.models import gqa_llama, reference_greedy, reference_logits, tiny

pytestmark = pytest.mark.skipif(native.unavailable() is not None, reason=f"{native.unavailable()}")


@pytest.fixture
def threads(monkeypatch):
    """Set torch's thread count for a test and run every call of the C stack on that many threads (``threads.ENV``:
    not the count the free cores would choose), then as it was."""
    before = torch.get_num_threads()

    def set_count(count: int) -> None:
        torch.set_num_threads(count)
        monkeypatch.setenv(thread_policy.ENV, str(count))

    yield set_count
    torch.set_num_threads(before)


@pytest.mark.parametrize("rows", [1, 3, 8, 9, 20])
@pytest.mark.parametrize("cols", [45, 200])
@pytest.mark.parametrize(("bias", "with_residual"), [(False, False), (True, True)])
def test_the_c_matmul_is_the_exact_product(rows, cols, bias, with_residual):
    g = torch.Generator().manual_seed(rows * cols)
    x, w_t = torch.randn(rows, 70, generator=g), torch.randn(70, cols, generator=g)
    b = torch.randn(cols, generator=g) if bias else None
    residual = torch.randn(rows, cols, generator=g) if with_residual else None
    got = native.linear(x, w_t, b, residual)
    want = x.double() @ w_t.double() + (0 if b is None else b.double()) + (0 if residual is None else residual.double())
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-4)


def walk(model, make):
    """Logits of a prefill, one token at a time, a rollback, then a verify pass of several rows."""
    ids = torch.randint(0, model.config.vocab_size, (24,), generator=torch.Generator().manual_seed(1)).tolist()
    lm = make(model)
    got = lm.forward(torch.tensor(ids[:10]))
    for i in range(10, 16):
        got = torch.cat([got, lm.forward(torch.tensor([ids[i]]))])
    lm.crop(13)
    return torch.cat([got[:13], lm.forward(torch.tensor(ids[13:24]))]), ids


@pytest.mark.parametrize("family", ["qwen3", "qwen3-bias", "phi3", "phi3-partial-rotary", "gqa"])
def test_logits_match_transformers_and_the_torch_layers(family):
    model = gqa_llama(dtype=torch.float32, tied=True) if family == "gqa" else tiny(family)
    lean = lean_llama.LeanLlama(model)
    got, ids = walk(model, lambda m: lean)
    assert lean.runs_native(list(zip(lean.w.blocks, lean.kv)))  # the C stack ran it
    with native.disabled():
        torch_layers, _ = walk(model, lean_llama.LeanLlama)
    torch.testing.assert_close(got, reference_logits(model, ids), atol=2e-5, rtol=1e-4)
    torch.testing.assert_close(got, torch_layers, atol=2e-5, rtol=1e-4)


def test_a_row_is_the_same_bits_alone_or_among_others_and_on_any_thread_count(threads):
    model = gqa_llama(dtype=torch.float32, tied=True, layers=3)
    ids = torch.randint(0, 64, (30,), generator=torch.Generator().manual_seed(2))
    results = []
    for count in (1, 2, 3):
        threads(count)
        lm = lean_llama.LeanLlama(model)
        one = torch.cat([lm.forward(ids[i: i + 1]) for i in range(20)])
        lm.crop(12)  # a verify pass of 8 rows over slots the one-row passes wrote
        several = lm.forward(ids[12:20])
        assert torch.equal(several, one[12:20])
        results.append(one)
    assert all(torch.equal(r, results[0]) for r in results[1:])


def test_a_token_tree_attends_as_on_the_torch_layers():
    model = gqa_llama(dtype=torch.float32, tied=True, layers=3)
    prefix, tokens, parents = [3, 9, 4, 17, 8], [5, 6, 7, 11, 12, 13], [-1, -1, 0, 0, 2, 4]
    got = CachedLM(model, "lean").tree_forward(prefix, tokens, parents)
    with native.disabled():
        want = CachedLM(model, "lean").tree_forward(prefix, tokens, parents)
    torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-4)
    for node, parent in enumerate(parents):  # each node: the logits after its own path, fed as a chain
        path, at = [tokens[node]], parent
        while at != -1:
            path.insert(0, tokens[at])
            at = parents[at]
        torch.testing.assert_close(got[len(prefix) + node], reference_logits(model, prefix + path)[-1],
                                   atol=2e-5, rtol=1e-4)


@pytest.mark.slow
def test_greedy_speculation_in_c_is_the_targets_own_greedy_decode():
    model = gqa_llama(dtype=torch.float32, tied=True, layers=3, sharpen=20)
    prompt = torch.tensor([[5, 9, 11, 5, 9, 11, 5, 9, 11, 3]])
    want = reference_greedy(model, prompt, 40)
    trace = speculative_generate(model, PromptLookupDrafter(), prompt, DecodeConfig(k=5, temperature=0,
                                                                                       max_new_tokens=40))
    assert trace.new_tokens == want and trace.counts().accepted > 0


def test_a_missing_compiler_or_the_switch_leaves_the_torch_layers_with_the_reason(monkeypatch):
    monkeypatch.setenv(library.ENV, "0")
    lib, why = build.load_library()
    assert lib is None and library.ENV in why
    monkeypatch.delenv(library.ENV)
    monkeypatch.setenv("CC", "/nonexistent/cc")
    lib, why = build.load_library()
    assert lib is None and "did not build" in why and "torch" in why


def test_float64_models_stay_on_the_torch_layers():
    model = gqa_llama()  # float64
    lean = lean_llama.LeanLlama(model)
    assert not lean.runs_native(list(zip(lean.w.blocks, lean.kv)))


@pytest.mark.slow
def test_a_model_and_its_packed_weights_are_freed_once_nothing_else_holds_them():
    import gc
    import weakref

    from specviz.runtime.native import ops

    model = gqa_llama(dtype=torch.float32, tied=True, layers=2)
    speculative_generate(model, PromptLookupDrafter(), torch.tensor([[3, 4, 5, 3, 4]]),
                         DecodeConfig(k=3, temperature=0, max_new_tokens=8))
    head = lean_llama.lean_weights(model).head_t
    assert head in ops._PACKED  # the head was packed for the C stack
    gone, head_gone = weakref.ref(model), weakref.ref(head)
    del model, head
    gc.collect()
    assert gone() is None and head_gone() is None


@pytest.mark.slow  # a C build (c_build: one per test run, shared)
def test_a_build_lands_in_its_cache_named_by_what_made_it_and_clears_other_builds(monkeypatch, c_build):
    import shutil

    folder, path, stale = c_build  # built where the stale build lay
    monkeypatch.setenv(library.CACHE_ENV, str(folder))
    cc = shutil.which("cc") or shutil.which("gcc")
    assert path.parent == folder and path.exists() and not stale.exists()
    assert build.compile_library(cc) == path  # built once
