"""Drafts side by side: the comparison table against hand counts and references, the disagreement view
against the target's exact softmax, the figures, and the Compare drafts / Batch handlers."""
import os

import gradio as gr
import pandas as pd
import pytest
import torch

from specviz import DecodeConfig, NGramDrafter, NGramModel, PromptLookupDrafter, autoregressive_generate, compare
from specviz.app.batch_tab import MAX_BATCH
from specviz.labs.compare import (
    BASELINE,
    compare_table,
    disagreement,
    disagreement_frame,
    divergence_frame,
    draft_size,
    first_rejection,
    iter_compare,
)
from specviz.views import compare_plots
from tests.helpers.app import handlers, tiny_store
from tests.helpers.models import byte_bpe, last, perturbed, tiny_llama, ui_models

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
TIMINGS = ["tokens_per_s", "baseline_tokens_per_s", "speedup", "speedup_min", "speedup_max", "c"]
PROMPTS = [torch.tensor([[1, 5, 9, 3, 7]]), torch.tensor([[2, 4, 6, 2, 4]])]


@pytest.fixture(scope="module")
def target():
    return tiny_llama(seed=3, sharpen=30)


@pytest.fixture(scope="module")
def drafts(target):
    corpus = torch.randint(0, 64, (400,), generator=torch.Generator().manual_seed(0))
    return {"itself": target, "near": perturbed(target, 0.4), "lookup": PromptLookupDrafter(),
            "ngram": NGramDrafter(NGramModel.fit(corpus, 64, order=2))}


@pytest.mark.slow
def test_draft_equal_to_target_accepts_all_and_others_less(target, drafts):
    table = compare(target, drafts, PROMPTS, DecodeConfig(k=3, temperature=0, max_new_tokens=16)).set_index("draft")
    me = table.loc["itself"]
    assert me.acceptance_rate == 1.0 and me.alpha == 1.0 and me.tau == 4.0  # k + 1 every round: 16 = 4 x 4
    assert [me[f"accept@{i}"] for i in (1, 2, 3)] == [1.0, 1.0, 1.0]
    near = table.loc["near"]
    assert near.acceptance_rate < 1.0 and near.tau < 4.0
    assert near[["accept@1", "accept@2", "accept@3"]].is_monotonic_decreasing  # position i needs 1..i-1 accepted
    assert (table.new_tokens == 2 * 16).all() and list(table.index) == list(drafts)
    assert table.loc["itself", "size"] == sum(p.numel() for p in target.parameters())
    assert table.loc["lookup", "size"] == 0
    ngram = drafts["ngram"].model
    assert table.loc["ngram", "size"] == len(ngram.keys[0]) + len(ngram.keys[1]) > 64
    assert table.baseline_tokens_per_s.nunique() == 1  # one baseline, the same denominator for every draft
    assert table.speedup.tolist() == pytest.approx((table.tokens_per_s / table.baseline_tokens_per_s).tolist())
    assert (table.c > 0).all()


@pytest.mark.slow
def test_same_seed_gives_the_same_rows(target, drafts):
    cfg = DecodeConfig(k=3, temperature=1.0, max_new_tokens=12, seed=11)
    a, b = (compare(target, drafts, PROMPTS[:1], cfg).drop(columns=TIMINGS) for _ in range(2))
    pd.testing.assert_frame_equal(a, b)
    assert a.set_index("draft").loc["near", "alpha"] < 1.0  # a real sampling run, not a trivial one


@pytest.mark.slow
def test_iter_compare_streams_baseline_then_drafts_and_table_grows(target, drafts):
    runs = list(iter_compare(target, drafts, PROMPTS, DecodeConfig(k=2, temperature=0, max_new_tokens=8)))
    assert [(r.draft, r.prompt) for r in runs] == [(d, i) for i in (0, 1) for d in [BASELINE, *drafts]]
    assert compare_table(runs[:1]).empty  # only the baseline so far: no draft rows
    partial = compare_table(runs[:3])
    assert list(partial.draft) == ["itself", "near"] and partial.new_tokens.tolist() == [8, 8]
    with pytest.raises(ValueError, match="no baseline run"):
        compare_table(runs[1:3])
    with pytest.raises(ValueError, match="at least one draft"):
        compare(target, {}, PROMPTS)


@pytest.mark.slow
def test_divergence_is_the_first_rejection(target, drafts):
    cfg = DecodeConfig(k=3, temperature=0, max_new_tokens=20)
    runs = list(iter_compare(target, drafts, PROMPTS[:1], cfg))
    base = runs[0].trace.new_tokens
    div = divergence_frame(runs).set_index("draft")
    assert pd.isna(div.loc["itself", "position"])
    near = next(r.trace for r in runs if r.draft == "near")
    at = first_rejection(near)
    assert at == div.loc["near", "position"] and at is not None
    assert near.new_tokens == base  # greedy: the output is the target's own
    rejected = next(r for r in near.rounds if r.rejected)
    assert rejected.drafted[rejected.n_accepted] != base[at] and rejected.emitted[rejected.n_accepted] == base[at]


def test_disagreement_p_is_the_targets_exact_softmax(target, drafts):
    cfg = DecodeConfig(temperature=0, max_new_tokens=10)
    base = autoregressive_generate(target, PROMPTS[0], cfg)
    frame = disagreement(target, drafts, base, 4, top=4)
    context = torch.tensor([PROMPTS[0][0].tolist() + base.new_tokens[:4]])
    with torch.no_grad():
        exact = torch.softmax(target(context).logits[0, -1].double(), -1)
    assert frame.p.tolist() == pytest.approx(exact[frame.token.tolist()].tolist(), abs=1e-6)
    assert frame.token.iloc[0] == base.new_tokens[4] == int(exact.argmax())  # greedy: the run took p's top token
    assert frame["q itself"].tolist() == pytest.approx(frame.p.tolist(), abs=1e-6)
    assert set(frame["q lookup"]) <= {0.0, 1.0} and frame["q ngram"].between(0, 1).all()
    assert list(frame.columns) == ["token", "text", "p", "q itself", "q near", "q lookup", "q ngram"]
    with pytest.raises(ValueError, match="position must lie in"):
        disagreement(target, drafts, base, 10)


def test_disagreement_frame_by_hand():
    p = torch.tensor([0.5, 0.3, 0.1, 0.1, 0.0])
    qs = {"a": torch.tensor([0.0, 0.0, 0.0, 0.2, 0.8]), "none": torch.zeros(5)}
    frame = disagreement_frame(p, qs, top=2, text=lambda t: "abcde"[t])
    assert frame.token.tolist() == [0, 1, 3, 4]  # p's top 2, then a's top 2, by p descending
    assert frame.text.tolist() == ["'a'", "'b'", "'d'", "'e'"]
    assert frame["q a"].tolist() == pytest.approx([0.0, 0.0, 0.2, 0.8]) and frame["q none"].sum() == 0


@pytest.mark.slow
def test_figures_hold_the_table(target, drafts):
    table = compare(target, drafts, PROMPTS[:1], DecodeConfig(k=3, temperature=0, max_new_tokens=12))
    speed, tau = compare_plots.speedup_bars(table), compare_plots.tau_bars(table)
    assert list(speed.data[0].x) == list(table.draft) and list(speed.data[0].y) == list(table.speedup)
    assert list(tau.data[0].y) == list(table.tau)
    acc = compare_plots.acceptance_by_position(table)
    assert [t.name for t in acc.data] == list(table.draft)
    for trace, (_, row) in zip(acc.data, table.iterrows()):
        assert list(trace.y) == pytest.approx(row[["accept@1", "accept@2", "accept@3"]].astype(float).tolist(),
                                              nan_ok=True)
    frame = disagreement_frame(torch.tensor([0.6, 0.4]), {"a": torch.tensor([0.1, 0.9])}, top=2)
    bars = compare_plots.disagreement_bars(frame)
    assert [t.name for t in bars.data] == ["p (target)", "q a"] and list(bars.data[1].y) == list(frame["q a"])
    assert list(bars.data[0].y) == list(frame.p) and list(bars.data[0].x) == list(frame.text)


def test_draft_size_of_each_kind(target, drafts):
    from specviz.drafts.drafter import ModelDrafter
    from specviz.drafts.hybrid import HybridDrafter

    assert draft_size(ModelDrafter(target)) == draft_size(target) > 0
    assert draft_size(PromptLookupDrafter()) == 0
    table = NGramModel.fit(torch.arange(50) % 7, 64, order=2)
    assert draft_size(HybridDrafter(table, target)) == draft_size(target)  # a hybrid counts its model


@pytest.mark.slow
def test_draft_facts_say_tokenizer_and_extra_memory(target):
    """Extra memory: an LM's parameter bytes, an n-gram's tables, nothing for an early exit or a rule; the
    tokenizer column names a draft with its own tokenizer and the share of the target's vocabulary it holds."""
    from specviz.drafts.cross import CrossDrafter
    from specviz.drafts.early_exit import early_exit
    from specviz.drafts.hybrid import HybridDrafter
    from specviz.drafts.ngram import NGramDrafter
    from specviz.labs.compare import draft_facts

    params = sum(p.numel() for p in target.parameters())
    lm = draft_facts(target)
    assert (lm.tokenizer, lm.size, lm.extra_mib) == ("same", params, params * 8 / 2**20)  # float64 weights
    table = NGramModel.fit(torch.arange(50) % 7, 64, order=2)
    table_mib = sum(t.numel() * t.element_size() for t in [*table.keys, *table.counts, table.unigram]) / 2**20
    assert draft_facts(NGramDrafter(table)).extra_mib == pytest.approx(table_mib)
    assert draft_facts(HybridDrafter(table, target)).extra_mib == pytest.approx(table_mib + lm.extra_mib)
    assert draft_facts(early_exit(target, 1)).extra_mib == 0 == draft_facts(PromptLookupDrafter()).extra_mib
    from specviz.drafts.early_exit import new_adapter  # an exit with an adapter: the adapter is all it adds
    adapter = new_adapter(target, 1)
    adapted = draft_facts(early_exit(target, 1, adapter))
    adapter_params = sum(p.numel() for p in adapter.parameters())
    assert adapted.size == adapter_params and adapted.extra_mib == adapter_params * 8 / 2**20 < lm.extra_mib
    target_tok, draft_tok = byte_bpe(400), byte_bpe(300)
    cross = draft_facts(CrossDrafter(target, draft_tok, target_tok))
    shared = len(set(target_tok.get_vocab()) & set(draft_tok.get_vocab())) / len(target_tok.get_vocab())
    assert cross.tokenizer == f"other ({shared:.0%} shared)" and cross.extra_mib == lm.extra_mib



# -- handlers --------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def pair():
    return ui_models()


@pytest.fixture(scope="module")
def store(pair):
    return tiny_store(pair, drafts={"itself": pair[0]}, default_draft="tiny")


@pytest.mark.slow
def test_compare_handler_streams_each_draft_then_the_disagreement(store, pair):
    h = handlers(store)
    outs = list(h.run_compare("tiny-target", ["tiny", "itself", "prompt-lookup"], "ROMEO:", 3, 0.0, 0, 1.0, 12, 0))
    assert len(outs) == 1 + 3 + 1  # the baseline, each draft, then the disagreement view
    assert [o[2].count('class="sv-compare-run"') for o in outs[:4]] == [1, 2, 3, 4]
    assert outs[0][3].empty and outs[0][4] is None and len(outs[3][3]) == 3
    table = outs[3][3].set_index("draft")
    assert table.loc["itself", "acceptance rate"] == 1.0 and table.loc["itself", "τ (tokens / round)"] == 4.0
    assert table.loc["itself", "target passes / token"] == 0.25  # beside tokens/s: the figure no host moves
    assert "_" not in "".join(map(str, table.columns))  # named in words on the page (the CSV keeps its names)
    state, divergence, slider = outs[-1][0], outs[-1][7], outs[-1][8]
    assert state["drafts"] == ["tiny", "itself", "prompt-lookup"] and len(state["baseline"].new_tokens) == 12
    first = int(divergence.position.dropna().min())
    assert slider.value == first
    note, frame, fig = outs[-1][9:]
    assert f"Position **{first}**" in note and frame.token.iloc[0] == state["baseline"].new_tokens[first]
    note, frame, fig = h.disagree(state, 0)
    assert frame["q itself"].tolist() == pytest.approx(frame.p.tolist(), abs=1e-4) and len(fig.data) == 4


@pytest.mark.slow
def test_compare_handler_passes_draft_stop(store):
    """With draft_stop the draft of itself stops wherever the target's own confidence is below it."""
    h = handlers(store)
    outs = list(h.run_compare("tiny-target", ["itself"], "ROMEO:", 3, 0.0, 0, 1.0, 12, 0, {}, 0.6))
    state, table = outs[-1][0], outs[1][3].set_index("draft")
    assert state["cfg"].draft_stop == 0.6
    assert table.loc["itself", "acceptance rate"] == 1.0 and table.loc["itself", "τ (tokens / round)"] < 4.0  # shorter
    with pytest.raises(gr.Error, match="draft_stop"):
        last(h.run_compare("tiny-target", ["itself"], "ROMEO:", 3, 0.0, 0, 1.0, 12, 0, {}, 1.2))


@pytest.mark.slow
def test_batch_traces_equal_single_prompt_greedy(store, pair, monkeypatch):
    """The handler's rows are speculative_generate_batch's: check them token for token against
    each prompt's greedy decode (captured from the handler's BatchDecoding)."""
    import specviz.app.batch_tab as ui_compare

    big, _, tok = pair
    seen = []
    real = ui_compare.BatchDecoding

    class Spy(real):
        def __iter__(self):
            seen.append(self)
            return super().__iter__()

    monkeypatch.setattr(ui_compare, "BatchDecoding", Spy)
    prompts = ["ROMEO:", "Shall I compare thee", "KING HENRY:\nOnce more"]
    html, rows = last(handlers(store).run_batch("tiny-target", "tiny", "\n\n".join(prompts), 3, 0.0, 0,
                                                             1.0, 9, 0))
    assert html.count('class="sv-batch-row"') == 3 and list(rows.new_tokens) == [9, 9, 9]
    for text, trace in zip(prompts, seen[0].traces):
        want = autoregressive_generate(big, tok(text, return_tensors="pt").input_ids,
                                       DecodeConfig(temperature=0, max_new_tokens=9))
        assert trace.new_tokens == want.new_tokens


@pytest.mark.slow
def test_bench_handler_builds_the_chart(store):
    status, fig, table = handlers(store).run_bench("tiny-target", "tiny", "ROMEO:\n\nTo be", 2)
    assert sorted(table.batch_size.unique()) == [1, 2, 4] and len(table) == 6
    spec = table[table.method == "speculative"].sort_values("batch_size")
    line = next(t for t in fig.data if t.name == "speculative")
    assert list(line.y) == pytest.approx(spec.tokens_per_s.tolist(), abs=1e-3) and "Done in" in status


@pytest.mark.parametrize("call, message", [
    (lambda h: last(h.run_compare("tiny-target", [], "ROMEO:", 3, 0.0, 0, 1.0, 8, 0)), "at least one draft"),
    (lambda h: last(h.run_compare("tiny-target", ["tiny"], "  ", 3, 0.0, 0, 1.0, 8, 0)), "prompt is empty"),
    (lambda h: last(h.run_compare("tiny-target", ["../x"], "ROMEO:", 3, 0.0, 0, 1.0, 8, 0)), "unknown draft"),
    (lambda h: last(h.run_compare("tiny-target", ["tiny"], "ROMEO:", 0, 0.0, 0, 1.0, 8, 0)), r"k must lie in"),
    (lambda h: h.disagree(None, 0), "run a comparison first"),
    (lambda h: last(h.run_batch("tiny-target", "tiny", " \n\n ", 3, 0.0, 0, 1.0, 8, 0)), "at least one prompt"),
    (lambda h: last(h.run_batch("tiny-target", "tiny", "\n\n".join(["a"] * (MAX_BATCH + 1)), 3, 0.0, 0, 1.0, 8, 0)),
     "at most"),
    (lambda h: last(h.run_batch("tiny-target", "tiny", "ROMEO:", 3, 0.0, 0, 1.0, 500, 0)), "context window"),
    (lambda h: h.run_bench("nope", "tiny", "ROMEO:", 2), "unknown target"),
])
def test_bad_input_raises_readable_gr_error(store, call, message):
    with pytest.raises(gr.Error, match=message):
        call(handlers(store))


@pytest.mark.slow
def test_disagree_out_of_range_position(store):
    h = handlers(store)
    state = last(h.run_compare("tiny-target", ["tiny"], "ROMEO:", 3, 0.0, 0, 1.0, 6, 0))[0]
    with pytest.raises(gr.Error, match="position must lie in"):
        h.disagree(state, 6)


@pytest.mark.slow
def test_tabs_are_in_the_app(store):
    from specviz.app import build_demo

    labels = {c.get("props", {}).get("label") for c in build_demo(store).config["components"]}
    assert {"Compare drafts", "Batch"} <= labels


def test_a_feature_draft_gives_its_q_at_a_context():
    """Compare's disagreement reads each draft's q after a context: a feature draft reads the target's own
    features there (attached as the decoder attaches it), and its q is its training unroll's first step."""
    from specviz.drafts.drafter import draft_q
    from specviz.drafts.eagle import FeatureHead, target_features, unroll
    from specviz.drafts.self_drafts import FeatureDrafter
    from specviz.labs.compare import distributions_at

    target = tiny_llama(seed=3, layers=2, sharpen=5)
    torch.manual_seed(0)
    head = FeatureHead(target.config).eval()
    context, cfg = list(range(5, 17)), DecodeConfig(k=3, temperature=1.0)
    p, qs = distributions_at(target, {"feature": FeatureDrafter(head, target)}, context, cfg)
    with torch.no_grad():
        tokens = torch.tensor([context])
        f, _ = target_features(target, tokens)
        step = unroll(head, target, tokens, f, 1)[0]
    torch.testing.assert_close(qs["feature"], draft_q(step[0, -1], cfg, 64), atol=1e-5, rtol=1e-4)


@pytest.mark.slow
def test_the_speedup_chart_has_error_bars_over_the_tables_range():
    import pandas as pd

    from specviz.views import compare_plots

    table = pd.DataFrame(dict(draft=["a", "b"], speedup=[1.2, 0.9], speedup_min=[1.0, 0.9], speedup_max=[1.5, 1.1]))
    bars = compare_plots.speedup_bars(table).data[0]
    assert list(bars.error_y.array) == pytest.approx([0.3, 0.2]) and list(bars.error_y.arrayminus) == pytest.approx([0.2, 0.0])
    assert compare_plots.speedup_bars(table[["draft", "speedup"]]).data[0].error_y.array is None  # no range, no bars


def test_a_lab_table_reads_in_words():
    import pandas as pd

    from specviz.views.tables import readable

    shown = readable(pd.DataFrame(dict(draft=["lite"], size=[12_345_678], extra_mib=[1.23456], tokens_per_s=[42.0])))
    assert list(shown.columns) == ["draft", "size", "extra MiB", "tokens/s"] and shown["size"][0] == "12.3M"
    assert shown["extra MiB"][0] == 1.235
