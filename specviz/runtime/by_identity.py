"""A cache keyed by an object's identity and holding it weakly: an entry goes when its object is collected. For what
``weakref.WeakKeyDictionary`` cannot key: tensors (they compare elementwise) and dataclasses with eq (unhashable).
Built on torch's own ``WeakIdKeyDictionary``."""
from __future__ import annotations

import threading

from torch.utils.weak import WeakIdKeyDictionary


class IdentityCache:
    """obj -> value while obj lives (a model's packed weights live as long as its weights do)."""

    def __init__(self):
        self._entries = WeakIdKeyDictionary()  # obj (by identity, weakly) -> value
        self._making = threading.RLock()  # one maker at a time (a maker may fill another cache)

    def __contains__(self, obj) -> bool:
        return obj in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, obj, default=None):
        return self._entries.get(obj, default)

    def put(self, obj, value):
        """Keeps value for obj; returns it."""
        self._entries[obj] = value
        return value

    def cached(self, obj, make):
        """obj's value, made by ``make()`` the first time (None is a value too), and once however many threads ask at
        once: the C layers keep pointers into a cached value, which a second thread's value must never replace."""
        if obj in self._entries:
            return self._entries[obj]
        with self._making:
            return self._entries[obj] if obj in self._entries else self.put(obj, make())

    def pop(self, obj) -> None:
        self._entries.pop(obj, None)
