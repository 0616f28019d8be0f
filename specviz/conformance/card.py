"""The report card: what was run (engine, version, settings, N), the per-position tests, the power, the greedy
divergences and the acceptance the engine reported, as JSON (``card.json``) and Markdown (``card.md``);
``read_card`` gives its tests back as a DataFrame."""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pandas as pd


@dataclass
class Card:
    info: dict
    settings: list[dict]
    n: int  # samples per mode, prompt and setting (the smallest group)
    alpha: float
    near_tie: float
    tests: pd.DataFrame
    greedy: list = field(default_factory=list)
    acceptance: dict = field(default_factory=dict)

    @classmethod
    def build(cls, info, settings, frame: pd.DataFrame, tests: pd.DataFrame, greedy, alpha, near_tie) -> Card:
        on = frame[frame["mode"] == "on"]
        drafted = pd.to_numeric(on.draft_n, errors="coerce").dropna()
        accepted = pd.to_numeric(on.draft_accepted, errors="coerce").dropna()
        off_drafted = pd.to_numeric(frame[frame["mode"] == "off"].draft_n, errors="coerce").fillna(0).sum()
        acceptance = dict(drafted=int(drafted.sum()), accepted=int(accepted.sum()),
                          rate=float(accepted.sum() / drafted.sum()) if drafted.sum() else None,
                          drafted_off=int(off_drafted))  # > 0: speculation was not off in the off samples
        n = int(frame.groupby(["prompt_id", "setting", "mode"]).size().min())
        return cls(info, [s.to_dict() for s in settings], n, alpha, near_tie, tests, list(greedy), acceptance)

    @property
    def sampled_flagged(self) -> bool:
        return bool(self.tests.flagged.any())

    @property
    def greedy_structural(self) -> bool:
        return any(d.kind == "structural" for d in self.greedy)

    @property
    def verdict(self) -> str:
        return "flag" if self.sampled_flagged or self.greedy_structural else "pass"

    def power_sentence(self) -> str:
        """The headline power, read from the first tested joint row."""
        rows = self.tests[self.tests.tested & (self.tests.kind == "joint")]
        if rows.empty:
            return "No position was tested: the power cannot be stated."
        r = rows.sort_values(["position", "prompt_id"]).iloc[0]
        m = int(self.tests.tested.sum())
        where = f"position {r.position} (prompt {r.prompt_id}, {r.setting}; the law of tokens 1..{r.position})"
        if r.detectable_tv is None or math.isnan(r.detectable_tv):
            return (f"At this N ({r.n_on} on, {r.n_off} off) no bias at {where} would be caught 95% of the time: "
                    "draw more samples.")
        return (f"At this N ({r.n_on} on, {r.n_off} off), a bias of {r.detectable_tv:.3f} or more in total "
                f"variation at {where}, moving probability between its two commonest outcomes, would be caught 95% "
                f"of the time (chi-square at alpha/m = {self.alpha:g}/{m}, Holm's first step); smaller biases may "
                "pass unseen.")

    def to_json(self) -> dict:
        tests = self.tests.astype(object).where(self.tests.notna(), None)
        return dict(verdict=self.verdict, info=self.info, settings=self.settings, n=self.n, alpha=self.alpha,
                    near_tie=self.near_tie, acceptance=self.acceptance, power=self.power_sentence(),
                    tests=tests.to_dict("records"), greedy=[asdict(d) for d in self.greedy])

    def markdown(self) -> str:
        return markdown(self.to_json())

    def write(self, folder) -> None:
        folder = Path(folder)
        (folder / "card.json").write_text(json.dumps(self.to_json(), indent=1))
        (folder / "card.md").write_text(self.markdown())


def markdown(card: dict) -> str:
    """The card's JSON in words and tables."""
    info, acc = card["info"], card["acceptance"]
    flagged = [t for t in card["tests"] if t["flagged"]]
    lines = [f"# Conformance: **{card['verdict']}**", "",
             f"Engine: {info.get('engine')} {info.get('version')}, model {info.get('model')}.  ",
             f"Settings: {'; '.join(_setting(s) for s in card['settings'])}. N = {card['n']} per mode, prompt and "
             f"setting; alpha = {card['alpha']:g} after Holm's correction over "
             f"{sum(t['tested'] for t in card['tests'])} tests.", "",
             f"{len(flagged)} test(s) flagged." if flagged else "No test flagged.", "", card["power"], "",
             "Token 1 comes from the prefill pass (no draft is verified there): it is shown, not tested.", ""]
    rate = acc.get("rate")
    lines += [f"Acceptance the engine reported: {acc['accepted']} of {acc['drafted']} drafts ({rate:.1%})."
              if rate is not None else "The engine reported no acceptance counts.", "",
              *([f"**Warning**: the engine reported {acc['drafted_off']} drafts in the samples meant to have "
                 "speculation off: both sides may have speculated.", ""] if acc.get("drafted_off") else []),
              "| prompt | position | test | given | on | off | categories | p | p (Holm) | TV seen | TV caught 95% |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for t in card["tests"]:
        lines.append(f"| {t['prompt_id']} | {t['position']} | {t['kind']} | {t['given'] or '-'} | {t['n_on']} | "
                     f"{t['n_off']} | {t['categories']} | {_num(t['pvalue'])} | "
                     f"{_num(t['p_holm']) + (' **flag**' if t['flagged'] else '') if t['tested'] else 'not tested'} | "
                     f"{_num(t['tv'])} | {_num(t['detectable_tv'])} |")
    lines += ["", f"Greedy (T = 0), first difference on against off; near-tie below {card['near_tie']:g} nats:", "",
              "| prompt | position | on | off | top-2 margin | kind |", "|---|---|---|---|---|---|"]
    for d in card["greedy"]:
        lines.append(f"| {d['prompt_id']} | {d['position'] or '-'} | {_num(d['token_on'])} | {_num(d['token_off'])} "
                     f"| {_num(d['margin'])} | {d['kind']} |")
    return "\n".join(lines) + "\n"


def _setting(s: dict) -> str:
    return f"T={s['temperature']:g} top_k={s['top_k']} top_p={s['top_p']:g} min_p={s['min_p']:g}"


def _num(x) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{x:.3g}" if isinstance(x, float) else str(x)


def read_card(path) -> pd.DataFrame:
    """A card.json's tests as a DataFrame (a row per position test), its verdict and power in ``.attrs``."""
    try:
        card = json.loads(Path(path).read_text())
        tests = pd.DataFrame(card["tests"])
        verdict, power = card["verdict"], card["power"]
    except (OSError, json.JSONDecodeError, KeyError, TypeError) as e:
        raise ValueError(f"{path} is not a conformance card ({type(e).__name__}: {e})") from None
    tests.attrs.update(verdict=verdict, power=power, info=card.get("info", {}))
    return tests
