"""The faults users ask about most, read from one run's counts: nothing accepted, all-or-nothing acceptance, and
drafts far shorter than k.

Each check says how much evidence it needs, from a binomial bound, so a short excerpt raises nothing it cannot
support:
- *nothing accepted*: the first draft of a step (position 1) is accepted at a rate whose exact one-sided 99%
  upper bound is under NEAR_ZERO. With none accepted that takes 44 steps (1 - 0.01^(1/44) = 0.099); fewer say
  only that it is too early to tell.
- *all or nothing*: every check after the first draft of a step passed (or every check of every step). Were each
  accepted with chance at most ALMOST_ALL (more than drafters sustain at every depth on real text), all N would
  pass with chance ALMOST_ALL^N; the finding needs that under 1% (N >= 228).
- *short drafts*: drafts per step under SHORT_SHARE of k.
"""
from __future__ import annotations

import math

from .finding import Finding
from .fit import Positions, upper_bound
from .run import EngineRun

NEAR_ZERO, ZERO_CONFIDENCE = 0.10, 0.99  # "at or near 0": under one first draft in ten, at 99% confidence
ALMOST_ALL, ALL_CHANCE = 0.98, 0.01  # a later draft's chance at most this; all passing that likely at most this
SHORT_SHARE = 0.5  # drafts per step under half of k: "far below k"
CAUSES = (
    "the draft built for another target or tokenizer (a drafter trained on the base model served with an "
    "instruct or fine-tuned target, or another vocabulary)",
    "a vocabulary map missing or not loaded (EAGLE-3's draft-to-target id map: draft ids then name other tokens)",
    "hidden states taken from the wrong layers of the target (EAGLE-3, DFlash and MTP heads read chosen layers: "
    "the layer ids in the drafter's config must match the target's)",
    "an exact-match rule at T > 0 (a draft kept only when the target's own sample equals it, see "
    "temperature_collapse)",
    "a quantized target (or draft) whose logits moved away from those the drafter was trained on",
    "the drafter's state not carried over (prefill on one instance, decode on another; a cache reset)",
)


def first_draft_counts(run: EngineRun, pos: Positions | None) -> tuple[int, int, str] | None:
    """(accepted, trials, those counts in words) for the rate of a step's first draft: per-position counts give
    it exactly; with steps alone min(accepted, steps) bounds it from above; with drafts alone, per draft."""
    if pos is not None:
        x, n = pos.accepted[0], pos.steps
        return x, n, f"{x} of {n} steps accepted their first draft"
    if run.steps:
        x, n = min(run.accepted, run.steps), run.steps
        said = (f"no draft accepted in {n} steps" if not run.accepted else
                f"{run.accepted} drafts accepted in {n} steps, so at most {x} steps accepted their first draft")
        return x, n, said
    if run.drafted:
        return run.accepted, run.drafted, f"{run.accepted} of {run.drafted} drafts accepted"
    return None


def nothing_accepted(run: EngineRun, pos: Positions | None) -> Finding | None:
    counts = first_draft_counts(run, pos)
    if counts is None:
        return None
    accepted, trials, said = counts
    bound = upper_bound(accepted, trials, ZERO_CONFIDENCE)
    unit = "drafts" if pos is None and not run.steps else "steps"
    numbers = {"accepted": accepted, "trials": trials, "rate": accepted / trials, "upper_bound": bound,
               "confidence": ZERO_CONFIDENCE}
    if bound < NEAR_ZERO:
        said += (f" ({accepted / trials:.1%}; at {ZERO_CONFIDENCE:.0%} confidence under {bound:.1%})"
                 + (": mean acceptance length exactly 1" if run.accepted == 0 and run.steps else ""))
        text = (f"nothing accepted: {said}. A working drafter accepts far more than one first draft in ten: this is "
                "a wiring or loading fault, not a k to tune. What engine threads found behind it: "
                + "; ".join(f"({i}) {c}" for i, c in enumerate(CAUSES, 1)))
        return Finding("nothing_accepted", "problem", text, numbers)
    if accepted == 0:
        needed = math.ceil(math.log(1 - ZERO_CONFIDENCE) / math.log(1 - NEAR_ZERO))
        text = (f"no draft accepted in {trials} {unit}: too few to tell a fault from bad luck (at "
                f"{ZERO_CONFIDENCE:.0%} confidence the rate could still be {bound:.0%}); {needed} {unit} with none "
                "accepted would show it")
        return Finding("nothing_accepted", "info", text, numbers | {"needed": needed})
    return None


def later_checks(pos: Positions) -> tuple[int, int]:
    """(checks passed, checks made) at positions 2..k: every reached draft after a step's first."""
    return sum(pos.accepted[1:]), sum(pos.reached[1:])


def all_or_nothing(run: EngineRun, pos: Positions | None) -> Finding | None:
    """Every later draft accepted once the first was (conditional rates exactly 1 after position 1), or every
    draft of every step accepted (a mean acceptance length stuck at exactly k + 1), on enough checks."""
    if pos is not None:
        every = pos.accepted[0] == pos.steps
        passed, checks = (sum(pos.accepted), sum(pos.reached)) if every else later_checks(pos)
    elif run.drafted and run.steps and run.k and run.accepted == run.drafted == run.steps * run.k:
        passed, checks, every = run.accepted, run.accepted, True
    else:
        return None
    chance = ALMOST_ALL ** checks
    if checks == 0 or passed < checks or chance >= ALL_CHANCE:
        return None
    k = len(pos.accepted) if pos is not None else run.k
    if every:
        pattern = (f"every draft of every step was accepted: mean acceptance length exactly k + 1 = {k + 1} over "
                   f"{pos.steps if pos else run.steps} steps")
    else:
        pattern = (f"each step accepted either nothing or all {k} drafts: once a step's first draft passed, all "
                   f"{checks} later checks passed (conditional rates exactly 1 at positions 2 to {k})")
    text = (f"all or nothing: {pattern}. Real text does not do that: were each of these drafts accepted with chance "
            f"{ALMOST_ALL}, all {checks} would pass with chance {chance:.1e}. This is not easy text; it is the "
            "signature of broken logits: the verify pass scoring drafts against themselves (logits read from the "
            "rows the drafts were fed into instead of the rows before them, the draft's logits passed as the "
            "target's), or output that has fallen into a loop the drafter copies. Read the output: if it repeats "
            "itself, the loop is the fault; if it reads well, the verifier is not checking the drafts")
    return Finding("all_or_nothing", "problem", text, {"passed": passed, "checks": checks, "chance": chance,
                                                      "every_step_all": every, "k": k})


def short_drafts(run: EngineRun, drafter: str = "sequential") -> Finding | None:
    """Drafts per step far below k: the drafter stops early, or a context or budget limit cuts its drafts."""
    if run.drafted is None or not run.steps or not run.k:
        return None
    per_step, full = run.drafted / run.steps, run.steps * run.k
    if per_step >= SHORT_SHARE * run.k:
        return None
    said = (f"drafts far shorter than k: {run.drafted} drafts over {run.steps} steps, {per_step:.2f} a step with "
            f"k = {run.k} ({run.drafted / full:.0%} of the {full} a full draft every step would make)")
    numbers = {"drafts_per_step": per_step, "k": run.k, "drafted": run.drafted, "steps": run.steps}
    if drafter == "ngram":
        return Finding("short_drafts", "info", said + ": an n-gram lookup drafts only as far as its match goes",
                       numbers)
    limit = ""
    if run.requests:
        most = run.requests * (run.k - 1)
        cut = "can" if full - run.drafted <= most else "cannot"
        limit = (f". A context or budget limit cuts at most k - 1 drafts from each request's last step, "
                 f"{run.requests} x {run.k - 1} = {most} here, so it {cut} explain the {full - run.drafted} missing")
    text = (said + limit + ". Drafts end early when the drafter stops itself (a confidence cutoff such as "
            "llama.cpp's --draft-p-min, an end-of-sequence drafted, a lookup finding a shorter match) or when the "
            "context or the request's max_tokens leaves no room. The steps then cost less than k drafts, and a fit "
            "that takes every step as drafting k understates alpha: read acceptance per draft (accepted / drafted) "
            "and tune the cutoff, not k")
    return Finding("short_drafts", "warning", text, numbers)
