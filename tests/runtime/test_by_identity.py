"""The identity cache under the packed weights: keyed by the object itself (equal tensors are two entries), made
once (None included), and gone with its object."""
import gc
import threading
import time
from concurrent.futures import ThreadPoolExecutor

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


def test_threads_asking_at_once_get_one_value_made_once():
    """Eight threads ask for the same object's value while the first is still making it: one make, one value for
    all (a second value put over the first would free what C structs built from the first point into)."""
    cache, made, ready = IdentityCache(), [], threading.Barrier(8)
    key = torch.zeros(2)

    def make():
        made.append(1)
        time.sleep(0.05)  # the others arrive while this one makes
        return object()

    def ask():
        ready.wait()
        return cache.cached(key, make)

    with ThreadPoolExecutor(8) as pool:
        values = list(pool.map(lambda _: ask(), range(8)))
    assert len(made) == 1 and all(v is values[0] for v in values)
