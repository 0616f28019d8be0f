"""A language model in numpy alone (no torch), behind the forward interface ``specviz.slim`` decodes on: its logits at
a position depend on the token there and on the position, so a cache that is not rolled back gives other text."""
import numpy as np


class ToyForward:
    def __init__(self, vocab: int = 12, seed: int = 0, sharpen: float = 3.0, limit: int = 256):
        rng = np.random.default_rng(seed)
        self.vocab, self.limit = vocab, limit
        self.by_token = (rng.standard_normal((vocab, vocab)) * sharpen).astype(np.float32)
        self.by_position = (rng.standard_normal((7, vocab)) * sharpen / 3).astype(np.float32)
        self.ids: list[int] = []
        self.passes = 0

    @property
    def length(self) -> int:
        return len(self.ids)

    def logits_at(self, ids: list[int], i: int) -> np.ndarray:
        """The logits after ids[:i + 1]: what decode returns for that row."""
        return self.by_token[ids[i]] + self.by_position[i % 7] + (0.5 * self.by_token[ids[i - 1]] if i else 0)

    def decode(self, tokens) -> np.ndarray:
        start = len(self.ids)
        self.ids += [int(t) for t in tokens]
        self.passes += 1
        return np.stack([self.logits_at(self.ids, i) for i in range(start, len(self.ids))]).astype(np.float32)

    def crop(self, keep: int) -> None:
        del self.ids[keep:]

    def greedy(self, prompt: list[int], n: int) -> list[int]:
        """The model's own greedy continuation, position by position without any cache: the reference."""
        ids = list(prompt)
        for _ in range(n):
            ids.append(int(self.logits_at(ids, len(ids) - 1).argmax()))
        return ids[len(prompt):]
