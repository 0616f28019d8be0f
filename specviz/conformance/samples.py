"""The samples on disk: one JSON line per continuation, speculation on in one file and off in another.

A line: {"engine", "version", "prompt_id", "prompt", "setting" (label), "settings" (the knobs), "mode" ("on" /
"off"), "sample", "seed", "n_predict", "tokens", "texts", "logprobs", "top" ([[token, logprob], ...] per token, or
null), "draft_n", "draft_accepted" (the engine's own acceptance counts, or null)}. ``read_samples`` checks both
files and returns one DataFrame (a row per line), so a panel can read what the kit wrote."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

FIELDS = ("engine", "version", "prompt_id", "setting", "settings", "mode", "sample", "seed", "n_predict", "tokens",
          "texts", "logprobs", "top", "draft_n", "draft_accepted")
MIN_SAMPLES = 30  # per mode, prompt and setting: fewer cannot make a chi-square test worth stating


def sample_line(info: dict, prompt_id: str, prompt, setting, mode: str, index: int, seed, n_predict: int,
                draw) -> dict:
    return dict(engine=info["engine"], version=info["version"], prompt_id=prompt_id, prompt=prompt,
                setting=setting.label, settings=setting.to_dict(), mode=mode, sample=index, seed=seed,
                n_predict=n_predict, tokens=draw.tokens, texts=draw.texts, logprobs=draw.logprobs,
                top=[[list(e) for e in row] for row in draw.top] if draw.top else None,
                draft_n=draw.draft_n, draft_accepted=draw.draft_accepted)


def write_lines(path: Path, lines: list[dict]) -> None:
    with open(path, "w") as f:
        for line in lines:
            f.write(json.dumps(line) + "\n")


def load_lines(path, mode: str) -> pd.DataFrame:
    """One file's lines as a DataFrame, each checked: valid JSON, every field, the mode, token ids a list."""
    rows = []
    with open(path) as f:
        for number, text in enumerate(f, 1):
            if not text.strip():
                continue
            try:
                row = json.loads(text)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}: line {number} is not JSON ({e.msg})") from None
            missing = [k for k in FIELDS if not isinstance(row, dict) or k not in row]
            if missing:
                raise ValueError(f"{path}: line {number} lacks {', '.join(missing)}")
            if row["mode"] != mode:
                raise ValueError(f"{path}: line {number} is mode {row['mode']!r}, expected {mode!r} in this file")
            if not isinstance(row["tokens"], list) or not row["tokens"]:
                raise ValueError(f"{path}: line {number} has no tokens list")
            rows.append(row)
    if not rows:
        raise ValueError(f"{path}: no samples")
    return pd.DataFrame(rows)


def read_samples(path_on, path_off, min_samples: int = MIN_SAMPLES) -> pd.DataFrame:
    """Both files as one DataFrame; a ValueError where they were drawn with different settings, prompts, lengths
    or engines, or hold fewer than ``min_samples`` per mode, prompt and setting."""
    on, off = load_lines(path_on, "on"), load_lines(path_off, "off")
    for col in ("engine", "n_predict"):
        if set(on[col].astype(str)) != set(off[col].astype(str)):
            raise ValueError(f"the two files differ in {col}: {sorted(set(on[col].astype(str)))} (on) against "
                             f"{sorted(set(off[col].astype(str)))} (off)")
    groups_on, groups_off = set(zip(on.prompt_id, on.setting)), set(zip(off.prompt_id, off.setting))
    if groups_on != groups_off:
        raise ValueError(f"the two files were drawn with different settings or prompts: only on "
                         f"{sorted(groups_on - groups_off)[:3]}, only off {sorted(groups_off - groups_on)[:3]}")
    frame = pd.concat([on, off], ignore_index=True)
    sizes = frame.groupby(["prompt_id", "setting", "mode"]).size()
    if sizes.min() < min_samples:
        (p, s, m), n = sizes.idxmin(), int(sizes.min())
        raise ValueError(f"too few samples: {n} with speculation {m} for prompt {p} at {s}; the kit needs at least "
                         f"{min_samples} per mode (its power is stated for the N drawn)")
    return frame
