"""Every lesson loads, and every step's action runs on tiny models: its answer is read off the run and its reveal
text formats with the run's numbers."""
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
        assert answer in step.choices or answer in step.answer.get("names", ())
        text = lessons.reveal(step, numbers, step.choices[0])
        assert f"Answer (from this run): {answer}." in text and "{" not in text


def test_answer_rules_by_hand():
    step = lessons.Step("", "?", ("up", "down", "about the same"), {"kind": "vary", "values": [2, 6]},
                        {"metric": "tau", "rule": "direction"}, "")
    assert lessons.answer_of(step, {"tau_0": 2.0, "tau_1": 3.0}) == "up"
    assert lessons.answer_of(step, {"tau_0": 2.0, "tau_1": 2.05}) == "about the same"
    assert lessons.answer_of(step, {"tau_0": 2.0, "tau_1": 1.0}) == "down"
    low = lessons.Step("", "?", ("a", "b"), {"kind": "run"}, {"metric": "x", "rule": "threshold", "at": 1.0,
                                                            "below": "a", "above": "b", "equal": "a"}, "")
    assert lessons.answer_of(low, {"x": 0.4}) == "a" and lessons.answer_of(low, {"x": 1.4}) == "b"


def test_a_malformed_lesson_names_its_file(tmp_path):
    (tmp_path / "bad.json").write_text('{"title": "x", "steps": [{"text": "t"}]}')
    with pytest.raises(ValueError, match="lesson bad.json"):
        lessons.load_lessons(tmp_path)


def test_the_learn_tab_walks_a_lesson_and_reveals_from_a_run(store):
    from tests.helpers.app import handlers
    from tests.helpers.models import last

    h = handlers(store)
    title = LESSONS[0].title
    text, radio, index, answer = h.step_view(title, 0)
    assert "step 1 of" in text and LESSONS[0].steps[0].question in text and index == 0 and answer == ""
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
        assert lessons.answer_of(step, numbers) in step.choices
        assert "Answer (from this run):" in h.reveal_ready(lesson.title, i, None)
    no_ready = next((lesson, i) for lesson in LESSONS for i, s in enumerate(lesson.steps) if not s.action.get("gallery"))
    import gradio as gr

    with pytest.raises(gr.Error, match="no ready run"):
        h.reveal_ready(no_ready[0].title, no_ready[1], None)
