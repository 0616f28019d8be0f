"""Claims against numbers: every text that states a direction says what the numbers beside it show.

``contradictions`` reads a rendered text the way a student does: each "a → b (rose / fell / stayed about the same)"
and each "a, above / below / about the same as ... b" is checked against its own two numbers (as shown, so the
display's rounding counts), and a direction word that no numbers back ("accept more", "rises towards 1") is flagged.
It runs on every lesson step's reveal and on the captions of the labs that have one (rule lab, temperature lab,
distillation lab), each on five seeds on tiny models; and it is fed contradicting texts to show it flags them."""
import re
from dataclasses import replace

import pytest
import torch

from specviz.app import distill_tab, rules_tab, temperature_tab
from specviz.labs import claims, lessons
from specviz.views import tables
from tests.helpers.models import perturbed, tiny_llama, ui_models

SEEDS = range(5)
NUMBER = r"(-?\d+(?:\.\d+)?)(%?)"
WORDS = "|".join(map(re.escape, claims.MOVED.values()))
CHANGE = re.compile(rf"{NUMBER}\**\s*→\s*\**{NUMBER}\**\s*\((?P<word>{WORDS})(?:[^()]*?noise ±(?P<noise>\d+\.\d+))?")
VERSUS = re.compile(rf"{NUMBER}\**,\s*(?P<word>{'|'.join(claims.VERSUS.values())})\s+[^\d*]*\**{NUMBER}")
# a direction stated in words: in a caption it must sit inside a claim that shows its numbers
LEXICON = re.compile(r"\b(rise[sn]?|rising|rose|fall(?:s|ing|en)?|fell|grows?|growing|grew|shrinks?|shrank|"
                     r"climbs?|climbing|increas\w*|decreas\w*|more|less|fewer|higher|lower|above|below|peaks?)\b",
                     re.IGNORECASE)


def _value(number: str, percent: str) -> tuple[float, float]:
    """(value, the display's resolution) of a number as shown: 0.63 -> (0.63, 0.01), 63% -> (0.63, 0.01)."""
    decimals = len(number.partition(".")[2])
    scale = 100 if percent else 1
    return float(number) / scale, 10 ** -decimals / scale


def contradictions(text: str, free_words: bool = True) -> list[str]:
    """Every claim of ``text`` its own numbers refute, and (``free_words``) every direction word no numbers back."""
    found, claimed = [], []
    for m in CHANGE.finditer(text):
        (a, ra), (b, rb) = _value(*m.group(1, 2)), _value(*m.group(3, 4))
        word, noise = m["word"], float(m["noise"] or 0)
        band = max(claims.SAME_WITHIN * abs(a), noise) + ra + rb
        ok = {"rose": b > a, "fell": b < a}.get(word, abs(b - a) <= band)
        if not ok:
            found.append(f"{m[0]!r}: the numbers do not go that way")
        claimed.append(m.span())
    for m in VERSUS.finditer(text):
        (a, ra), (b, rb) = _value(*m.group(1, 2)), _value(*m.group(4, 5))
        word = m["word"]
        ok = {"above": a > b, "below": a < b}.get(word, abs(a - b) <= claims.SAME_WITHIN * abs(b) + ra + rb)
        if not ok:
            found.append(f"{m[0]!r}: the numbers do not go that way")
        claimed.append(m.span())
    if free_words:
        for m in LEXICON.finditer(text):
            if not any(lo <= m.start() < hi for lo, hi in claimed):
                found.append(f"{m[0]!r} at {m.start()}: a direction no numbers beside it back")
    return found


# -- the checker can fail ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("text", [
    "acceptance **0.65 → 0.38** (rose)",  # lesson 8's run, said the other way
    "acceptance **0.38 → 0.65** (fell)",
    "acceptance **0.65 → 0.38** (stayed about the same)",
    "acceptance **40% → 60%** (stayed about the same, noise ±0.05 over 90 and 80 drafts)",
    "typical **0.55**, above Leviathan's **0.74**",  # the rule lab's chart at T = 1, said the other way
    "typical **0.74**, about the same as Leviathan's **0.55**",
    "Lossy rules (typical, optimistic, lenient) accept more by changing the law.",  # the rule lab's old caption
    "as T grows both flatten and overlap more, so α = E[Σ min(p, q)] rises towards 1",  # the temperature lab's
    "Distil a draft and watch its acceptance rate climb as the held-out KL falls.",  # the distillation lab's
])
def test_the_checker_flags_a_text_its_numbers_refute(text):
    assert contradictions(text), text


@pytest.mark.parametrize("text", [
    "acceptance **0.65 → 0.63** (stayed about the same)",
    "acceptance **0.65 → 0.38** (fell)",
    "acceptance **0.48 → 0.60** (stayed about the same, noise ±0.13 over 128 and 101 drafts)",
    "typical **0.55**, below Leviathan's **0.74**",
    "τ **1.90 → 2.40** (rose)",
])
def test_the_checker_passes_a_text_its_numbers_bear_out(text):
    assert not contradictions(text), contradictions(text)


def test_the_direction_words_by_hand():
    assert claims.moved(0.65, 0.63) == "stayed about the same" and claims.moved(0.65, 0.38) == "fell"
    assert claims.moved(0.5, 0.6) == "rose" and claims.moved(0.5, 0.6, noise=0.13) == "stayed about the same"
    assert claims.versus(0.55, 0.74) == "below" and claims.versus(0.74, 0.55) == "above"
    assert claims.moved(0.0, 0.0) == "stayed about the same" and claims.moved(0.0, 0.01) == "rose"
    assert claims.interval(0.9, 1.2) == claims.NOISE and claims.interval(1.1, 1.3) == claims.UP
    assert claims.rate_noise(0.5, 100, 0.5, 100) == pytest.approx(2 * (0.5 / 10) * 2 ** 0.5)
    with pytest.raises(ValueError, match="missing"):
        claims.moved(float("nan"), 1.0)


# -- lessons: ask before they tell, and reveal what the run shows ------------------------------------------------------
STEPS = [(lesson, i, step) for lesson in lessons.load_lessons() for i, step in enumerate(lesson.steps)]
IDS = [f"{lesson.title[:2]}{i + 1}" for lesson, i, _ in STEPS]


@pytest.mark.parametrize("lesson, i, step", STEPS, ids=IDS)
def test_no_step_states_a_direction_before_its_reveal(lesson, i, step):
    """The idea and the question come before the run: neither states how the number asked about will move (the
    question may list the choices, and a "which ...?" question may compare, but asserts nothing)."""
    assert not LEXICON.search(step.text), f"{lesson.title} step {i + 1}: {LEXICON.search(step.text)[0]!r}"
    question = step.question
    for choice in step.choices:
        question = question.replace(choice, "")
    if step.answer["rule"] in ("direction", "interval"):
        assert all(c in step.question for c in ("up", "down")), step.question  # every direction offered
        assert not LEXICON.search(question), question
    assert step.question.rstrip().endswith("?")


def test_a_step_that_tells_its_answer_first_is_caught():
    step = next(s for _, _, s in STEPS if s.answer["metric"] == "acceptance" and s.answer["rule"] == "direction")
    told = replace(step, text="As T grows both spread out and overlap more.")
    assert LEXICON.search(told.text)


def _shown(template: str, name: str, numbers: dict) -> str | None:
    """The text ``{name:spec}`` renders to in ``template``, as the student sees it (None where it is not shown)."""
    m = re.search(r"\{" + re.escape(name) + r"(:[^}]*)?\}", template)
    return None if m is None else format(numbers[name], (m[1] or ":")[1:])


def lesson_contradictions(step, numbers: dict) -> list[str]:
    """What a reveal claims that its shown numbers refute: the verdict of a direction rule against the first and last
    value as shown, each {metric_change} word against the two values it speaks of, and every "a → b (word)" in the
    rendered text against its own numbers."""
    text, found = lessons.reveal(step, numbers, None), []
    template = step.reveal + " " + " ".join(step.why.values())
    verdict = re.match(r"\*\*Answer \(from this run\): (.+?)\.\*\*", text)[1]
    if step.answer["rule"] == "direction":
        metric, n = step.answer["metric"], len(step.action["values"]) - 1
        first, last = _shown(template, f"{metric}_0", numbers), _shown(template, f"{metric}_{n}", numbers)
        if first is not None and last is not None:
            (a, _), (b, _) = _value(*re.match(NUMBER, first).groups()), _value(*re.match(NUMBER, last).groups())
            if (verdict == "up" and not b > a) or (verdict == "down" and not b < a):
                found.append(f"verdict {verdict!r} beside {first} → {last}")
    for metric in re.findall(r"\{(\w+)_change\}", template):
        n = max(int(k.rsplit("_", 1)[1]) for k in numbers if re.fullmatch(rf"{metric}_\d+", k))
        first, last = _shown(template, f"{metric}_0", numbers), _shown(template, f"{metric}_{n}", numbers)
        word = lessons.changes(numbers)[f"{metric}_change"]
        if first is not None and last is not None:
            found += contradictions(f"{first} → {last} ({word})", free_words=False)
    return found + contradictions(text, free_words=False) + _named_metrics(step.why.get(verdict, ""), numbers)


# a clause that names a metric and a direction says how that metric moved: it must agree with the run
NAMED = {"alpha": re.compile(r"overlap|Σ min\(p, q\)|α"), "tau": re.compile(r"tokens per round|τ"),
         "tokens_per_pass": re.compile(r"tokens per (target )?pass")}
UP_WORDS = re.compile(r"\b(rose|rises?|grew|grows?|climbs?|climbed|increased?)\b", re.IGNORECASE)
DOWN_WORDS = re.compile(r"\b(fell|falls?|shrank|shrinks?|dropped|drops?|decreased?)\b", re.IGNORECASE)


def _named_metrics(why: str, numbers: dict) -> list[str]:
    """Clauses of a why that name a metric beside a direction word, against that metric's change in the run."""
    changes, found = lessons.changes(numbers), []
    for clause in re.split(r"[.:;]\s", why):
        said = "rose" if UP_WORDS.search(clause) and not DOWN_WORDS.search(clause) else \
            "fell" if DOWN_WORDS.search(clause) and not UP_WORDS.search(clause) else None
        for metric, named in NAMED.items():
            moved = changes.get(f"{metric}_change")
            if said and moved and named.search(clause) and moved != said:
                found.append(f"{clause!r} says {said} where {metric} {moved}")
    return found


def test_a_reveal_whose_words_contradict_its_numbers_is_caught():
    step = lessons.Step("", "up, down or about the same?", ("up", "down", "about the same"),
                        {"kind": "vary", "param": "temperature", "values": [0.3, 1.2]},
                        {"metric": "acceptance", "rule": "direction"},
                        "Acceptance **{acceptance_0:.2f} → {acceptance_1:.2f}** ({acceptance_change}).",
                        {"up": "", "down": "", "about the same": ""})
    falling = {"acceptance_0": 0.65, "acceptance_1": 0.38}
    assert not lesson_contradictions(step, falling)
    asserted = replace(step, reveal="Acceptance **{acceptance_0:.2f} → {acceptance_1:.2f}** (rose).")
    assert lesson_contradictions(asserted, falling)  # a word written in, not read off the run
    overlap = replace(step, why={**step.why, "down": "The overlap Σ min(p, q) shrank as both flattened."})
    assert lesson_contradictions(overlap, falling | {"alpha_0": 0.69, "alpha_1": 0.74})  # α rose beside it
    assert not lesson_contradictions(overlap, falling | {"alpha_0": 0.79, "alpha_1": 0.72})
    coarse = replace(step, reveal="Acceptance **{acceptance_0:.1f}** at T = 0.3, **{acceptance_1:.1f}** at 1.2.")
    assert lesson_contradictions(coarse, {"acceptance_0": 0.60, "acceptance_1": 0.64})  # "up" beside 0.6 and 0.6
    assert not lesson_contradictions(coarse, {"acceptance_0": 0.61, "acceptance_1": 0.76})  # "up" beside 0.6, 0.8


@pytest.fixture(scope="module")
def lesson_pair():
    target, draft, tok = ui_models()
    other = perturbed(target, 0.9, seed=4)
    return lambda target_name, draft_name: (target, tok, other if draft_name == "small-ce" else draft)


def _at_seed(step, seed: int):
    return replace(step, action={**step.action, "settings": {**step.action.get("settings", {}), "seed": seed}})


@pytest.mark.slow
@pytest.mark.parametrize("lesson, i, step", STEPS, ids=IDS)
def test_every_reveal_says_what_its_run_shows_on_five_seeds(lesson, i, step, lesson_pair):
    for seed in SEEDS:
        numbers = lessons.run_action(_at_seed(step, seed), lesson_pair)
        assert not lesson_contradictions(step, numbers), (lesson.title, i + 1, seed, lessons.reveal(step, numbers, None))


# -- the labs' captions, rendered from their own tables -----------------------------------------------------------------
def _in_table(text: str, table) -> list[str]:
    """Numbers a caption's claims quote that its table does not show (to the caption's rounding)."""
    values = [float(v) for v in table.select_dtypes("number").to_numpy().ravel() if v == v]
    missing = []
    for m in list(CHANGE.finditer(text)) + list(VERSUS.finditer(text)):
        for number, percent in (m.group(1, 2), m.groups()[-2:] if m.re is VERSUS else m.group(3, 4)):
            value, res = _value(number, percent)
            if not any(abs(v - value) <= res / 2 + 1e-9 for v in values):
                missing.append(number)
    return missing


TARGET = tiny_llama(vocab=32, seed=7, sharpen=10)
DRAFT = perturbed(TARGET, 0.6, seed=2)
PROMPTS = [torch.tensor([[1, 5, 9, 3]]), torch.tensor([[2, 4]]), torch.tensor([[6, 6, 1]])]


@pytest.mark.slow
@pytest.mark.parametrize("seed", SEEDS)
def test_the_rule_labs_caption_says_what_its_table_shows(seed):
    from specviz import DecodeConfig
    from specviz.labs.rules import VARIANTS, rules_lab

    cfg = DecodeConfig(k=4, max_new_tokens=24, seed=seed)
    lab = rules_lab(TARGET, DRAFT, PROMPTS[:2], rules_tab.TAB_TEMPERATURES, cfg, list(VARIANTS), 500)
    text = rules_tab.caption(lab)
    assert CHANGE.search(text) and VERSUS.search(text)  # it says how each rule moved, and the lossy ones beside
    assert not contradictions(text), (seed, contradictions(text), text)
    assert not _in_table(text, lab), text


@pytest.mark.slow
@pytest.mark.parametrize("seed", SEEDS)
def test_the_temperature_labs_caption_says_what_its_table_shows(seed):
    from specviz import DecodeConfig
    from specviz.labs.temperature import temperature_lab

    lab = temperature_lab(TARGET, DRAFT, PROMPTS, [0, 0.3, 0.6, 0.8, 1.0, 1.5], DecodeConfig(k=4, max_new_tokens=16,
                                                                                             seed=seed))
    text = temperature_tab.caption(lab)
    assert len(CHANGE.findall(text)) == 3 and "noise ±" in text
    assert not contradictions(text), (seed, contradictions(text), text)
    assert not _in_table(text, lab), text


@pytest.mark.slow
@pytest.mark.parametrize("seed", SEEDS)
def test_the_distillation_labs_text_says_what_its_checkpoints_show(seed):
    import pandas as pd

    from specviz import distill_lab

    data = torch.randint(0, 32, (24, 16), generator=torch.Generator().manual_seed(seed))
    lab = distill_lab(TARGET, data, PROMPTS[:2], steps=4, eval_every=2, seq_len=16, batch_size=2, seed=seed)
    text = distill_tab.outcome(lab.points.to_dict("records"), 4)
    assert len(CHANGE.findall(text)) == 4 and VERSUS.search(text) and "4 optimiser steps per method" in text
    assert not contradictions(text), (seed, contradictions(text), text)
    assert not _in_table(text, lab.points[lab.points.heldout_kl.notna()]), text
    assert isinstance(lab.points, pd.DataFrame)


def test_a_lab_caption_made_to_contradict_its_table_is_caught():
    import pandas as pd

    lab = pd.DataFrame(dict(temperature=[0.0, 1.5], acceptance=[0.65, 0.38], drafted=[400, 400],
                            alpha_visited=[0.7, 0.4], alpha_fixed=[0.71, 0.76], tau=[2.0, 1.5], tokens_per_s=[1, 1]))
    text = temperature_tab.caption(lab)
    assert not contradictions(text) and "**0.65 → 0.38** (fell" in text and "**0.71 → 0.76** (rose" in text
    assert contradictions(text.replace("(fell", "(rose"))  # the same caption with its word swapped
    assert _in_table(text.replace("0.38", "0.83"), lab)  # a number the table does not show


def test_rule_names_read_as_words():
    assert tables.rule_name("exact_match+argmax") == "exact match, argmax drafts"
    assert tables.rule_name("point_mass") == "point mass" and tables.rule_name("typical") == "typical (lossy)"


@pytest.mark.slow
def test_no_lab_states_a_direction_before_its_run(store):
    """What a lab's tab shows before Run (its intro, labels and chart captions) states no direction: the words that
    say how a number moved come after the run, from its table."""
    import gradio as gr

    with gr.Blocks() as demo:
        rules_tab.build(store)
        temperature_tab.build(store)
        distill_tab.build(store, gr.State({}))
    texts = [getattr(b, attr) for b in demo.blocks.values() for attr in ("value", "label")
             if isinstance(getattr(b, attr, None), str)]
    assert any("same number of optimiser steps" in t for t in texts)
    stated = [(t[:80], LEXICON.findall(t)) for t in texts if LEXICON.search(t)]
    assert not stated, stated


def test_the_losslessness_labs_status_reads_its_tv_off_the_run():
    import pandas as pd

    from specviz.app.lossless_tab import tv_trend

    first = pd.Series(dict(draws=500, tv_to_p=0.050))
    assert "went from 0.0500 at 500 draws to 0.0150 at 5,000 (fell)" in tv_trend(
        first, pd.Series(dict(draws=5000, tv_to_p=0.015)))
    assert "(rose)" in tv_trend(first, pd.Series(dict(draws=5000, tv_to_p=0.09)))  # a run's own numbers, whatever they say
    assert "went from" not in tv_trend(first, first)  # one update: no direction to state
