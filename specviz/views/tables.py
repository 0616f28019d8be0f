"""A lab's DataFrame as a reader sees it: column names in words, not snake_case, and sizes as 1.2M / 340k. The
labs' own frames (and their CSV downloads) keep their names; only what a table on the page shows goes through here."""
from __future__ import annotations

import pandas as pd

NAMES = {"tokens_per_s": "tokens/s", "baseline_tokens_per_s": "baseline tokens/s", "extra_mib": "extra MiB",
         "target_passes_per_token": "target passes / token", "speedup_min": "speedup, lowest pair",
         "speedup_max": "speedup, highest pair", "tau": "τ (tokens / round)", "alpha": "α", "c": "c (draft step / target)",
         "v": "v (verify / target)"}


def size_text(n) -> str:
    """A count of parameters (or stored n-grams) as 1.2M, 340k, 512; 0 (model-free) stays 0."""
    if pd.isna(n):
        return "–"
    n = int(n)
    return f"{n / 1e9:.1f}B" if n >= 1e9 else f"{n / 1e6:.1f}M" if n >= 1e6 else f"{n / 1e3:.0f}k" if n >= 1e3 else str(n)


def readable(frame: pd.DataFrame, digits: int = 3) -> pd.DataFrame:
    """``frame`` rounded, its ``size`` column as text and every snake_case column named in words."""
    out = frame.round(digits)
    if "size" in out.columns:
        out["size"] = out["size"].map(size_text)
    return out.rename(columns=lambda c: NAMES.get(c, c.replace("_", " ") if isinstance(c, str) else c))
