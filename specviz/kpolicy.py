"""How many tokens to draft next round: fixed, or adapted from how the last rounds went."""
from __future__ import annotations

from collections import deque

from .config import DecodeConfig
from .trace import Round


class KPolicy:
    """``fixed``: always cfg.k."""

    def __init__(self, cfg: DecodeConfig):
        self.k, self.min_k, self.max_k = cfg.k, cfg.min_k, cfg.max_k

    def update(self, r: Round) -> None:
        pass


class HistoryK(KPolicy):
    """The tutorial's rule: mean acceptance of the last 10 rounds > 0.8 -> k + 1; < 0.5 -> k - 1;
    k kept within [min_k, max_k]. A round's acceptance is accepted / drafted."""

    def __init__(self, cfg: DecodeConfig, window: int = 10):
        super().__init__(cfg)
        self.recent: deque[float] = deque(maxlen=window)

    def update(self, r: Round) -> None:
        if not r.drafted:
            return
        self.recent.append(r.n_accepted / len(r.drafted))
        mean = sum(self.recent) / len(self.recent)
        if mean > 0.8:
            self.k = min(self.k + 1, self.max_k)
        elif mean < 0.5:
            self.k = max(self.k - 1, self.min_k)


class HeuristicK(KPolicy):
    """transformers' "heuristic" schedule: +2 after a round whose drafts were all accepted, else -1;
    at least 1 (and here at most max_k)."""

    def update(self, r: Round) -> None:
        if r.k == 0:
            return
        if r.n_accepted == r.k:
            self.k = min(self.k + 2, self.max_k)
        else:
            self.k = max(self.k - 1, 1)


def make_policy(cfg: DecodeConfig) -> KPolicy:
    return {"fixed": KPolicy, "history": HistoryK, "heuristic": HeuristicK}[cfg.k_policy](cfg)
