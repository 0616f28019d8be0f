"""The llama.cpp forward: the GGUF it writes (read back by transformers' own GGUF loader), its logits against
torch's, its rollback, greedy equality of speculative decoding on it, and its refusals."""
import importlib.util
from dataclasses import replace
from types import SimpleNamespace

import pytest
import torch
from transformers import AutoModelForCausalLM

from specviz import DecodeConfig, TreeConfig, autoregressive_generate, speculative_generate
from specviz.drafts.drafter import ModelDrafter
from specviz.runtime import gguf_write, llamacpp, llamacpp_seq, lm
from specviz.trace import Trace
from tests.helpers.models import llamacpp_llama as llama
from tests.helpers.models import tiny_gpt2

needs_gguf = pytest.mark.skipif(importlib.util.find_spec("gguf") is None, reason="the gguf package is not installed")
needs_llamacpp = pytest.mark.skipif(llamacpp.available() is not None,
                                    reason="llama-cpp-python is not installed (pip install llama-cpp-python gguf)")


@pytest.fixture(autouse=True)
def cache_folder(tmp_path, monkeypatch):
    monkeypatch.setenv(gguf_write.CACHE_ENV, str(tmp_path / "gguf"))


@pytest.mark.slow
@needs_gguf
@pytest.mark.parametrize("heads, kv_heads, tied", [(4, 2, False), (4, 4, True)])
def test_written_gguf_reads_back_as_the_same_model(tmp_path, heads, kv_heads, tied):
    """transformers' GGUF loader undoes llama.cpp's q/k permutation: the model read back gives the same logits."""
    model = llama(heads, kv_heads, tied)
    gguf_write.write(model, tmp_path / "m.gguf")
    back = AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file="m.gguf").eval()
    ids = torch.tensor([[3, 17, 5, 60, 2, 9]])
    with torch.no_grad():
        assert torch.allclose(model(ids).logits, back(ids).logits, atol=1e-5)


def test_unsupported_models_and_paths_are_refused(monkeypatch):
    reason = llamacpp.supports(tiny_gpt2())
    assert reason and ("llama-cpp-python" in reason or "Llama models" in reason)
    with pytest.raises(ValueError, match="llama"):
        lm.CachedLM(tiny_gpt2(), "llamacpp")
    assert lm.CachedLM(tiny_gpt2()).path == "dynamic"  # as a default it applies only where it can
    monkeypatch.setenv(lm.PATH_ENV, "llamacpp")
    assert lm.CachedLM(tiny_gpt2()).path == "dynamic"
    monkeypatch.setenv(lm.PATH_ENV, "vulkan")
    with pytest.raises(ValueError, match="SPECVIZ_FORWARD must be one of"):
        lm.CachedLM(tiny_gpt2())


@needs_llamacpp
@pytest.mark.parametrize("kv", llamacpp.KV_TYPES)
def test_logits_rows_and_rollback_match_torch(monkeypatch, kv):
    monkeypatch.setenv(llamacpp.KV_ENV, kv)
    model = llama()
    ours, theirs = lm.CachedLM(model, "lean"), lm.CachedLM(model, "llamacpp")
    assert theirs.path == "llamacpp" and theirs.cache.kv == kv
    prompt = [5, 1, 40, 7, 7, 33]
    close = dict(atol=2e-3, rtol=1e-3)
    assert torch.allclose(ours.feed(prompt), theirs.feed(prompt), **close)
    assert torch.allclose(ours.feed([8, 9, 10, 11]), theirs.feed([8, 9, 10, 11]), **close)  # several rows at once
    ours.rollback(7), theirs.rollback(7)  # drop positions 7.. from llama.cpp's cache
    assert theirs.cache.get_seq_length() == 7
    assert torch.allclose(ours.feed([50, 51]), theirs.feed([50, 51]), **close)
    with pytest.raises(ValueError, match="token trees"):
        theirs.tree_forward([], [1, 2], [-1, -1])


@needs_llamacpp
@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_speculative_on_llamacpp_equals_its_own_autoregressive_decode(monkeypatch, temperature):
    target, draft = llama(seed=0), llama(seed=1)
    with torch.no_grad():  # a draft that agrees often: the draft is the target plus a little noise
        for p, q in zip(draft.parameters(), target.parameters()):
            if p.shape == q.shape:
                p.copy_(q + 0.02 * torch.randn_like(q))
    monkeypatch.setattr(lm, "DEFAULT_PATH", "llamacpp")
    cfg = DecodeConfig(k=4, temperature=temperature, max_new_tokens=40, seed=3)
    prompt = torch.tensor([[4, 8, 15, 16, 23, 42]])
    spec = speculative_generate(target, ModelDrafter(draft), prompt, cfg)
    assert spec.counts().accepted > 0
    if temperature == 0.0:
        assert list(spec.new_tokens) == list(autoregressive_generate(target, prompt, cfg).new_tokens)


@needs_llamacpp
def test_token_trees_run_on_the_torch_forward_when_llamacpp_is_the_default(monkeypatch):
    """A tree needs attention masks: with llama.cpp as the default forward, a tree run's target and draft take the
    torch forward (and a chain run beside it llama.cpp's); both give the target's own greedy text."""
    target, draft = llama(seed=0), llama(seed=1)
    monkeypatch.setattr(lm, "DEFAULT_PATH", "llamacpp")
    assert lm.CachedLM(target).path == "llamacpp" and lm.CachedLM(target, trees=True).path == "lean"
    prompt = torch.tensor([[4, 8, 15, 16, 23, 42]])
    cfg = DecodeConfig(temperature=0.0, max_new_tokens=24, tree=TreeConfig.parse("2,2,1"))
    reference = autoregressive_generate(target, prompt, replace(cfg, tree=None)).new_tokens
    assert list(speculative_generate(target, ModelDrafter(draft), prompt, cfg).new_tokens) == list(reference)


def test_the_baseline_runs_on_the_forward_timed_faster(monkeypatch):
    """An autoregressive baseline takes the fastest one-row forward: where llama.cpp's runs the model on a CPU, it and
    the default are timed once per model and thread count and the faster is taken (llama.cpp's as the default: the
    lean one is the other); SPECVIZ_BASELINE=same keeps the default, and anything else is refused by name."""
    model = llama()
    monkeypatch.setattr(llamacpp, "supports", lambda m: None)
    costs = {"llamacpp": 1.0, "auto": 2.0}
    timed = []
    monkeypatch.setattr(lm, "one_row_seconds", lambda m, paths: timed.append(paths) or {p: costs[p] for p in paths})
    assert lm.baseline_path(model) == "llamacpp"
    assert lm.baseline_path(model) == "llamacpp" and len(timed) == 1  # timed once
    other = llama(seed=5)
    costs["llamacpp"] = 3.0
    assert lm.baseline_path(other) is None  # the default (the lean forward) was faster
    monkeypatch.setattr(lm, "DEFAULT_PATH", "llamacpp")
    assert lm.baseline_path(other) == "auto" and timed[-1] == ["auto", "llamacpp"]
    monkeypatch.setattr(lm, "DEFAULT_PATH", "auto")
    monkeypatch.setenv(lm.BASELINE_ENV, "same")
    assert lm.baseline_path(model) is None
    monkeypatch.setenv(lm.BASELINE_ENV, "quickest")
    with pytest.raises(ValueError, match="SPECVIZ_BASELINE must be 'fastest' or 'same'"):
        lm.baseline_path(model)
    monkeypatch.delenv(lm.BASELINE_ENV)
    monkeypatch.setattr(llamacpp, "supports", lambda m: "not installed")
    assert lm.baseline_path(llama(seed=6)) is None
    assert lm.baseline_path(tiny_gpt2()) is None


def test_one_row_costs_are_timed_on_each_forward():
    """The timing behind baseline_path: one fastest one-row pass a path, positive, on the paths asked for."""
    costs = lm.one_row_seconds(llama(), ["auto", "dynamic"], passes=4)
    assert set(costs) == {"auto", "dynamic"} and all(0 < c < 1 for c in costs.values())


@needs_llamacpp
def test_the_apps_baseline_runs_on_llamacpp_and_says_so(monkeypatch):
    """The explorer's baseline of a torch run is llama.cpp's autoregressive decode where its one-row pass was timed
    the faster (for this tiny model the two are within each other's noise: the timing is fixed here), recorded as
    such, with the target's own greedy text (this tiny model's logits have no near-ties between the two forwards)."""
    from specviz.app import runs

    monkeypatch.setattr(lm, "one_row_seconds", lambda model, paths, passes=12: {p: 0.5 if p == "llamacpp" else 1.0
                                                                                 for p in paths})
    model = llama()
    cfg = DecodeConfig(k=3, temperature=0.0, max_new_tokens=8)
    assert runs.run_forward(model, cfg) is None  # not loaded from a GGUF: the default, as the library's
    monkeypatch.setattr(runs, "llamacpp", SimpleNamespace(source=lambda m: "model.gguf"))  # as a GGUF's model

    class Store:
        def target(self, name):
            return model, None

    ids = torch.tensor([[3, 17, 5, 60, 2, 9]])
    cfg = DecodeConfig(k=3, temperature=0.0, max_new_tokens=12)
    trace = speculative_generate(model, ModelDrafter(llama(seed=1)), ids, cfg)
    base = runs.baseline(Store(), trace)
    assert trace.forward in ("lean", "lean-c") and base.forward == "llamacpp"  # lean-c: its layers in C
    assert base.new_tokens == trace.new_tokens == autoregressive_generate(model, ids, cfg).new_tokens


@needs_llamacpp
def test_stalled_decodes_send_the_run_to_one_thread():
    """Two decodes far slower than the fastest of their row count (threads spinning at a barrier on a busy host):
    the run goes on with one thread; one alone does not move it, and a pooled context starts over."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        f = llamacpp.LlamaCppForward(llama())
        f._watch(1, 0.004)
        f._watch(1, 0.005)
        f._watch(1, 0.5)
        assert f.threads == 2
        f._watch(5, 0.5)  # the first of its row count: nothing to compare with
        f._watch(1, 0.4)
        assert f.threads == 1
        logits = f.forward(torch.tensor([3, 17, 5]))  # still decodes, on one thread
        assert logits.shape == (3, 96)
    finally:
        torch.set_num_threads(before)


def test_the_kv_cache_precision_is_llamacpps_default_unless_asked(monkeypatch):
    monkeypatch.delenv(llamacpp.KV_ENV, raising=False)
    assert llamacpp.kv_type() == "f16"
    monkeypatch.setenv(llamacpp.KV_ENV, " F32 ")
    assert llamacpp.kv_type() == "f32"
    monkeypatch.setenv(llamacpp.KV_ENV, "q8_0")
    with pytest.raises(ValueError, match="SPECVIZ_LLAMACPP_KV must be one of"):
        llamacpp.kv_type()


def test_a_llama_cpp_without_its_library_is_refused_with_its_reason_by_every_thread(monkeypatch):
    """llama-cpp-python installed without its shared library (its import raises on the library) or half imported:
    ``available`` says why, every time and in every thread asking at once, and never raises (once the second
    import found a half-initialised module and the 'auto' forward failed a visitor's run with AttributeError)."""
    import sys
    import types
    from concurrent.futures import ThreadPoolExecutor

    monkeypatch.setattr(llamacpp_seq, "_state", {})
    monkeypatch.setitem(sys.modules, "llama_cpp", types.ModuleType("llama_cpp"))  # no llama_backend_init
    with ThreadPoolExecutor(8) as pool:
        reasons = list(pool.map(lambda _: llamacpp.available(), range(32)))
    assert all(r is not None and "llama_backend_init" in r and "pip install llama-cpp-python" in r for r in reasons)
    assert llamacpp.supports(llama()) == reasons[0]


@needs_llamacpp
def test_an_explorer_run_takes_the_faster_forward_as_its_baseline_does(monkeypatch):
    """The explorer's chains (and /generate) of a model loaded from a GGUF run on llama.cpp's forward where its
    one-row pass was timed the faster (the timing is fixed here), their trace saying so; any other model, a token
    tree, or a forward the operator named (SPECVIZ_FORWARD) keeps the default; so does a slower llama.cpp."""
    from specviz.app import runs
    from specviz.drafts.drafter import PromptLookupDrafter

    model = llama()
    cfg = DecodeConfig(k=3, temperature=0.0, max_new_tokens=8)
    assert runs.run_forward(model, cfg) is None  # not loaded from a GGUF: the default, as the library's
    monkeypatch.setattr(runs, "llamacpp", SimpleNamespace(source=lambda m: "model.gguf"))  # as a GGUF's model

    class Store:
        def pair(self, target, draft):
            return model, None, PromptLookupDrafter()

        def target(self, name):  # the slim route asks first: a Llama model is not its Gemma-3 GGUF
            return model, None

    monkeypatch.delenv(lm.PATH_ENV, raising=False)
    monkeypatch.setattr(lm, "one_row_seconds", lambda model, paths, passes=12: {p: 0.5 if p == "llamacpp" else 1.0
                                                                                 for p in paths})
    monkeypatch.setattr(runs, "encode", lambda tok, prompt: torch.tensor([[3, 17, 5, 60, 3, 17, 5]]))
    monkeypatch.setattr(Trace, "fill_texts", lambda self, tok: self)
    assert runs.run_forward(model, cfg) == "llamacpp"
    trace = runs.generate(Store(), "a prompt", "tiny", "prompt-lookup", cfg)
    assert trace.forward == "llamacpp" and len(trace.new_tokens) == 8
    assert runs.run_forward(model, replace(cfg, tree=TreeConfig(shape=(2, 1)))) is None
    monkeypatch.setenv(lm.PATH_ENV, "lean")
    assert runs.run_forward(model, cfg) is None
    monkeypatch.delenv(lm.PATH_ENV)
    model = llama()  # a fresh model: its own timing
    monkeypatch.setattr(lm, "one_row_seconds", lambda model, paths, passes=12: {p: 2.0 if p == "llamacpp" else 1.0
                                                                                 for p in paths})
    assert runs.run_forward(model, cfg) is None
