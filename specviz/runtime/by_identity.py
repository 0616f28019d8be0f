"""A cache keyed by an object's identity and holding it weakly: an entry goes when its object is collected. For what
``weakref.WeakKeyDictionary`` cannot key: tensors (they compare elementwise) and dataclasses with eq (unhashable).
Built on torch's own ``WeakIdKeyDictionary``."""
from __future__ import annotations

from torch.utils.weak import WeakIdKeyDictionary


class IdentityCache:
    """obj -> value while obj lives (a model's packed weights live as long as its weights do)."""

    def __init__(self):
        self._entries = WeakIdKeyDictionary()  # obj (by identity, weakly) -> value

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
        """obj's value, made by ``make()`` the first time (None is a value too)."""
        return self._entries[obj] if obj in self._entries else self.put(obj, make())

    def pop(self, obj) -> None:
        self._entries.pop(obj, None)
