"""A sampling setting: the knobs the kit sends, the same with speculation on and off."""
from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Setting:
    temperature: float = 0.6
    top_k: int = 3
    top_p: float = 1.0
    min_p: float = 0.0

    def __post_init__(self):
        for name, low, high in (("temperature", 0, 100), ("top_p", 1e-9, 1), ("min_p", 0, 1)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not low <= v <= high:
                raise ValueError(f"{name} must be a number in [{low:g}, {high:g}], got {v!r}")
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 0:
            raise ValueError(f"top_k must be an integer >= 0 (0 = off), got {self.top_k!r}")

    @property
    def label(self) -> str:
        return f"T={self.temperature:g} top_k={self.top_k} top_p={self.top_p:g} min_p={self.min_p:g}"

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def parse(cls, text: str) -> Setting:
        """From "T,top_k,top_p,min_p" (e.g. "0.6,3,1,0"); a ValueError with the form if unreadable."""
        parts = str(text).split(",")
        try:
            t, k, p, m = float(parts[0]), int(parts[1]), float(parts[2]), float(parts[3])
        except (ValueError, IndexError):
            raise ValueError(f"unreadable setting {text!r}: give T,top_k,top_p,min_p like 0.6,3,1,0") from None
        return cls(t, k, p, m)
