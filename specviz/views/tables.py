"""A lab's DataFrame as a reader sees it: column names in words, not snake_case, and sizes as 1.2M / 340k. The
labs' own frames (and their CSV downloads) keep their names; only what a table on the page shows goes through here."""
from __future__ import annotations

import pandas as pd

from ..config import LOSSY

NAMES = {"tokens_per_s": "tokens/s", "baseline_tokens_per_s": "baseline tokens/s", "extra_mib": "extra MiB",
         "target_passes_per_token": "target passes / token", "speedup_min": "speedup, lowest pair",
         "speedup_max": "speedup, highest pair", "tau": "τ (tokens / round)", "alpha": "α", "c": "c (draft step / target)",
         "v": "v (verify / target)",
         # the temperature lab
         "alpha_visited": "α (contexts the runs met)", "alpha_fixed": "α (fixed contexts)",
         # the acceptance-rule lab
         "alpha_closed": "α closed form", "tau_closed": "τ closed form", "tv_closed": "TV from p, closed form",
         "mc_tv": "TV from p, one context (sampled)", "mc_tv_closed": "TV from p, one context (closed form)",
         "mc_tv_noise": "TV sampling floor", "mc_p_vs_p": "χ² p-value against p",
         "mc_p_vs_law": "χ² p-value against its law", "forwards_per_token": "target passes / token",
         "speedup_closed": "speedup closed form", "target_text": "target's own text",
         # the losslessness lab, compare drafts, an engine's advice
         "tv_to_p": "TV from p", "chi2_p": "χ² p-value", "target_put": "target's token there",
         "tokens_iid": "tokens / round if independent", "tokens_iid_low": "tokens / round if independent, low",
         "tokens_iid_high": "tokens / round if independent, high"}


def size_text(n) -> str:
    """A count of parameters (or stored n-grams) as 1.2M, 340k, 512; 0 (model-free) stays 0."""
    if pd.isna(n):
        return "–"
    n = int(n)
    return f"{n / 1e9:.1f}B" if n >= 1e9 else f"{n / 1e6:.1f}M" if n >= 1e6 else f"{n / 1e3:.0f}k" if n >= 1e3 else str(n)


def rule_name(variant: str) -> str:
    """An accept rule's name as a reader reads it: "exact_match+argmax" -> "exact match, argmax drafts", a lossy
    rule marked "(lossy)", Leviathan's capitalised."""
    rule, plus, _ = str(variant).partition("+")
    words = "Leviathan" if rule == "leviathan" else rule.replace("_", " ")
    return words + (", argmax drafts" if plus else "") + (" (lossy)" if rule in LOSSY else "")


def headers(columns) -> list[str]:
    """The words a table on the page heads ``columns`` with (``readable``'s names)."""
    return [NAMES.get(c, c.replace("_", " ")) for c in columns]


def empty(columns) -> pd.DataFrame:
    """An empty table headed in words: what a results table shows before its first run (a bare ``gr.Dataframe``
    shows Gradio's placeholder headers 1, 2, 3)."""
    return pd.DataFrame(columns=headers(columns))


def readable(frame: pd.DataFrame, digits: int = 3) -> pd.DataFrame:
    """``frame`` rounded, its ``size`` column as text and every snake_case column named in words; a named index
    becomes a column, an unnamed one (0, 1, 2, ...) is dropped, never shown as a header or a column."""
    named = any(name is not None for name in frame.index.names)
    out = frame.round(digits).reset_index(drop=not named)
    if "size" in out.columns:
        out["size"] = out["size"].map(size_text)
    if "rule" in out.columns:
        out["rule"] = out["rule"].map(rule_name)
    return out.rename(columns=lambda c: NAMES.get(c, c.replace("_", " ")) if isinstance(c, str) else str(c))
