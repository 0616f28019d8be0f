"""Guided lessons: each step one idea, one question to predict, and a real run that reveals the answer.

Lessons are data (``assets/lessons/*.json``: a title and steps), so a teacher adds one without touching Python.
A step has ``text`` (Markdown), a ``question`` with ``choices``, an ``action`` the app runs on the real models,
an ``answer`` rule that reads the correct choice off that run's numbers (never a stored answer: the run decides),
and a ``reveal`` text whose {placeholders} are the run's numbers. Actions:
  run    one speculative run (and its baseline with "baseline": true) of the step's settings
  exact  a greedy speculative run beside the target's own greedy run: how many tokens agree
  vary   the same settings with ``param`` set to each of ``values`` (k, temperature, draft, shape, rule: an accept
         rule or "rule+argmax", argmax drafts); numbers get a suffix _0, _1, ... per value
  race   a speed: ``pairs`` interleaved sets (each value's run and the baseline, in a rotating order), so a busy
         machine's slow moments fall on all alike; ``ratio`` (last value's tokens/s over the first's) with its range,
         ``clock`` the direction that range reads, and per value ``modeled_speedup`` E[tau] / (k c + 1) with tau this
         run's and c the draft's weights over the target's: a speed no host can move
  load   batched greedy runs, speculative and plain, at each batch size in ``values``: per value a request's tokens
         per step, target passes per token and target tokens processed per token emitted (``work``, plain decoding's
         being 1), and beside them the clock: the speedup measured at each batch size and the goodput model's
         crossover fitted on this reveal's timed steps (``specviz.goodput``)
Answer rules: "threshold" (metric below / above / equal to ``at``), "direction" (up / down / about the same from the
first value to the last, 5% either way counting as the same), "highest" (the choice whose value scored most; the top
two within 5% are "about the same"), "interval" (a race's ratio: up / down / about the same where its whole range
says so, "within noise" where the range straddles 0.95 or 1.05).
A step's ``reveal`` quotes the run's numbers and presumes no outcome; ``why`` ({outcome: text}) explains each one.
Both may say how a number moved only through ``{metric_change}`` ("rose", "fell", "stayed about the same" from the
first value to the last, read by ``claims.moved``), never in words of their own; a step's ``text`` and ``question``
state no direction at all (they come before the run).
The bundled lessons' answers all read a quantity the host cannot move (tokens, acceptance, passes, the modeled
speedup): the seed fixes it, so a reveal repeated on a loaded machine gives the same verdict; a race's measured
speeds are shown beside it, with their interval, as what this machine's clock said.
"""
from __future__ import annotations

import json
import statistics
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from .. import goodput, theory
from ..batch import autoregressive_generate_batch, speculative_generate_batch
from ..config import DecodeConfig, TreeConfig
from ..decoder import autoregressive_generate, speculative_generate
from ..models import ASSETS
from ..rules import run_closed_forms
from ..trace import Trace
from . import claims
from .gallery import FOLDER
from .rules import variant_config

LESSONS = ASSETS.parent / "lessons"
KINDS, RULES = ("run", "exact", "vary", "race", "load"), ("threshold", "direction", "highest", "interval")
SAME_WITHIN = claims.SAME_WITHIN
SAME, NOISE = claims.SAME, claims.NOISE
PAIRS = 5  # a race's interleaved sets


@dataclass(frozen=True)
class Step:
    text: str
    question: str
    choices: tuple[str, ...]
    action: dict
    answer: dict
    reveal: str
    why: dict = field(default_factory=dict)  # outcome -> why that outcome happened


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
                dict(s["answer"]), str(s["reveal"]), {str(k): str(v) for k, v in dict(s.get("why", {})).items()})
    if step.action.get("kind") not in KINDS or step.answer.get("rule") not in RULES:
        raise ValueError(f"action kind must be one of {KINDS} and answer rule one of {RULES}")
    if step.answer["rule"] == "interval" and step.action["kind"] != "race":
        raise ValueError("the interval rule reads only a race")
    if unknown := set(step.why) - set(outcomes(step)):
        raise ValueError(f"why names {sorted(unknown)}: not an outcome of its rule ({', '.join(outcomes(step))})")
    return step


def outcomes(step: Step) -> tuple[str, ...]:
    """Every answer the step's rule can give."""
    rule = step.answer
    if rule["rule"] == "threshold":
        return tuple(dict.fromkeys((rule["below"], rule["equal"], rule["above"])))
    if rule["rule"] == "highest":
        return (*(rule.get("names") or step.choices), SAME)
    return ("up", "down", SAME) + ((NOISE,) if rule["rule"] == "interval" else ())


def run_action(step: Step, pair, check=lambda: None) -> dict:
    """The step's runs and their numbers. ``pair(target_name, draft_name)`` -> (target, tokenizer, draft);
    ``check()`` is called before each run (a request's budget: it raises to stop the work)."""
    a, settings = step.action, dict(step.action.get("settings", {}))
    if a["kind"] == "load":
        return _load(pair, settings, [int(b) for b in a["values"]], check)
    if a["kind"] == "race":
        return _race(pair, [{**settings, a["param"]: value} for value in a["values"]], int(a.get("pairs", PAIRS)),
                     check)
    if a["kind"] == "vary":
        numbers = {}
        for i, value in enumerate(a["values"]):
            check()
            numbers |= {f"{k}_{i}": v for k, v in _one(pair, {**settings, a["param"]: value}, a).items()}
        return numbers
    return _one(pair, settings, a)


def has_ready_run(step: Step) -> bool:
    """Whether the step names a ready run that is shipped (its instant reveal can be offered)."""
    name = step.action.get("gallery")
    return bool(name) and (FOLDER / f"{name}.json").is_file()


def from_gallery(step: Step) -> dict:
    """The step's numbers from its ready run (``action["gallery"]``: a gallery entry with its baseline): instant,
    no model work, for a class on a busy Space. ValueError if the step has none."""
    if not has_ready_run(step):
        raise ValueError("this step has no ready run: press Reveal to run it on the models")
    path = FOLDER / f"{step.action['gallery']}.json"
    trace, base = Trace.run_from_json(path.read_text(encoding="utf-8"))
    return metrics(trace) | _against_baseline(trace, base)


def _against_baseline(trace, base) -> dict:
    if base is None:
        return {}
    same = sum(a == b for a, b in zip(trace.new_tokens, base.new_tokens))
    return dict(same_tokens=same, tokens=len(base.new_tokens), same_as_target=float(trace.new_tokens == base.new_tokens),
                speedup=theory.measured_speedup(trace, base) or 0.0, c=theory.cost_ratio(trace, base))


def _setup(pair, settings: dict) -> tuple:
    """(target, draft, prompt ids, config) of one run's settings."""
    target, tok, draft = pair(settings.get("target"), settings.get("draft"))
    ids = tok(settings.get("prompt", "ROMEO:"), return_tensors="pt").input_ids
    shape = settings.get("shape", "chain")
    cfg = DecodeConfig(k=int(settings.get("k", 4)), temperature=float(settings.get("temperature", 0.8)),
                       max_new_tokens=int(settings.get("max_new_tokens", 48)), seed=int(settings.get("seed", 0)),
                       tree=None if shape == "chain" else TreeConfig.parse(shape))
    return target, draft, ids, variant_config(cfg, str(settings.get("rule", "leviathan")))  # "+argmax": argmax drafts


def _one(pair, settings: dict, action: dict) -> dict:
    target, draft, ids, cfg = _setup(pair, settings)
    trace = speculative_generate(target, draft, ids, cfg)
    numbers = metrics(trace)
    if action["kind"] == "exact" or action.get("baseline"):
        numbers |= _against_baseline(trace, autoregressive_generate(target, ids, replace(cfg, tree=None)))
    return numbers


def weights_share(target, draft) -> float | None:
    """c as the weights say: the draft's parameters over the target's (what a draft step costs where a pass is
    priced by the weights it reads, as on a GPU), None where the draft is no model of its own."""
    def count(m):
        m = m if isinstance(m, torch.nn.Module) else getattr(m, "model", None)
        return sum(p.numel() for p in m.parameters()) if isinstance(m, torch.nn.Module) else None

    mine, theirs = count(draft), count(target)
    return mine / theirs if mine and theirs else None


def _race(pair, runs: list[dict], pairs: int, check=lambda: None) -> dict:
    """Speeds measured the way a busy machine allows: ``pairs`` sets, each every run's settings and the baseline (of
    the first run's target and prompt) in a rotating order, after a short untimed warm-up. Per value the metrics of
    its first run (_0, _1, ...) and its median speedup over the baseline of its own set; ``ratio``: the median of the
    last value's tokens/s over the first's within a set; ``ratio_lo`` / ``ratio_hi`` the interval the verdict reads
    (from five sets on, the second lowest and second highest: an interval for the median that one outlying set
    cannot move), ``ratio_min`` / ``ratio_max`` the whole range, ``clock`` the direction that interval reads;
    ``modeled_speedup_j`` each value's E[tau] / (k c + 1) at ``c_weights`` (``weights_share``; 1.0 where unknown)."""
    setups = [_setup(pair, settings) for settings in runs]
    target, _, ids, cfg = setups[0]
    jobs = [lambda t=t, d=d, i=i, c=c: speculative_generate(t, d, i, c) for t, d, i, c in setups]
    jobs.append(lambda: autoregressive_generate(target, ids, replace(cfg, tree=None)))
    for t, d, i, c in setups:  # first calls lay out and pack weights
        speculative_generate(t, d, i, replace(c, max_new_tokens=4))
    speeds, numbers = [[] for _ in jobs], {}
    for rep in range(pairs):
        order = list(range(len(jobs)))[rep % len(jobs):] + list(range(len(jobs)))[:rep % len(jobs)]
        for j in order:
            check()
            trace = jobs[j]()
            speeds[j].append(trace.summary().tokens_per_s)
            if rep == 0 and j < len(setups):
                numbers |= {f"{k}_{j}": v for k, v in metrics(trace).items()}
    base, share = speeds[-1], weights_share(setups[0][0], setups[0][1]) or 1.0
    for j, (_, _, _, c) in enumerate(setups):
        numbers[f"speedup_{j}"] = statistics.median(s / b for s, b in zip(speeds[j], base))
        numbers[f"modeled_speedup_{j}"] = numbers[f"tau_{j}"] / (c.k * share + 1)
    ratios = sorted(last / first for first, last in zip(speeds[0], speeds[len(setups) - 1]))
    inner = ratios[1:-1] if len(ratios) >= 5 else ratios  # one set a busy moment caught, either way, is dropped
    return numbers | dict(ratio=statistics.median(ratios), ratio_lo=inner[0], ratio_hi=inner[-1], ratio_min=ratios[0],
                          ratio_max=ratios[-1], pairs=pairs, clock=claims.interval(inner[0], inner[-1]), c_weights=share)


def _load(pair, settings: dict, batches: list[int], check=lambda: None) -> dict:
    """Greedy batched runs (the same prompt in every row), speculative then plain, at each batch size: per value j
    ``tau_j`` (a request's tokens per step), ``passes_per_token_j`` (batch passes per token of a request),
    ``work_j`` (target tokens processed per token emitted: each step verifies the pending token and its drafts);
    the clock beside them: ``speedup_j`` (tokens/s ratio) and ``crossover``, the goodput model's, its pass and
    draft fitted on these runs' timed steps (``goodput.fit_step_cost``), at batch sizes 1 to 32."""
    target, draft, ids, cfg = _setup(pair, {**settings, "temperature": 0.0})
    cfg = replace(cfg, record=False, tree=None)
    speculative_generate_batch(target, draft, [ids], replace(cfg, max_new_tokens=4))  # first calls pack weights
    numbers, plain_steps, draft_steps = {"batch_0": batches[0]}, [], []
    for j, b in enumerate(batches):
        check()
        spec, spec_s = _timed(speculative_generate_batch, target, draft, [ids] * b, cfg)
        plain, plain_s = _timed(autoregressive_generate_batch, target, [ids] * b, cfg)
        c, p = sum(t.counts() for t in spec), sum(t.counts() for t in plain)
        steps = max(len(t.rounds) for t in spec)
        numbers |= {f"batch_{j}": b, f"tau_{j}": c.new_tokens / c.rounds, f"passes_per_token_{j}": steps * b /
                    c.new_tokens, f"work_{j}": (c.drafted + c.rounds) / c.new_tokens,
                    f"speedup_{j}": (c.new_tokens / spec_s) / (p.new_tokens / plain_s)}
        longest = max(plain, key=lambda t: len(t.rounds))
        plain_steps.append((b, 0, sum(r.target_s for r in longest.rounds) / len(longest.rounds)))
        rounds = max(spec, key=lambda t: len(t.rounds)).rounds
        draft_steps.append((b, 0, max(sum(r.draft_s for r in rounds) / max(sum(r.k for r in rounds), 1), 1e-9)))
    step, draft_step = goodput.fit_step_cost(plain_steps), goodput.fit_step_cost(draft_steps)
    grid = [1, 2, 4, 8, 16, 32]
    rates = numbers["tau_0"] - 1  # a request's accepted drafts per step, spread as one alpha
    alpha = _alpha_for(rates, cfg.k)
    speedups = [goodput.speedup(b, 0, cfg.k, alpha, step, goodput.DraftCost("sequential", draft_step)) for b in grid]
    cross = goodput.crossover(grid, speedups)
    numbers["crossover"] = f"batch {cross.batch}" if cross.batch else "none in batches 1–32: it " + {
        "never pays": "never pays", "pays throughout": "pays at every one"}.get(cross.verdict, "pays at the larger ones")
    return numbers | {"k": cfg.k}


def _alpha_for(accepted: float, k: int) -> float:
    """The alpha whose E[tau] - 1 is ``accepted`` drafts a step at this k (bisection: E[tau] rises with alpha)."""
    lo, hi = 0.0, 1.0
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if theory.expected_tokens(mid, k) - 1 < accepted else (lo, mid)
    return (lo + hi) / 2


def _timed(fn, *args):
    start = time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - start


def metrics(trace) -> dict:
    """The numbers a reveal can quote, from one run."""
    c, rounds = trace.counts(), trace.rounds
    full = sum(bool(r.drafted) and not r.rejected for r in rounds)
    k = theory.mean_k(trace)
    return dict(tau=c.tau, acceptance=c.acceptance_rate, alpha=c.alpha, forwards_per_token=c.target_forwards_per_token,
                tv=run_closed_forms(rounds)[1] or 0.0,
                tokens_per_pass=1 / c.target_forwards_per_token if c.target_forwards_per_token else 0.0,
                all_accepted_share=full / len(rounds) if rounds else 0.0, c=theory.cost_ratio(trace),
                all_accepted_if_independent=c.acceptance_rate ** k if k else 0.0,
                theory_tau=theory.expected_tokens(min(c.alpha, 1.0), round(k)) if k else 1.0)


def answer_of(step: Step, numbers: dict) -> str:
    """The correct choice, read off the run's numbers by the step's rule (one of ``outcomes(step)``)."""
    rule = step.answer
    if rule["rule"] == "threshold":
        value = numbers[rule["metric"]]
        return rule["below"] if value < rule["at"] else rule["above"] if value > rule["at"] else rule["equal"]
    if rule["rule"] == "interval":
        return claims.interval(numbers["ratio_lo"], numbers["ratio_hi"])
    values = [numbers[f"{rule['metric']}_{i}"] for i in range(len(step.action["values"]))]
    if rule["rule"] == "highest":
        names = rule.get("names") or step.choices
        first, second = sorted(values, reverse=True)[:2]
        if first <= second * (1 + SAME_WITHIN):
            return SAME
        return names[max(range(len(values)), key=values.__getitem__)]
    return claims.change(values[0], values[-1])


def changes(numbers: dict) -> dict:
    """``{metric}_change`` for every metric a vary or race gives per value (metric_0, metric_1, ...): how it moved
    from the first value to the last, in the words of ``claims.moved``."""
    per_value = {}  # metric -> {index: value}
    for name, value in numbers.items():
        metric, _, index = name.rpartition("_")
        if metric and index.isdigit() and isinstance(value, (int, float)):
            per_value.setdefault(metric, {})[int(index)] = value
    return {f"{metric}_change": claims.moved(values[0], values[max(values)])
            for metric, values in per_value.items() if 0 in values and max(values) > 0}


def reveal(step: Step, numbers: dict, picked: str | None) -> str:
    """Markdown: what the student predicted, the answer this run gives, the run's numbers, and why that answer."""
    answer = answer_of(step, numbers)
    verdict = ("" if not picked else ("✓ You predicted it. " if picked == answer else f"✗ You said *{picked}*. "))
    why, numbers = step.why.get(answer, ""), numbers | changes(numbers)
    return (f"{verdict}**Answer (from this run): {answer}.** " + step.reveal.format(**numbers)
            + (" " + why.format(**numbers) if why else ""))
