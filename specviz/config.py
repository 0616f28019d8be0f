"""DecodeConfig: every knob of one generation run, validated once, plus named presets."""
from __future__ import annotations

from dataclasses import asdict, dataclass

K_POLICIES = ("fixed", "history", "heuristic")
EXAMPLE_PROMPTS = [  # in the style of the bundled models' corpus (Shakespeare and Milton)
    "ROMEO:",
    "Shall I compare thee to a summer's day?",
    "To be, or not to be, that is the question:",
    "Of Man's first disobedience, and the fruit",
    "KING HENRY:\nOnce more unto the breach, dear friends,",
]
HELDOUT_PROMPTS = [  # for benchmarks: from the corpus's held-out works (its validation split) or new lines
    "VALENTINE:\nCease to persuade, my loving Proteus:",
    "TIMON:\nFriends, I have brought you here tonight",
    "JULIA:\nBut say, Lucetta, now we are alone,",
    "The night is cold, and all the stars are out;",
    "APEMANTUS:\nThou art a fool to trust",
]


@dataclass(frozen=True)
class DecodeConfig:
    """Settings shared by speculative and autoregressive generation.

    temperature == 0 means greedy. Otherwise logits are divided by temperature, then
    top-k (0 = off), then top-p (1.0 = off) filtering is applied, in that order, to the
    target's AND the draft's logits (the order transformers' ``generate()`` uses).
    """

    k: int = 4
    max_new_tokens: int = 64
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0
    k_policy: str = "fixed"
    min_k: int = 1
    max_k: int = 10
    # stop a round's drafting once the draft gives its own token a probability below this (0 = off):
    # transformers' assistant_confidence_threshold. The stop depends on the draft alone: still lossless.
    draft_stop: float = 0.0
    record: bool = True  # False keeps only what generation needs (benchmarks the recording overhead)

    def __post_init__(self):
        _check_int("k", self.k, low=1, hint="draft at least one token per round")
        _check_int("max_new_tokens", self.max_new_tokens, low=0)
        _check_int("top_k", self.top_k, low=0, hint="use 0 to turn top-k off")
        _check_int("seed", self.seed, low=0)
        if self.seed >= 2**63:
            raise ValueError(f"seed must be < 2**63 (a torch.Generator seed), got {self.seed}")
        _check_int("min_k", self.min_k, low=1)
        _check_int("max_k", self.max_k, low=self.min_k, hint=f"max_k must be >= min_k ({self.min_k})")
        if not _is_number(self.temperature) or self.temperature < 0:
            raise ValueError(f"temperature must be a number >= 0 (0 = greedy), got {self.temperature!r}")
        if not _is_number(self.top_p) or not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1] (1.0 = off), got {self.top_p!r}")
        if not _is_number(self.draft_stop) or not 0 <= self.draft_stop < 1:
            raise ValueError(f"draft_stop must be in [0, 1) (0 = off), got {self.draft_stop!r}")
        if not isinstance(self.record, bool):
            raise ValueError(f"record must be True or False, got {type(self.record).__name__}")
        if self.k_policy not in K_POLICIES:
            raise ValueError(f"k_policy must be one of {K_POLICIES}, got {self.k_policy!r}")
        if self.k_policy != "fixed" and not self.min_k <= self.k <= self.max_k:
            raise ValueError(
                f"with k_policy={self.k_policy!r} the starting k ({self.k}) must lie in "
                f"[min_k, max_k] = [{self.min_k}, {self.max_k}]"
            )

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def to_dict(self) -> dict:
        return asdict(self)


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and x == x  # rejects NaN


def _check_int(name: str, value, low: int, hint: str = "") -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if value < low:
        raise ValueError(f"{name} must be >= {low}, got {value}" + (f" ({hint})" if hint else ""))


# the explorer's opening settings (the app's sliders and the /generate API default to them; the benchmark's floor
# is measured at them)
DEFAULTS = DecodeConfig(k=4, temperature=0.8, max_new_tokens=64)

PRESETS = {
    "greedy": DecodeConfig(k=4, temperature=0.0),
    "sample": DecodeConfig(k=4, temperature=1.0),
    "nucleus": DecodeConfig(k=4, temperature=0.8, top_k=50, top_p=0.95),
    "adaptive": DecodeConfig(k=4, temperature=0.0, k_policy="heuristic"),
    "confident": DecodeConfig(k=10, temperature=0.0, draft_stop=0.4),  # transformers' default assistant rule
}
