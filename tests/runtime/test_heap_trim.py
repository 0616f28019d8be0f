"""A lean Gemma-3 forward hands the heap it freed back to the system once collected, and only after its KV cache is
freed (else glibc keeps a finished run's cache and logits resident: ~29 MB after a 64-token decode of Gemma-3 270M)."""
import gc
import weakref

import pytest
import torch

from specviz.runtime import heap, native
from tests.helpers.tiny_gguf import write_tiny_gemma

pytest.importorskip("gguf")
pytestmark = pytest.mark.skipif(native.unavailable() is not None, reason=f"{native.unavailable()}")


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    from specviz.runtime import gguf as loader

    folder = tmp_path_factory.mktemp("gguf")
    path = write_tiny_gemma(folder / "tiny-gemma3.gguf")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SPECVIZ_GGUF_CACHE", str(tmp_path_factory.mktemp("cache")))
        return loader.load(folder, path.name, torch.float32)[0]


def test_the_heap_is_trimmed_after_the_cache_is_freed_not_before(model, monkeypatch):
    from specviz.runtime.lean_gemma import TrimWhenFreed
    from specviz.runtime.lm import CachedLM

    lm = CachedLM(model)
    lm.feed([2, 6, 7, 8])
    assert isinstance(lm.cache.trim_when_freed, TrimWhenFreed)
    assert list(vars(lm.cache))[-1] == "trim_when_freed"  # released after every other attribute, the cache among them
    kv = weakref.ref(lm.cache.kv)
    seen = []
    monkeypatch.setattr(heap, "give_back_freed_memory", lambda: seen.append(kv() is None) or True)
    del lm
    gc.collect()
    assert seen == [True]  # called once, the cache already gone


def test_a_live_forward_trims_nothing(model, monkeypatch):
    """The negative control: while the forward lives (and after it is dropped), one call, never more."""
    from specviz.runtime.lm import CachedLM

    calls = []
    monkeypatch.setattr(heap, "give_back_freed_memory", lambda: calls.append(1) or True)
    lm = CachedLM(model)
    lm.feed([2, 6, 7])
    lm.rollback(1)
    lm.feed([6])
    assert calls == []
    del lm
    gc.collect()
    assert calls == [1]


@pytest.mark.skipif(not heap._trim(), reason="no malloc_trim in this C library")
def test_trimming_returns_true_where_the_c_library_has_malloc_trim():
    assert heap.give_back_freed_memory() is True
