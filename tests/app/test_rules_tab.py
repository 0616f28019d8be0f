"""The acceptance-rule lab's tab and the rule in the explorer, through the bound handlers on tiny models: the lab's
table and charts, bad settings as readable gr.Errors, a lossy rule's summary with its TV, the replay's Leviathan
comparison, and the losslessness lab refusing a lossy rule in its correct column."""
import gradio as gr
import pytest

from specviz.app import explorer, forms, lossless_tab, rules_tab
from tests.helpers.models import last

LAB = dict(target="tiny-target", draft="tiny", prompts_text="ROMEO:", temperatures_text="0, 1", k=2, max_new=6, seed=0)


@pytest.mark.slow
def test_the_tab_runs_the_lab_and_draws_its_charts(store):
    h = rules_tab.handlers(store)
    status, table, acceptance, tv, speed = last(h.run_rules_lab(**LAB, variants=["leviathan", "typical",
                                                                                "exact_match+argmax"], draws=500))
    assert "Done: 8 runs" in status and len(table) == 6 and set(table.rule) == {"Leviathan", "typical (lossy)",
                                                                                 "exact match, argmax drafts"}
    assert "**What this run shows**" in status  # the lossy rule set against Leviathan's, read off the table:
    assert any(f"{word} Leviathan's" in status for word in ("below", "above", "about the same as"))
    assert acceptance.data and tv.data and speed.data
    assert not [c for c in table.columns if "_" in c or c.isdigit()]  # headed in words, no index leaking
    assert "χ² p-value against p" in table.columns and "target's own text" in table.columns
    assert any("typical" in t.name for t in tv.data) and not any("Leviathan" in t.name for t in tv.data)
    assert not [t.name for t in acceptance.data if "_" in t.name]  # rules named in words in the legend


@pytest.mark.parametrize("change, message", [
    (dict(variants=["medusa"]), "rule must be one of"),
    (dict(variants=[]), "pick at least one"),
    (dict(temperatures_text="hot"), "temperatures must be numbers"),
    (dict(temperatures_text="3"), "between 0.01 and 2"),
    (dict(epsilon=1.5), "typical_epsilon must be a number in"),
    (dict(delta=0), "typical_delta must be a number > 0"),
    (dict(lenience=0), "lenience must be a number in"),
])
def test_bad_settings_are_readable_errors(store, change, message):
    h = rules_tab.handlers(store)
    with pytest.raises(gr.Error, match=message):
        last(h.run_rules_lab(**{**LAB, "variants": ["leviathan"], **change}))


@pytest.mark.slow
def test_the_explorer_runs_a_lossy_rule_and_says_what_it_costs(store):
    h = explorer.handlers(store)
    out = last(h.run("ROMEO:", "tiny-target", "tiny", 3, "fixed", 1.0, 0, 1.0, 10, 3, False, None, 0.0, "chain",
                     "auto", "typical"))
    trace, summary, replay = out[0], out[3], out[5]
    assert trace.config.rule == "typical" and "(**lossy**)" in summary and "TV = **" in summary
    assert "Leviathan&#x27;s rule, same u:" in replay  # escaped HTML
    chain = last(h.run("ROMEO:", "tiny-target", "tiny", 3, "fixed", 1.0, 0, 1.0, 10, 3, False, None, 0.0, "chain",
                       "auto", "exact_match+argmax"))
    assert chain[0].config.draft_greedy and "lossless" in chain[3] and "argmax drafts" in chain[3]
    with pytest.raises(gr.Error, match="a token tree is verified with Leviathan's rule"):
        last(h.run("ROMEO:", "tiny-target", "tiny", 3, "fixed", 1.0, 0, 1.0, 10, 3, False, None, 0.0, "3,2",
                   "auto", "typical"))


def test_rule_choices_label_lossy_rules():
    labels = dict(forms.RULE_CHOICES)
    assert labels["typical (lossy)"] == "typical" and labels["leviathan"] == "leviathan"
    assert forms.parse_rule("lenient (lossy)") == ("lenient", False)
    assert forms.parse_rule("exact_match+argmax") == ("exact_match", True)
    with pytest.raises(ValueError, match="unknown acceptance rule"):
        forms.parse_rule("leviathan+sampled")
    assert forms.parse_rule(forms.BLOCK) == ("leviathan", False) and forms.parse_verify(forms.BLOCK) == "block"
    assert forms.parse_verify("leviathan") == "token" and labels["leviathan, the chain verified as one block"]


@pytest.mark.slow
def test_the_explorer_verifies_a_chain_as_one_block_and_says_so(store):
    """Leviathan's rule with the chain as one block: the run's config, the summary's note, the replay's h column and
    block verification's own words for each draft (never min(1, p/q)); greedy runs keep the target's text either way."""
    h = explorer.handlers(store)
    out = last(h.run("ROMEO:", "tiny-target", "tiny", 3, "fixed", 1.0, 0, 1.0, 12, 3, False, None, 0.0, "chain",
                     "auto", forms.BLOCK))
    trace, summary, replay = out[0], out[3], out[5]
    assert (trace.config.rule, trace.config.verify) == ("leviathan", "block") and "as one block" in summary
    assert "h (block)" in replay and "min(1, p/q)" not in replay and "block verification" in replay
    greedy = last(h.run("ROMEO:", "tiny-target", "tiny", 3, "fixed", 0.0, 0, 1.0, 12, 3, False, None, 0.0, "chain",
                        "auto", forms.BLOCK))
    token = last(h.run("ROMEO:", "tiny-target", "tiny", 3, "fixed", 0.0, 0, 1.0, 12, 3, False, None, 0.0, "chain",
                       "auto", "leviathan"))
    assert greedy[0].new_tokens == token[0].new_tokens


@pytest.mark.slow
def test_the_losslessness_lab_refuses_a_lossy_rule_as_correct(store):
    h = lossless_tab.handlers(store)
    args = ("tiny-target", "tiny", "ROMEO:", 0, 0.8, 0, 1.0, 0, 200, 200)
    with pytest.raises(gr.Error, match="typical is lossy"):
        last(h.run_lossless(*args, "typical"))
    status, table, *_ = last(h.run_lossless(*args, "exact_match"))
    assert "draws per variant" in status and len(table) == 3
