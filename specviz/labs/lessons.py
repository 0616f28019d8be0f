"""Guided lessons: each step one idea, one question to predict, and a real run that reveals the answer.

Lessons are data (``assets/lessons/*.json``: a title and steps), so a teacher adds one without touching Python.
A step has ``text`` (Markdown), a ``question`` with ``choices``, an ``action`` the app runs on the real models,
an ``answer`` rule that reads the correct choice off that run's numbers (never a stored answer: the run decides),
and a ``reveal`` text whose {placeholders} are the run's numbers. Actions:
  run    one speculative run (and its baseline with "baseline": true) of the step's settings
  exact  a greedy speculative run beside the target's own greedy run: how many tokens agree
  vary   the same settings with ``param`` set to each of ``values`` (k, temperature, draft, shape, rule: an accept
         rule or "rule+argmax", argmax drafts); numbers get a suffix _0, _1, ... per value
Answer rules: "threshold" (metric below / above / equal to ``at``), "direction" (up / down / about the same from the
first value to the last, 5% either way counting as the same), "highest" (the choice whose value scored most).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

from .. import theory
from ..config import DecodeConfig, TreeConfig
from ..decoder import autoregressive_generate, speculative_generate
from ..models import ASSETS
from ..rules import run_closed_forms
from ..trace import Trace
from .gallery import FOLDER
from .rules import variant_config

LESSONS = ASSETS.parent / "lessons"
KINDS, RULES = ("run", "exact", "vary"), ("threshold", "direction", "highest")
SAME_WITHIN = 0.05


@dataclass(frozen=True)
class Step:
    text: str
    question: str
    choices: tuple[str, ...]
    action: dict
    answer: dict
    reveal: str


@dataclass(frozen=True)
class Lesson:
    title: str
    steps: tuple[Step, ...]


def load_lessons(folder: Path = LESSONS) -> list[Lesson]:
    """Every lesson file in folder, in file-name order; ValueError naming the file and step if one is malformed."""
    lessons = []
    for path in sorted(Path(folder).glob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        try:
            steps = tuple(_step(s) for s in data["steps"])
            lessons.append(Lesson(str(data["title"]), steps))
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"lesson {path.name}: {e}") from e
    return lessons


def _step(s: dict) -> Step:
    step = Step(str(s["text"]), str(s["question"]), tuple(map(str, s["choices"])), dict(s["action"]),
                dict(s["answer"]), str(s["reveal"]))
    if step.action.get("kind") not in KINDS or step.answer.get("rule") not in RULES:
        raise ValueError(f"action kind must be one of {KINDS} and answer rule one of {RULES}")
    return step


def run_action(step: Step, pair) -> dict:
    """The step's runs and their numbers. ``pair(target_name, draft_name)`` -> (target, tokenizer, draft)."""
    a, settings = step.action, dict(step.action.get("settings", {}))
    if a["kind"] == "vary":
        numbers = {}
        for i, value in enumerate(a["values"]):
            numbers |= {f"{k}_{i}": v for k, v in _one(pair, {**settings, a["param"]: value}, a).items()}
        return numbers
    return _one(pair, settings, a)


def from_gallery(step: Step) -> dict:
    """The step's numbers from its ready run (``action["gallery"]``: a gallery entry with its baseline): instant,
    no model work, for a class on a busy Space. ValueError if the step has none."""
    name = step.action.get("gallery")
    path = FOLDER / f"{name}.json" if name else None
    if path is None or not path.is_file():
        raise ValueError("this step has no ready run: press Reveal to run it on the models")
    trace, base = Trace.run_from_json(path.read_text(encoding="utf-8"))
    return metrics(trace) | _against_baseline(trace, base)


def _against_baseline(trace, base) -> dict:
    if base is None:
        return {}
    same = sum(a == b for a, b in zip(trace.new_tokens, base.new_tokens))
    return dict(same_tokens=same, tokens=len(base.new_tokens), same_as_target=float(trace.new_tokens == base.new_tokens),
                speedup=theory.measured_speedup(trace, base) or 0.0, c=theory.cost_ratio(trace, base))


def _one(pair, settings: dict, action: dict) -> dict:
    target, tok, draft = pair(settings.get("target"), settings.get("draft"))
    ids = tok(settings.get("prompt", "ROMEO:"), return_tensors="pt").input_ids
    shape = settings.get("shape", "chain")
    cfg = DecodeConfig(k=int(settings.get("k", 4)), temperature=float(settings.get("temperature", 0.8)),
                       max_new_tokens=int(settings.get("max_new_tokens", 48)), seed=int(settings.get("seed", 0)),
                       tree=None if shape == "chain" else TreeConfig.parse(shape))
    cfg = variant_config(cfg, str(settings.get("rule", "leviathan")))  # an accept rule, "+argmax": argmax drafts
    trace = speculative_generate(target, draft, ids, cfg)
    numbers = metrics(trace)
    if action["kind"] == "exact" or action.get("baseline"):
        numbers |= _against_baseline(trace, autoregressive_generate(target, ids, replace(cfg, tree=None)))
    return numbers


def metrics(trace) -> dict:
    """The numbers a reveal can quote, from one run."""
    c, rounds = trace.counts(), trace.rounds
    full = sum(bool(r.drafted) and not r.rejected for r in rounds)
    k = theory.mean_k(trace)
    return dict(tau=c.tau, acceptance=c.acceptance_rate, alpha=c.alpha, forwards_per_token=c.target_forwards_per_token,
                tv=run_closed_forms(rounds)[1] or 0.0,
                tokens_per_pass=1 / c.target_forwards_per_token if c.target_forwards_per_token else 0.0,
                all_accepted_share=full / len(rounds) if rounds else 0.0, c=theory.cost_ratio(trace),
                theory_tau=theory.expected_tokens(min(c.alpha, 1.0), round(k)) if k else 1.0)


def answer_of(step: Step, numbers: dict) -> str:
    """The correct choice, read off the run's numbers by the step's rule."""
    rule = step.answer
    if rule["rule"] == "threshold":
        value = numbers[rule["metric"]]
        return rule["below"] if value < rule["at"] else rule["above"] if value > rule["at"] else rule["equal"]
    values = [numbers[f"{rule['metric']}_{i}"] for i in range(len(step.action["values"]))]
    if rule["rule"] == "highest":
        names = rule.get("names") or step.choices
        return names[max(range(len(values)), key=values.__getitem__)]
    ratio = values[-1] / values[0] if values[0] else float("inf")
    return "up" if ratio > 1 + SAME_WITHIN else "down" if ratio < 1 - SAME_WITHIN else "about the same"


def reveal(step: Step, numbers: dict, picked: str | None) -> str:
    """Markdown: what the student predicted, the answer this run gives, and why, with the run's numbers."""
    answer = answer_of(step, numbers)
    verdict = ("" if not picked else ("✓ You predicted it. " if picked == answer else f"✗ You said *{picked}*. "))
    return f"{verdict}**Answer (from this run): {answer}.** " + step.reveal.format(**numbers)
