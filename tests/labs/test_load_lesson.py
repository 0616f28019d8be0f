"""Lesson 9 ("Why speculation stops paying under load") revealed five times over with a busy loop beside it: every
step gives the same verdict, and the quantities its answers read (a request's tokens per step, the target tokens
processed per token emitted, the batch passes per token) and the goodput model's crossover come out the same each
time; only the clock's speedups move."""
from __future__ import annotations

import subprocess
import sys

import pytest

from specviz.labs import lessons
from tests.helpers.models import ui_models

HELD = ("tau", "work", "passes_per_token")


@pytest.fixture(scope="module")
def pair():
    target, draft, tok = ui_models()
    return lambda target_name, draft_name: (target, tok, draft)


@pytest.fixture
def busy():
    loop = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        yield loop
    finally:
        loop.kill()
        loop.wait()


@pytest.mark.slow
def test_lesson_9_reveals_the_same_verdicts_from_the_same_counts_five_times_on_a_loaded_machine(pair, busy):
    lesson = next(lesson for lesson in lessons.load_lessons() if lesson.title.startswith("9."))
    assert [step.answer["metric"] for step in lesson.steps] == ["work_0", "tau"]  # answers that read counts
    for i, step in enumerate(lesson.steps):
        reveals = [lessons.run_action(step, pair) for _ in range(5)]
        assert busy.poll() is None  # the loop ran beside every reveal
        verdicts = {lessons.answer_of(step, numbers) for numbers in reveals}
        assert len(verdicts) == 1, f"step {i + 1}: {verdicts}"
        batches = range(len(step.action["values"]))
        held = {tuple(numbers[f"{key}_{j}"] for key in HELD for j in batches) for numbers in reveals}
        assert len(held) == 1, f"step {i + 1}: {held}"
        assert len({numbers["crossover"] for numbers in reveals}) == 1
        assert all(lessons.reveal(step, numbers, None).count("{") == 0 for numbers in reveals)
