"""The line beside the explorer's k slider: read from the chosen draft, it says how many drafts a round that draft can
make and why, the same case ``draft_limit`` finds on the drafter itself; it follows the draft and the temperature
picked; and at the explorer's default temperature dragging k past the hybrid's model-step cap changes the run."""
import gradio as gr
import pytest
import torch

from specviz import DecodeConfig, speculative_generate
from specviz.app import build_demo
from specviz.config import DEFAULTS
from specviz.drafts.hybrid import HybridDrafter, draft_limit
from specviz.drafts.ngram import NGramModel
from specviz.models import DEFAULT_DRAFT, HYBRIDS, PROMPT_LOOKUP
from specviz.views.summary import k_note
from tests.helpers.app import tiny_store
from tests.helpers.models import perturbed, tiny_llama


def tiny_hybrid(options: dict) -> tuple:
    """(target, prompt, a hybrid of a tiny model and an n-gram of the target's greedy loop, built with ``options``)."""
    target = tiny_llama(vocab=16, seed=11, sharpen=8)
    ids = torch.tensor([[1, 2, 3, 1, 2, 3]])
    text = target.generate(ids, do_sample=False, max_new_tokens=120, min_new_tokens=120)[0]
    table = NGramModel.fit(text, 16, order=3, min_count=1)
    return target, ids, HybridDrafter(table, perturbed(target, 0.5), 0.0, **options)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(HYBRIDS))
@pytest.mark.parametrize("temperature", [0.0, DEFAULTS.temperature])
def test_the_k_line_names_the_case_draft_limit_finds_on_the_drafter(name, temperature):
    _, _, hybrid = tiny_hybrid(HYBRIDS[name][2])
    k = 16  # the slider's top: above any model-step cap
    _, why = draft_limit(hybrid, k, temperature)
    line = k_note(name, temperature)
    assert hybrid.uses_table(temperature) != ("(no n-gram)" in line), line
    cap = hybrid.model_steps if hybrid.uses_table(temperature) else None
    assert (f"at most {cap} of them" in why) == (f"at most {cap} from" in line), (why, line)
    assert ("only where" in why) == ("only where" in line), (why, line)


def test_the_k_line_for_other_drafts_says_where_their_drafts_come_from():
    assert k_note("lite", 0.8) == "up to k drafts a round, all from lite"
    assert "what followed the run's last tokens" in k_note(PROMPT_LOOKUP, 0.0)
    assert k_note(None, 0.8) == "up to k drafts a round"


@pytest.mark.slow
def test_at_the_default_temperature_k_past_the_cap_changes_the_run():
    """The default hybrid's cap (5 model steps) binds greedy runs only: sampled, k = 8 drafts past 5 and is another
    run than k = 6 (the negative control: greedy, with no sure step, no round drafts past the cap)."""
    options = HYBRIDS[DEFAULT_DRAFT][2]
    target, ids, hybrid = tiny_hybrid(options)
    sampled = {k: speculative_generate(target, hybrid, ids, DecodeConfig(k=k, temperature=DEFAULTS.temperature,
                                                                          max_new_tokens=40, seed=3)) for k in (6, 8)}
    assert max(len(r.drafted) for r in sampled[8].rounds) > options["model_steps"]
    assert [len(r.drafted) for r in sampled[6].rounds] != [len(r.drafted) for r in sampled[8].rounds]
    unsure = HybridDrafter(hybrid.table, hybrid.model_draft, 1.01, **{**options, "lookup": 0})  # no sure step
    greedy = speculative_generate(target, unsure, ids, DecodeConfig(k=8, temperature=0.0, max_new_tokens=40))
    assert max(len(r.drafted) for r in greedy.rounds) == options["model_steps"]


@pytest.mark.slow
def test_the_k_slider_carries_the_line_and_follows_the_draft_and_temperature():
    demo = build_demo(tiny_store())
    (k,) = [b for b in demo.blocks.values() if getattr(b, "elem_id", None) == "k"]
    draft = next(b for b in demo.blocks.values() if getattr(b, "elem_id", None) == "draft")
    assert k.info == k_note(draft.value, DEFAULTS.temperature)
    followers = [fn for fn in demo.fns.values() if [o._id for o in fn.outputs] == [k._id]]
    assert {fn.inputs[0].elem_id for fn in followers} == {"draft"} and len(followers) == 2  # draft and temperature
    from specviz.app.explorer import k_info

    assert k_info("lite", 0.0) == gr.update(info=k_note("lite", 0.0))
