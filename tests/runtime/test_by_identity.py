"""The identity cache under the packed weights: keyed by the object itself (equal tensors are two entries), made
once (None included), and gone with its object."""
import gc

import pytest
import torch

from specviz.runtime.by_identity import IdentityCache


def test_equal_tensors_are_two_entries_and_each_is_made_once():
    cache, made = IdentityCache(), []
    a, b = torch.zeros(3), torch.zeros(3)
    assert cache.cached(a, lambda: made.append("a") or None) is None  # None is a value: not made again
    assert cache.cached(a, lambda: made.append("again")) is None
    assert cache.cached(b, lambda: made.append("b") or "b") == "b"
    assert made == ["a", "b"] and a in cache and b in cache and torch.zeros(3) not in cache


@pytest.mark.slow
def test_an_entry_goes_with_its_object_and_pop_forgets_it():
    cache = IdentityCache()
    a, b = torch.ones(2), torch.ones(2)
    cache.put(a, "kept")
    cache.put(b, "popped")
    cache.pop(b)
    assert cache.get(b, "none") == "none" and cache.get(a) == "kept"
    del a
    gc.collect()
    assert len(cache) == 0
