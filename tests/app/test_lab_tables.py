"""What a lab's table shows a reader: headers in words (no snake_case, no pandas index, no Gradio placeholder
headers 1 2 3 before the first run) and sizes as 1.2M / 340k."""
import gradio as gr
import pandas as pd
import pytest

from specviz.app import rules_tab, temperature_tab, tree_tab
from specviz.labs import rules, temperature
from specviz.views import tables


def test_readable_names_columns_in_words_and_drops_a_bare_index():
    frame = pd.DataFrame({"alpha_fixed": [0.12345], "size": [1_234_567], "mc_p_vs_p": [0.5]}, index=[7])
    out = tables.readable(frame)
    assert list(out.columns) == ["α (fixed contexts)", "size", "χ² p-value against p"]
    assert out["size"].tolist() == ["1.2M"] and out.iloc[0, 0] == 0.123 and list(out.index) == [0]
    named = tables.readable(pd.DataFrame({"tau": [2.0]}, index=pd.Index(["chain"], name="setting")))
    assert list(named.columns) == ["setting", "τ (tokens / round)"]  # a named index is a column of its own


def test_every_lab_column_has_words_for_a_header():
    lossless = ["variant", "draws", "tv_to_p", "chi2_p"]
    compare = ["draft", "prompt", "position", "drafted", "target_put"]
    advice = ["k", "tokens_iid", "tokens_iid_low", "tokens_iid_high"]
    for columns in (temperature.COLUMNS, rules.COLUMNS, lossless, compare, advice):
        assert not [h for h in tables.headers(columns) if "_" in h], columns


def test_a_rule_lab_table_names_its_rules_in_words():
    out = tables.readable(pd.DataFrame({"rule": ["point_mass", "exact_match+argmax", "typical"], "tv_closed": [0, 0, 1]}))
    assert list(out.rule) == ["point mass", "exact match, argmax drafts", "typical (lossy)"]


def _tables_of(build, store) -> list[list[str]]:
    with gr.Blocks() as demo:
        build(store)
    return [block.value["headers"] for block in demo.blocks.values() if isinstance(block, gr.Dataframe)]


@pytest.mark.slow
def test_a_labs_table_before_its_first_run_is_headed_in_words(store):
    for build in (temperature_tab.build, rules_tab.build, tree_tab.build):
        for headers in _tables_of(build, store):
            assert headers and headers != ["1", "2", "3"] and not [h for h in headers if h.isdigit() or "_" in h], \
                (build.__module__, headers)
