"""The kit's run: draw N continuations with speculation on and N with it off (same prompts and settings, every
request its own seed), test them position by position, state the power, classify greedy divergences; a Card."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from .card import Card
from .greedy import NEAR_TIE, classify
from .power import detectable_tv
from .samples import MIN_SAMPLES, read_samples, sample_line, write_lines
from .settings import Setting
from .stats import holm, position_tests

DEFAULT_N = 500  # per mode, prompt and setting: a bias of ~0.1 at the first drafted position is caught (the card
# states the exact figure for the law it meets)
DEFAULT_TOKENS = 4  # token 1 from the prefill pass; 2..4 from speculation
GREEDY = Setting(temperature=0.0, top_k=0, top_p=1.0, min_p=0.0)
DEFAULT_SETTINGS = (Setting(),)  # T = 0.6, top-k 3: a draft's q processed unlike p shows there


def draw_samples(client, prompts, settings, n: int, n_predict: int, seed: int | None, info: dict):
    """(lines on, lines off): n draws each per prompt and setting; seeds seed*10^8 + 2c (on) and + 2c + 1 (off)
    for the c-th pair (independent on and off draws), or unset (seed None: the engine's own randomness)."""
    on, off, c = [], [], 0
    for j, prompt in enumerate(prompts):
        for s in settings:
            for i in range(n):
                seeds = (None, None) if seed is None else (seed * 10**8 + 2 * c, seed * 10**8 + 2 * c + 1)
                c += 1
                for mode, lines, sd in (("on", on, seeds[0]), ("off", off, seeds[1])):
                    d = client.draw(prompt, s, mode == "on", sd, n_predict, n_probs=1)  # per-token text, logprob
                    lines.append(sample_line(info, f"p{j}", prompt, s, mode, i, sd, n_predict, d))
    return on, off


def analyse(frame: pd.DataFrame, alpha: float = 0.05, skip_first: bool = True) -> pd.DataFrame:
    """Every (prompt, setting)'s position tests, Holm-adjusted over all tested rows; position 1 (the prefill
    pass's token) shown but not tested with ``skip_first``, nor a row with one category. Adds tested, p_holm,
    flagged, detectable_tv."""
    parts = []
    for (pid, setting), g in frame.groupby(["prompt_id", "setting"], sort=True):
        n_predict = int(g.n_predict.iloc[0])
        on, off = list(g[g["mode"] == "on"].tokens), list(g[g["mode"] == "off"].tokens)
        t = position_tests(on, off, range(1, n_predict + 1))
        parts.append(t.assign(prompt_id=pid, setting=setting))
    tests = pd.concat(parts, ignore_index=True)
    # a row with one category cannot reject (p = 1): left out of Holm's family, which it would only widen
    tests["tested"] = tests.pvalue.notna() & (tests.categories > 1) & ~((tests.position == 1) & skip_first)
    m = int(tests.tested.sum())
    tests["p_holm"] = np.nan
    if m:
        tests.loc[tests.tested, "p_holm"] = holm(tests.loc[tests.tested, "pvalue"].tolist())
    tests["flagged"] = tests.tested & (tests.p_holm < alpha)
    level = alpha / max(m, 1)  # Holm's first step: the level every test must beat at worst
    tests["detectable_tv"] = [detectable_tv([float(x) for x in r.law.split()], r.n_on, r.n_off, level)
                              if r.tested else np.nan for r in tests.itertuples()]
    cols = ["prompt_id", "setting", "position", "kind", "given", "n_on", "n_off", "categories", "statistic", "df",
            "pvalue", "p_holm", "tested", "flagged", "tv", "detectable_tv", "method", "law"]
    return tests[cols]


def greedy_check(client, prompts, n_tokens: int, threshold: float) -> list:
    out = []
    for j, prompt in enumerate(prompts):
        on = client.draw(prompt, GREEDY, True, 0, n_tokens, n_probs=2)
        off = client.draw(prompt, GREEDY, False, 0, n_tokens, n_probs=2)
        out.append(classify(f"p{j}", on.tokens, off.tokens, off.top, threshold))
    return out


def run(client, prompts, settings=DEFAULT_SETTINGS, n: int = DEFAULT_N, n_predict: int = DEFAULT_TOKENS,
        seed: int | None = 0, alpha: float = 0.05, out_dir=None, greedy_tokens: int = 16,
        near_tie: float = NEAR_TIE, skip_first: bool = True) -> Card:
    """Test ``client``'s engine (``clients.LlamaCpp`` or ``clients.OpenAI``): n samples per mode, prompt and
    setting, n_predict tokens each; with ``out_dir`` the samples (samples-on.jsonl, samples-off.jsonl) and the
    card (card.json, card.md) are written there."""
    if not prompts:
        raise ValueError("give at least one prompt")
    if n < MIN_SAMPLES:
        raise ValueError(f"n must be at least {MIN_SAMPLES} per mode (got {n}): fewer cannot make a test worth stating")
    if not 2 <= n_predict <= 64:
        raise ValueError(f"n_predict must be in [2, 64] (token 1 comes from the prefill pass), got {n_predict}")
    settings = [s if isinstance(s, Setting) else Setting.parse(s) for s in settings]
    info = client.info()
    on, off = draw_samples(client, prompts, settings, n, n_predict, seed, info)
    out = Path(out_dir) if out_dir is not None else None
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        write_lines(out / "samples-on.jsonl", on)
        write_lines(out / "samples-off.jsonl", off)
    frame = read_samples(out / "samples-on.jsonl", out / "samples-off.jsonl") if out else pd.DataFrame(on + off)
    greedy = greedy_check(client, prompts, greedy_tokens, near_tie) if greedy_tokens else []
    card = Card.build(info, settings, frame, analyse(frame, alpha, skip_first), greedy, alpha, near_tie)
    if out is not None:
        card.write(out)
    return card


def from_files(path_on, path_off, alpha: float = 0.05, skip_first: bool = True) -> Card:
    """A card from samples drawn before (``read_samples``'s checks apply); no greedy check (it needs the engine)."""
    frame = read_samples(path_on, path_off)
    first = frame.iloc[0]
    info = dict(engine=first.engine, version=first.version, model="(from files)", files=[str(path_on), str(path_off)])
    settings = [Setting(**s) for s in {json.dumps(s, sort_keys=True): s for s in frame.settings}.values()]
    return Card.build(info, settings, frame, analyse(frame, alpha, skip_first), [], alpha, NEAR_TIE)
