"""Finding: one thing the doctor found, in plain words, with the numbers behind it."""
from __future__ import annotations

from dataclasses import dataclass, field

SEVERITIES = ("info", "warning", "problem")


@dataclass(frozen=True)
class Finding:
    code: str  # alpha, curve, iid_fit, cliff, budget_mismatch, positions_do_not_pay, drift, nothing_accepted,
    # all_or_nothing, short_drafts, temperature_collapse, position0_moves_with_k, runs_compared, missing
    severity: str  # "info" (a measurement), "warning" (worth a look) or "problem" (a fault to fix)
    text: str
    numbers: dict = field(default_factory=dict, hash=False)

    def __post_init__(self):
        if self.severity not in SEVERITIES:
            raise ValueError(f"severity must be one of {SEVERITIES}, got {self.severity!r}")
