"""The Learn tab: guided lessons (``labs.lessons``), each step an idea, a question to predict, and a real run
that reveals the answer with its numbers. Handlers take the store (``handlers(store)`` binds them)."""
from __future__ import annotations

import gradio as gr

from ..labs import lessons
from .budget import Budget
from .store import ModelStore
from .widgets import MODEL_QUEUE, bind


def step_view(lesson_title, index) -> tuple:
    """(step Markdown, the choices radio, step index, the answer cleared, the ready-run button: shown only where the
    step names a ready run) of a lesson's step, clamped to its steps."""
    lesson = _lesson(lesson_title)
    i = max(0, min(int(index or 0), len(lesson.steps) - 1))
    step = lesson.steps[i]
    text = f"### {lesson.title}: step {i + 1} of {len(lesson.steps)}\n\n{step.text}\n\n**Predict:** {step.question}"
    ready = gr.update(visible=lessons.has_ready_run(step))
    return text, gr.Radio(choices=list(step.choices), value=None, label="Your prediction"), i, "", ready


def move(lesson_title, index, delta) -> tuple:
    return step_view(lesson_title, int(index or 0) + delta)


def reveal(store: ModelStore, lesson_title, index, picked):
    """Runs the step's action on the models and says what the run answers, with its numbers."""
    step = _lesson(lesson_title).steps[int(index or 0)]

    def pair(target, draft):
        return store.pair(target or store.default_target(), draft or store.default_draft())

    yield ("*Running it on the models: several interleaved sets, timed to show this machine's clock beside the answer "
           "(which reads the tokens, not the clock)…*" if step.action["kind"] == "race" else "*Running it on the models…*")
    budget = Budget()  # checked before each of the step's runs: stopped past the budget or once its visitor has left
    yield lessons.reveal(step, lessons.run_action(step, pair, budget.check), picked)


def reveal_ready(lesson_title, index, picked) -> str:
    """The answer from the step's ready run in the gallery: instant, no model work (for a busy Space)."""
    step = _lesson(lesson_title).steps[int(index or 0)]
    return lessons.reveal(step, lessons.from_gallery(step), picked)


def _lesson(title) -> lessons.Lesson:
    for lesson in lessons.load_lessons():
        if lesson.title == title:
            return lesson
    raise ValueError(f"no lesson called {title!r}")


def handlers(store: ModelStore):
    return bind(store, models=dict(reveal=reveal), plain=dict(step_view=step_view, move=move, reveal_ready=reveal_ready))


def build(store: ModelStore) -> tuple:
    h = handlers(store)
    titles = [lesson.title for lesson in lessons.load_lessons()]
    gr.Markdown("Short lessons: read one idea, **predict** what will happen, then reveal it: the app runs the real "
                "models and the answer comes from that run's numbers (when the Space is busy, some steps reveal from a "
                "ready run in the gallery, instantly). Lessons live in `assets/lessons/` as JSON: add your own.")
    lesson = gr.Dropdown(titles, value=titles[0], label="Lesson", elem_id="lesson")
    index = gr.State(0)
    text = gr.Markdown(elem_id="lesson-step")
    picked = gr.Radio([], label="Your prediction", elem_id="lesson-choice")
    with gr.Row():
        prev_btn = gr.Button("◀ previous step", scale=0)
        reveal_btn = gr.Button("Reveal: run it", variant="primary", elem_id="lesson-reveal")
        ready_btn = gr.Button("Reveal from a ready run (instant)", elem_id="lesson-ready", scale=0, visible=False)
        next_btn = gr.Button("next step ▶", scale=0)
    answer = gr.Markdown(elem_id="lesson-answer")
    views = [text, picked, index, answer, ready_btn]
    lesson.change(lambda t: h.step_view(t, 0), [lesson], views, api_visibility="private")
    prev_btn.click(lambda t, i: h.move(t, i, -1), [lesson, index], views, api_visibility="private")
    next_btn.click(lambda t, i: h.move(t, i, +1), [lesson, index], views, api_visibility="private")
    reveal_btn.click(h.reveal, [lesson, index, picked], [answer], api_visibility="private", **MODEL_QUEUE)
    ready_btn.click(h.reveal_ready, [lesson, index, picked], [answer], api_visibility="private")
    return lesson, views, h  # the page load shows the first step (demo.load)
