"""A cache keyed by an object's identity and holding it weakly: an entry goes when its object is collected. For what
``weakref.WeakKeyDictionary`` cannot key: tensors (they compare elementwise) and dataclasses with eq (unhashable)."""
from __future__ import annotations

import weakref


class IdentityCache:
    """obj -> value while obj lives (a model's packed weights live as long as its weights do)."""

    def __init__(self):
        self._entries: dict[int, tuple] = {}  # id(obj) -> (weakref to obj, value)

    def _hit(self, obj) -> tuple | None:
        hit = self._entries.get(id(obj))
        return hit if hit is not None and hit[0]() is obj else None

    def __contains__(self, obj) -> bool:
        return self._hit(obj) is not None

    def get(self, obj, default=None):
        hit = self._hit(obj)
        return default if hit is None else hit[1]

    def put(self, obj, value):
        """Keeps value for obj; returns it."""
        key = id(obj)
        self._entries[key] = (weakref.ref(obj, lambda _, key=key: self._entries.pop(key, None)), value)
        return value

    def cached(self, obj, make):
        """obj's value, made by ``make()`` the first time (None is a value too)."""
        hit = self._hit(obj)
        return self.put(obj, make()) if hit is None else hit[1]

    def pop(self, obj) -> None:
        if self._hit(obj) is not None:
            del self._entries[id(obj)]
