"""Drafts trained in the distillation lab are pickable, for their user only, in the explorer and the
Compare drafts tab: through the handlers, with the user's gr.State dict passed in."""
import os

import gradio as gr
import pytest

from specviz import DecodeConfig, speculative_generate
from specviz.app import build_demo
from specviz.app.store import TrainedDraft
from tests.helpers.app import handlers, tiny_store
from tests.helpers.models import last, ui_models

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
SETTINGS = dict(k=3, k_policy="fixed", temperature=0.8, top_k=0, top_p=0.95, max_new_tokens=10, seed=7)



@pytest.fixture(scope="module")
def pair():
    return ui_models()


@pytest.fixture(scope="module")
def store(pair):
    return tiny_store(pair, targets=("tiny-target", "other-target"), default_draft="tiny")


@pytest.fixture(scope="module")
def mine(store):
    """One user's state after a tiny distillation run (KL only, 2 steps, checkpoints at start and end)."""
    final = last(handlers(store).run_distill("tiny-target", "tiny", 2, False, 100, {}))
    return final[3]


@pytest.mark.slow
def test_trained_draft_is_named_and_kept_with_its_target(mine):
    (name, entry), = mine.items()
    assert name == "lab: KL 2 steps #1" and isinstance(entry, TrainedDraft) and entry.target == "tiny-target"


@pytest.mark.slow
def test_explorer_runs_the_users_trained_draft(pair, store, mine):
    big, _, tok = pair
    name = next(iter(mine))
    cfg = DecodeConfig(**SETTINGS)
    want = speculative_generate(big, mine[name].model, tok("ROMEO:", return_tensors="pt").input_ids, cfg).new_tokens
    trace = last(handlers(store).run("ROMEO:", "tiny-target", name, *SETTINGS.values(), False, mine))[0]
    assert trace.new_tokens == want and len(want) == 10 and trace.draft_name == name
    # the lab's own try box still works with the same state
    html, summary = handlers(store).try_draft("ROMEO:", "tiny-target", name, mine, 0.0)
    assert "sv-tok" in html and name.replace("#", "\\#") in summary  # names are Markdown-escaped text


@pytest.mark.slow
def test_compare_runs_the_users_trained_draft(pair, store, mine, monkeypatch):
    import specviz.app.compare_tab as ui_compare

    big, _, tok = pair
    name = next(iter(mine))
    seen = []
    real = ui_compare.iter_compare
    monkeypatch.setattr(ui_compare, "iter_compare", lambda *a, **kw: (seen.append(r) or r for r in real(*a, **kw)))
    h = handlers(store)
    outs = list(h.run_compare("tiny-target", [name, "tiny"], "ROMEO:", 3, 0.8, 0, 1.0, 10, 7, mine))
    state = outs[-1][0]
    assert state["drafts"] == [name, "tiny"] and list(outs[-2][3].draft) == [name, "tiny"]
    cfg = DecodeConfig(k=3, temperature=0.8, top_k=0, top_p=1.0, max_new_tokens=10, seed=7, max_k=10)
    want = speculative_generate(big, mine[name].model, tok("ROMEO:", return_tensors="pt").input_ids, cfg).new_tokens
    run = next(r for r in seen if r.draft == name)
    assert run.trace.new_tokens == want and len(want) == 10
    note, frame, fig = h.disagree(state, 0)  # the comparison's state remembers the user's draft
    assert f"q {name}" in frame.columns


@pytest.mark.slow
def test_unknown_names_and_other_users_get_readable_errors(store, mine):
    name = next(iter(mine))
    h, c = handlers(store), handlers(store)
    other = {"lab: KL 5s #1": mine[name]}  # another user's state: their own dict, not this one
    for state in (mine, {}, other, None):
        with pytest.raises(gr.Error, match="unknown draft"):
            last(h.run("ROMEO:", "tiny-target", "lab: nope", *SETTINGS.values(), False, state))
    for state in ({}, None, {"lab: KL 5s #2": mine[name]}):
        with pytest.raises(gr.Error, match="unknown draft"):
            last(h.run("ROMEO:", "tiny-target", name, *SETTINGS.values(), False, state))
        with pytest.raises(gr.Error, match="unknown draft"):
            last(c.run_compare("tiny-target", [name], "ROMEO:", 3, 0.0, 0, 1.0, 8, 0, state))
    with pytest.raises(gr.Error, match="trained for target 'tiny-target'"):
        last(h.run("ROMEO:", "other-target", name, *SETTINGS.values(), False, mine))
    with pytest.raises(gr.Error, match="trained for target 'tiny-target'"):
        last(c.run_compare("other-target", [name], "ROMEO:", 3, 0.0, 0, 1.0, 8, 0, mine))


@pytest.mark.slow
def test_draft_pickers_list_the_store_then_the_users_drafts(store, mine):
    h = handlers(store)
    explorer, compare = h.draft_pickers(mine)
    assert explorer["choices"] == compare["choices"] == ["tiny", "prompt-lookup", *mine] and "value" not in explorer
    assert h.draft_pickers({})[0]["choices"] == ["tiny", "prompt-lookup"]


@pytest.mark.slow
def test_app_wires_training_to_both_pickers(store):
    config = build_demo(store).config
    ids = {}
    for c in config["components"]:  # the first of each (the explorer's Draft comes before the labs')
        ids.setdefault((c.get("props", {}).get("label"), c["type"]), c["id"])
    pickers = [ids[("Draft", "dropdown")], ids[("Drafts", "checkboxgroup")]]
    assert any(d["outputs"] == pickers for d in config["dependencies"])


def test_compares_disagreement_runs_under_a_budget(store, monkeypatch):
    """Compare's per-position look checks its request's budget before its passes: with a budget of 0 s it stops
    there with the budget's message (and with the default budget the same state gets past the check)."""
    monkeypatch.setenv("SPECVIZ_MAX_REQUEST_S", "0")
    state = {"target": "tiny-target", "drafts": ["tiny"], "user_drafts": None, "baseline": None, "cfg": None}
    with pytest.raises(gr.Error, match="per request"):
        handlers(store).disagree(state, 0)
    monkeypatch.delenv("SPECVIZ_MAX_REQUEST_S")
    with pytest.raises(gr.Error) as e:  # past the check: the hand-made state has no baseline run to read
        handlers(store).disagree(state, 0)
    assert "per request" not in str(e.value)
