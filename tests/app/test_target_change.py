"""Picking a target never shows an error: every draft picker moves, in one update, to choices that fit the new target
and a value among them, whatever value the browser still holds (a pick fires the event more than once, the second
with the old draft after the choices have narrowed). A tiny store with two targets of different tokenizers, the
second's drafts narrowed as an operator's local model's are; as handlers, then in a real browser."""
import gradio as gr
import pytest

from specviz.app import build_demo
from specviz.app.store import ModelStore
from specviz.app.widgets import fitting_update
from specviz.drafts.pairing import check_tokenizers
from tests.helpers.app import chromium_page, needs_chromium, serve
from tests.helpers.models import tiny_llama, ui_models, word_tokenizer

HYBRID = "target+eagle+ngram-target"  # the default draft: the bundled family's hybrid, which fits the family only
WORDS = ["<unk>"] + [f"w{i}" for i in range(40)]


def two_tokenizer_store() -> ModelStore:
    """"tiny-target" behind the bundled tokenizer, "other-target" behind a word tokenizer of 41 tokens."""
    target, draft, tok = ui_models()
    other_tok = word_tokenizer(WORDS)
    other = tiny_llama(vocab=len(WORDS))
    tokenizers = {"tiny-target": tok, "target": tok, "other-target": other_tok, "tiny": tok}
    models = {"tiny-target": (target, tok), "other-target": (other, other_tok)}
    return ModelStore(load_model=models.__getitem__, load_drafter=lambda name: draft,
                      load_tokenizer=tokenizers.__getitem__, list_targets=lambda: list(models),
                      list_drafters=lambda: [HYBRID, "tiny", "prompt-lookup"], default_target="tiny-target",
                      default_draft=HYBRID)


def test_the_two_targets_really_differ():
    store = two_tokenizer_store()
    with pytest.raises(ValueError):
        check_tokenizers(store.target("tiny-target")[1], store.target("other-target")[1])
    assert store.drafts_for("tiny-target") == [HYBRID, "tiny", "prompt-lookup"]
    assert store.drafts_for("other-target") == ["tiny", "prompt-lookup"]


@pytest.mark.slow
@pytest.mark.parametrize("current", [HYBRID, "prompt-lookup", "no-such-draft", [HYBRID, "prompt-lookup"], [HYBRID]])
def test_a_picked_target_sets_fitting_choices_and_a_value_among_them(current):
    store = two_tokenizer_store()
    for target in store.list_targets():
        update = fitting_update(store, target, current)
        assert update["__type__"] == "update" and update["choices"] == store.drafts_for(target)
        values = update["value"] if isinstance(current, list) else [update["value"]]
        assert values and all(v in update["choices"] for v in values)
        kept = [c for c in (current if isinstance(current, list) else [current]) if c in update["choices"]]
        assert values == (kept or values)  # a draft that still fits stays picked
        assert isinstance(current, list) or kept or update["value"] in (store.default_draft(), update["choices"][0])


@pytest.mark.slow
def test_the_old_draft_arriving_after_the_choices_narrowed_is_answered_not_refused():
    """What gradio's check refused (its Error over the picker): a dropdown holding the new target's drafts, handed
    the old default draft. The event reads the value unchecked and answers it with a value that fits."""
    store = two_tokenizer_store()
    narrowed = gr.Dropdown(store.drafts_for("other-target"), value="tiny")
    with pytest.raises(gr.Error, match="is not in the list of choices"):
        narrowed.preprocess(HYBRID)  # the negative control: the check the event now skips
    with gr.Blocks() as demo:
        target, draft = gr.Dropdown(store.list_targets()), gr.Dropdown(store.list_drafters())
        from specviz.app.widgets import follow_target

        follow_target(store, target, draft)
    (event,) = [fn for fn in demo.fns.values() if fn.inputs and fn.inputs[0] is target]
    assert event.preprocess is False
    assert fitting_update(store, "other-target", HYBRID)["value"] == "tiny"


@needs_chromium
@pytest.mark.slow
def test_picking_every_target_shows_no_error():
    with serve(build_demo(two_tokenizer_store())) as url, chromium_page(viewport={"width": 1280, "height": 900}) as page:
        page.goto(url)
        picker = page.get_by_label("Target").first
        for target in ["other-target", "tiny-target", "other-target"]:
            picker.click()
            page.get_by_role("option", name=target, exact=True).click()
            page.wait_for_timeout(2500)  # both events of the pick answered
            assert page.locator(".error, .toast-body.error, [data-testid='toast-body'].error").count() == 0, target
            assert page.get_by_label("Draft").first.input_value() in two_tokenizer_store().drafts_for(target)
