"""Every lesson loads, and every step's action runs on tiny models: its answer is read off the run and its reveal
text formats with the run's numbers."""
import re

import pytest

from specviz.labs import lessons
from tests.helpers.models import perturbed, ui_models

LESSONS = lessons.load_lessons()


@pytest.fixture(scope="module")
def lesson_pair():
    target, draft, tok = ui_models()
    other = perturbed(target, 0.9, seed=4)
    return lambda target_name, draft_name: (target, tok, other if draft_name == "small-ce" else draft)


def test_there_are_at_least_six_lessons_of_small_steps():
    assert len(LESSONS) >= 6 and all(lesson.steps for lesson in LESSONS)
    for lesson in LESSONS:
        for step in lesson.steps:
            assert len(step.choices) >= 2 and step.question.endswith("?")


@pytest.mark.slow
@pytest.mark.parametrize("lesson", LESSONS, ids=lambda lesson: lesson.title[:2])
def test_every_step_runs_and_reveals_an_answer_from_its_run(lesson, lesson_pair):
    for step in lesson.steps:
        numbers = lessons.run_action(step, lesson_pair)
        answer = lessons.answer_of(step, numbers)
        assert answer in lessons.outcomes(step)
        text = lessons.reveal(step, numbers, step.choices[0])
        assert f"Answer (from this run): {answer}." in text and "{" not in text
        if step.action["kind"] == "race":  # the verdict's interval lies inside the whole range, the median inside it
            assert numbers["ratio_min"] <= numbers["ratio_lo"] <= numbers["ratio"] <= numbers["ratio_hi"] \
                <= numbers["ratio_max"] and numbers["pairs"] == step.action["pairs"]


def test_answer_rules_by_hand():
    step = lessons.Step("", "?", ("up", "down", "about the same"), {"kind": "vary", "values": [2, 6]},
                        {"metric": "tau", "rule": "direction"}, "")
    assert lessons.answer_of(step, {"tau_0": 2.0, "tau_1": 3.0}) == "up"
    assert lessons.answer_of(step, {"tau_0": 2.0, "tau_1": 2.05}) == "about the same"
    assert lessons.answer_of(step, {"tau_0": 2.0, "tau_1": 1.0}) == "down"
    low = lessons.Step("", "?", ("a", "b"), {"kind": "run"}, {"metric": "x", "rule": "threshold", "at": 1.0,
                                                            "below": "a", "above": "b", "equal": "a"}, "")
    assert lessons.answer_of(low, {"x": 0.4}) == "a" and lessons.answer_of(low, {"x": 1.4}) == "b"
    best = lessons.Step("", "?", ("a", "b"), {"kind": "vary", "values": [1, 2]}, {"metric": "x", "rule": "highest"}, "")
    assert lessons.answer_of(best, {"x_0": 0.5, "x_1": 0.8}) == "b"
    assert lessons.answer_of(best, {"x_0": 0.80, "x_1": 0.82}) == "about the same"  # top two within 5%
    race = lessons.Step("", "?", ("up", "down", "about the same"), {"kind": "race", "values": [4, 12]},
                        {"metric": "speedup", "rule": "interval"}, "")
    for lo, hi, want in [(1.1, 1.3, "up"), (0.6, 0.9, "down"), (0.97, 1.04, "about the same"), (0.9, 1.2, "within noise"),
                         (0.7, 0.97, "within noise")]:  # a range that straddles 0.95 or 1.05 cannot tell
        assert lessons.answer_of(race, {"ratio_lo": lo, "ratio_hi": hi}) == want, (lo, hi)


# words that presume one outcome: the text every outcome shares has none of them (it quotes numbers)
PRESUMING = re.compile(r"\b(only|just|saving|saves|wins?|beats?|faster|slower|fewer|more often|less often|rose|fell|"
                       r"higher|lower|yes|no|ties?|so it)\b", re.IGNORECASE)
METRICS = ["tau", "acceptance", "alpha", "forwards_per_token", "tv", "tokens_per_pass", "all_accepted_share", "c",
           "theory_tau", "all_accepted_if_independent", "same_tokens", "tokens", "same_as_target", "speedup",
           "modeled_speedup", "c_weights", "work", "passes_per_token", "batch", "k", "crossover"]
HOST_FREE = {"tau", "acceptance", "alpha", "forwards_per_token", "tv", "tokens_per_pass", "all_accepted_share",
             "same_as_target", "modeled_speedup", "work_0"}


def numbers_for(step, outcome) -> dict:
    """Numbers that make the step's rule give ``outcome``: every metric 1.0, the one the rule reads set to fit."""
    n = len(step.action.get("values", [None]))
    numbers = {m: 1.0 for m in METRICS} | {f"{m}_{i}": 1.0 for m in METRICS for i in range(n)}
    numbers |= dict(ratio=1.0, ratio_lo=1.0, ratio_hi=1.0, ratio_min=1.0, ratio_max=1.0, pairs=5, clock="within noise")
    rule, metric = step.answer, step.answer["metric"]
    if rule["rule"] == "threshold":
        at = rule["at"]
        numbers[metric] = {rule["below"]: at - 0.1, rule["equal"]: at, rule["above"]: at + 0.1}[outcome]
    elif rule["rule"] == "direction":
        numbers[f"{metric}_{n - 1}"] = {"up": 2.0, "down": 0.5, "about the same": 1.0}[outcome]
    elif rule["rule"] == "highest" and outcome != "about the same":
        numbers[f"{metric}_{lessons.outcomes(step).index(outcome)}"] = 2.0
    elif rule["rule"] == "interval":
        numbers["ratio_lo"], numbers["ratio_hi"] = {"up": (1.2, 1.4), "down": (0.6, 0.8), "about the same": (0.98, 1.02),
                                                    "within noise": (0.8, 1.2)}[outcome]
    return numbers


STEPS = [(lesson, i, step) for lesson in LESSONS for i, step in enumerate(lesson.steps)]


@pytest.mark.parametrize("lesson, i, step", STEPS, ids=[f"{lesson.title[:2]}{i + 1}" for lesson, i, _ in STEPS])
def test_every_outcome_of_every_step_reads_true(lesson, i, step):
    """Each answer the step's rule can give has its own why, and what it reveals agrees with that answer: the text
    all outcomes share quotes numbers and presumes none ("yes ... only 57% ..." cannot be written), and no outcome's
    why names another outcome."""
    assert set(step.why) == set(lessons.outcomes(step)), f"{lesson.title} step {i + 1}: a why for every outcome"
    assert not PRESUMING.search(step.reveal), f"{lesson.title} step {i + 1}: {PRESUMING.search(step.reveal)[0]!r}"
    for outcome in lessons.outcomes(step):
        numbers = numbers_for(step, outcome)
        assert lessons.answer_of(step, numbers) == outcome
        text = lessons.reveal(step, numbers, None)
        assert text.startswith(f"**Answer (from this run): {outcome}.**") and "{" not in text
        for other in set(lessons.outcomes(step)) - {outcome}:
            assert not re.search(rf"\b{re.escape(other)}\b", step.why[outcome], re.IGNORECASE), (outcome, other)


def test_verdicts_read_what_the_host_cannot_move_and_a_race_shows_its_clock_beside_them():
    """Every answer reads tokens, acceptance, passes or the modeled speedup (the seed fixes them: no wall clock); a
    race's measured speeds are quoted beside it, with their interval, and the interval rule (for a teacher's own
    lesson that must read a speed) reads only a race and can say "within noise"."""
    for lesson, i, step in STEPS:
        assert step.answer["rule"] != "interval" and step.answer["metric"] in HOST_FREE, \
            f"{lesson.title} step {i + 1} reads {step.answer['metric']}"
    races = [step for _, _, step in STEPS if step.action["kind"] == "race"]
    assert races and all(step.action.get("pairs", lessons.PAIRS) >= 3 for step in races)
    assert all("{ratio_lo" in step.reveal and "{clock}" in step.reveal for step in races)
    race = lessons.Step("", "?", ("up", "down", "about the same"), {"kind": "race", "values": [4, 12]},
                        {"metric": "speedup", "rule": "interval"}, "")
    assert "within noise" in lessons.outcomes(race)
    with pytest.raises(ValueError, match="interval rule reads only a race"):
        lessons._step(dict(text="", question="?", choices=["up"], action={"kind": "vary"}, answer={"rule": "interval"},
                           reveal=""))


def test_the_modeled_speedup_prices_a_draft_step_at_the_drafts_share_of_the_weights():
    from tests.helpers.models import tiny_llama

    big, small = tiny_llama(layers=4, hidden=32), tiny_llama(layers=1, hidden=16)
    share = lessons.weights_share(big, small)
    want = sum(p.numel() for p in small.parameters()) / sum(p.numel() for p in big.parameters())
    assert share == pytest.approx(want) and 0 < share < 1
    assert lessons.weights_share(big, object()) is None  # a model-free draft: no weights to price


@pytest.mark.slow
def test_every_steps_verdict_is_the_same_in_five_repeated_reveals(lesson_pair):
    """A reveal repeated five times gives the same answer at every step (on a loaded machine too: the answers read
    what the seed fixes, never the clock), while a race's measured ratio may move."""
    for lesson, i, step in STEPS:
        verdicts = [lessons.answer_of(step, lessons.run_action(step, lesson_pair)) for _ in range(5)]
        assert len(set(verdicts)) == 1, f"{lesson.title} step {i + 1}: {verdicts}"


def test_a_steps_ready_run_is_the_same_kind_of_run_as_its_live_reveal():
    """The instant reveal and the live one ask the same question of the same run: prompt, draft, k, temperature,
    tokens and shape of the step's settings are its gallery entry's."""
    from specviz.labs import gallery

    recipes = {e.name: e for e in gallery.GALLERY}
    ready = [(lesson, i, step) for lesson, i, step in STEPS if step.action.get("gallery")]
    assert ready
    for lesson, i, step in ready:
        entry, settings = recipes[step.action["gallery"]], step.action["settings"]
        shape = entry.cfg.tree.label if entry.cfg.tree is not None else "chain"
        want = dict(prompt=entry.prompt, draft=entry.draft, k=entry.cfg.k, temperature=entry.cfg.temperature,
                    max_new_tokens=entry.cfg.max_new_tokens, shape=shape)
        got = dict(prompt=settings.get("prompt", "ROMEO:"), draft=settings.get("draft"), k=settings.get("k", 4),
                   temperature=settings.get("temperature", 0.8), max_new_tokens=settings.get("max_new_tokens", 48),
                   shape=settings.get("shape", "chain"))
        assert got == want, f"{lesson.title} step {i + 1} against {entry.name}"


def test_a_malformed_lesson_names_its_file(tmp_path):
    (tmp_path / "bad.json").write_text('{"title": "x", "steps": [{"text": "t"}]}')
    with pytest.raises(ValueError, match="lesson bad.json"):
        lessons.load_lessons(tmp_path)


@pytest.mark.slow
def test_the_learn_tab_walks_a_lesson_and_reveals_from_a_run(pair):
    from tests.helpers.app import handlers, tiny_store
    from tests.helpers.models import last

    h = handlers(tiny_store(pair, drafts={"lite": pair[1]}))  # the step drafts with lite, as its ready run did
    title = LESSONS[0].title
    text, radio, index, answer, ready = h.step_view(title, 0)
    assert "step 1 of" in text and LESSONS[0].steps[0].question in text and index == 0 and answer == ""
    assert ready["visible"] is True  # this step names a ready run
    no_ready = next((lesson, i) for lesson in LESSONS for i, s in enumerate(lesson.steps) if not s.action.get("gallery"))
    assert h.step_view(no_ready[0].title, no_ready[1])[4]["visible"] is False  # no button that can only fail
    assert h.move(title, 0, +5)[2] == len(LESSONS[0].steps) - 1  # clamped to the lesson
    out = last(h.reveal(title, 0, "fewer than one"))
    assert "Answer (from this run):" in out and "target passes per token" in out


@pytest.mark.slow
def test_every_gallery_run_replays_with_its_baseline_and_the_recipe_reproduces_it(store):
    """Each shipped gallery file opens as a finished run with its speedup (no model work), and recording its
    recipe again gives the same tokens (the first entry, on the bundled models)."""
    from specviz import Trace
    from specviz.labs import gallery
    from tests.helpers.app import handlers

    shipped = gallery.entries()
    assert len(shipped) == len(gallery.GALLERY) >= 5
    h = handlers(store)
    for title, entry in shipped.items():
        outs = h.open_gallery(title)
        trace, base = outs[0], outs[1]
        assert base is not None and base.mode == "autoregressive" and trace.draft_name == entry.draft
        assert "measured **" in outs[3] and trace.token_text
    first = gallery.GALLERY[0]
    trace, _ = gallery.record(first)
    shipped_trace = Trace.from_json((gallery.FOLDER / f"{first.name}.json").read_text())
    assert trace.new_tokens == shipped_trace.new_tokens


def test_steps_with_a_ready_run_reveal_from_the_gallery_without_models(store):
    from tests.helpers.app import handlers

    ready = [(lesson, i, step) for lesson in LESSONS for i, step in enumerate(lesson.steps) if step.action.get("gallery")]
    assert ready
    h = handlers(store)
    for lesson, i, step in ready:
        numbers = lessons.from_gallery(step)
        assert lessons.answer_of(step, numbers) in lessons.outcomes(step)
        assert "Answer (from this run):" in h.reveal_ready(lesson.title, i, None)
    no_ready = next((lesson, i) for lesson in LESSONS for i, s in enumerate(lesson.steps) if not s.action.get("gallery"))
    import gradio as gr

    with pytest.raises(gr.Error, match="no ready run"):
        h.reveal_ready(no_ready[0].title, no_ready[1], None)


class Stopped(Exception):
    pass


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["vary", "race", "load"])
def test_a_budget_check_runs_before_each_run_and_stops_the_step(kind, lesson_pair):
    """The reveal's budget (``check``) is asked before every run of a step: a check that raises at its second call
    stops a vary, race or load step there, so a request past its budget or left by its visitor runs no further."""
    step = next(s for lesson in LESSONS for s in lesson.steps if s.action["kind"] == kind)
    calls = []

    def check():
        calls.append(1)
        if len(calls) == 2:
            raise Stopped

    with pytest.raises(Stopped):
        lessons.run_action(step, lesson_pair, check)
    assert len(calls) == 2
