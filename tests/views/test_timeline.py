"""The timeline: escaping, one class per fate, details with the recorded numbers (shown on hover, click or tap),
visible newlines, rounds numbered from 1."""
import re

import pytest

from specviz import Trace
from specviz.config import DecodeConfig
from specviz.views.timeline import CSS, LEGEND, decision, replay_html, timeline_html
from tests.helpers.traces import EVIL, sample_trace


def spans(html, status):
    return re.findall(rf'<span class="sv-tok sv-{status}"[^>]*data-tip="([^"]*)"', html)


def test_every_token_text_is_escaped():
    html = timeline_html(sample_trace()) + replay_html(sample_trace(), 0)
    assert EVIL not in html and "<b>x</b>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert '"onmouseover' not in html and "&quot;onmouseover=alert(2)" in html
    # no tag in the output other than the ones the timeline writes itself
    assert set(re.findall(r"<(\w+)", html)) <= {"div", "span", "table", "tr", "td", "th", "p", "b", "i", "details",
                                                 "summary"}


def test_each_fate_gets_its_class_and_colour():
    html = timeline_html(sample_trace())
    body = html.split('class="sv-timeline"')[1]  # past the legend
    for status, count in (("prompt", 3), ("accepted", 3), ("rejected", 1), ("discarded", 1), ("resampled", 1),
                          ("bonus", 1)):
        assert len(spans(body, status)) == count, status
        assert re.search(rf"\.sv-{status} \{{[^}}]*background: rgba", CSS), status
    assert "line-through" in CSS.split(".sv-rejected")[1].split("}")[0]
    assert html.count('class="sv-round"') == 2  # round boundaries
    assert all(label in html for label in LEGEND.values())


def test_hover_states_the_decision_with_recorded_numbers():
    body = timeline_html(sample_trace()).split('class="sv-timeline"')[1]
    accepted, rejected = spans(body, "accepted")[0], spans(body, "rejected")[0]
    assert "u = 0.41 &lt; min(1, p/q) = 1: accepted" in accepted
    assert "p = 0.6" in accepted and "q = 0.5" in accepted and "p/q = 1.2" in accepted and "beta = 0.7" in accepted
    assert "u = 0.9 ≥ min(1, p/q) = 0.2: rejected" in rejected
    assert "u = 0.1 &lt; min(1, p/q) = 0.73: accepted" in spans(body, "accepted")[1]
    assert "discarded" in spans(body, "discarded")[0] and "bonus" in spans(body, "bonus")[0]
    assert "residual" in spans(body, "resampled")[0]


def test_greedy_decision_words():
    t = sample_trace(greedy=True)
    assert decision(t.rounds[0], 0, greedy=True) == "draft = target argmax: accepted"
    assert decision(t.rounds[0], 1, greedy=True).startswith("draft ≠ target argmax: rejected")


def test_newlines_are_visible_and_still_break():
    html = timeline_html(sample_trace())
    assert "↵</span>\n" in html
    assert "white-space: pre-wrap" in CSS


def test_replay_lists_the_rounds_proposals_and_what_was_appended():
    html = replay_html(sample_trace(), 0)
    assert html.count("<tr>") == 4  # header + 3 drafts
    assert "0.16" in html and "0.8" in html  # p and q of the rejected draft
    assert "(2 tokens)" in html and "<b>Round 1</b> of 2:" in html  # rounds numbered from 1: round 0 is the first
    assert "<b>Round 2</b> of 2:" in replay_html(sample_trace(), 99)  # clamped to the last round


class FakeTokenizer:
    def decode(self, ids, clean_up_tokenization_spaces=False):
        return f"t{ids[0]}"

    def convert_ids_to_tokens(self, i):
        return f"t{i}"


def test_fill_texts_covers_every_id():
    t = sample_trace()
    t.token_text = {}
    t.fill_texts(FakeTokenizer())
    assert set(t.token_text) == set(t.token_bytes) == {1, 2, 3, 4, 5, 6, 7, 8, 9}  # 8: prompt and residual_top
    assert t.token_text[8] == "t8" and bytes.fromhex(t.token_bytes[8]) == b"t8"


@pytest.mark.slow
@pytest.mark.parametrize("text", ["你好，世界。春眠不觉晓", "fire 🔥🔥 and ice ❄️ 🧊", "Ελληνικά και русский, café"])
def test_multibyte_text_reads_whole_in_the_timeline_frame_and_tree(text):
    """Byte-level BPE splits these characters across tokens: every view shows the characters, never U+FFFD,
    and the texts at their places add up to the decoded text; a trace's JSON keeps the bytes."""
    from transformers import AutoTokenizer

    from specviz import speculative_generate
    from specviz.config import TreeConfig
    from specviz.models import ASSETS
    from tests.helpers.models import perturbed, tiny_llama

    tok = AutoTokenizer.from_pretrained(ASSETS / "tokenizer")
    ids = tok(text, return_tensors="pt").input_ids
    assert any("\ufffd" in tok.decode([i]) for i in ids[0].tolist())  # the case this is about
    target = tiny_llama(vocab=len(tok), seed=2, sharpen=5)
    draft = perturbed(target, 0.5)
    for tree in (None, TreeConfig(shape=(2, 2))):
        trace = speculative_generate(target, draft, ids, DecodeConfig(max_new_tokens=24, seed=3, tree=tree))
        trace.fill_texts(tok)
        texts = trace.texts()
        assert "".join(texts.prompt) == tok.decode(ids[0])
        emitted = "".join(t for r in texts.rounds for t in r.emitted)
        assert "".join(texts.prompt) + emitted == tok.decode(ids[0].tolist() + trace.new_tokens)
        prompt_text = re.sub("<[^>]+>", "", timeline_html(trace).split('class="sv-round"')[0]).replace("◌", "")
        assert "\ufffd" not in prompt_text and text in prompt_text
        back = Trace.from_json(trace.to_json())
        assert back.texts() == texts
        frame = back.to_frame()
        appended = frame[frame.status.isin(["resampled", "bonus"])]
        assert list(appended.text) == [t.emitted[r.n_accepted] for r, t in zip(trace.rounds, texts.rounds)
                                       if (r.resampled if r.resampled is not None else r.bonus) is not None]


def test_replay_says_why_a_round_drafted_fewer_than_k():
    from dataclasses import replace
    trace = sample_trace()
    trace.rounds[1] = replace(trace.rounds[1], k=3, q=(0.5, 0.4))  # 2 of 3 drafted, the last at q = 0.4
    trace.config = DecodeConfig(k=3, draft_stop=0.45)
    assert "Drafting stopped early: the draft gave its last token q = 0.400, below draft_stop = 0.45" in \
        replay_html(trace, 1)
    assert "stopped early" not in replay_html(trace, 0)  # all k drafted
    trace.config = DecodeConfig(k=3)
    assert "stopped early" not in replay_html(trace, 1)  # no stop rule: fewer drafts had another cause


def test_a_tree_rounds_replay_gives_the_trees_size_not_a_k():
    """A tree round's k is its node budget: the replay names the tree's size instead ("a tree of N nodes")."""
    import torch

    from specviz import speculative_generate
    from specviz.config import TreeConfig
    from tests.helpers.models import tiny_llama

    target = tiny_llama(seed=0)
    trace = speculative_generate(target, tiny_llama(seed=1), torch.tensor([[3, 5, 7]]),
                                 DecodeConfig(temperature=0.0, max_new_tokens=6, tree=TreeConfig.parse("2,2")))
    r = trace.rounds[1]
    html = replay_html(trace, 1)
    assert f"a tree of {len(r.tree.nodes)} nodes, {r.n_accepted} accepted" in html and "k = " not in html
    assert "k = " in replay_html(sample_trace(), 0)


def test_a_rounds_details_show_on_hover_click_and_tap_without_a_script():
    """Every drafted and appended token is focusable (a click or tap focuses it, Tab walks them) and carries its
    details in data-tip, which the CSS shows at once on :hover and :focus; no title (the browser's slow tooltip)."""
    html = timeline_html(sample_trace())
    body = html.split('class="sv-timeline"')[1]
    tokens = re.findall(r'<span class="sv-tok sv-(\w+)"([^>]*)>', body)
    assert len(tokens) == 10 and all('tabindex="0"' in attrs and "data-tip=" in attrs for _, attrs in tokens)
    assert "title=" not in html and "<script" not in html
    tip = CSS.split(".sv-tok[data-tip]:hover::after, .sv-tok[data-tip]:focus::after")[1].split("}")[0]
    assert "content: attr(data-tip)" in tip and "transition" not in tip  # at once, from the attribute (text only)
    assert "em" in tip.split("font:")[1].split(";")[0]  # scales with the timeline's type (the presenter view)
    legend = html.split('class="sv-timeline"')[0]
    assert "data-tip" not in legend and "tabindex" not in legend  # the legend's swatches explain themselves


def test_one_token_reads_singular_and_a_round_without_drafts_says_so():
    from dataclasses import replace
    trace = sample_trace()
    trace.rounds[1] = replace(trace.rounds[1], drafted=(), q=(), p=(), accept_prob=(), u=(), beta=(), n_accepted=0,
                              emitted=(9,), bonus=9)
    html = replay_html(trace, 1)
    assert "(1 token)" in html and "(1 tokens)" not in html
    assert "k = 2, nothing drafted" in html and "the target's own token was appended" in html
    bonus = spans(timeline_html(trace).split('class="sv-timeline"')[1], "bonus")
    assert len(bonus) == 1 and "no drafts this round" in bonus[0] and "all 0 drafts" not in bonus[0]
    assert "round 2, position 1" in bonus[0]


def test_compare_and_batch_timelines_share_one_legend():
    from types import SimpleNamespace

    from specviz.views.runs import batch_rows_html, compare_timelines_html

    runs = [SimpleNamespace(draft=name, trace=sample_trace()) for name in ("baseline", *(f"d{i}" for i in range(12)))]
    assert compare_timelines_html(runs, "baseline").count('class="sv-legend"') == 1
    assert compare_timelines_html(runs, "baseline").count('class="sv-timeline"') == 13
    assert batch_rows_html([sample_trace()] * 3, seed=0).count('class="sv-legend"') == 1


def outside_texts(html):
    """The texts of the tokens marked as outside the draft's vocabulary, in order."""
    body = html.split('class="sv-timeline"')[1]
    return re.findall(r'<span class="sv-tok sv-\w+" data-status="\w+" data-outside="1"[^>]*>([^<]*)</span>', body)


def test_only_target_tokens_outside_the_draft_vocabulary_are_marked():
    # round 0 resamples 6 and round 1 ends on bonus 9: with 9 in the draft's vocabulary and 6 not, only 6 is marked
    vocab = frozenset({3, 4, 5, 7, 9})
    html = timeline_html(sample_trace(), vocab=vocab)
    assert outside_texts(html) == [" thou"]  # token 6
    tip = re.search(r'data-outside="1" tabindex="0" data-tip="([^"]*)"', html).group(1)
    assert "round 1, position 2" in tip and tip.endswith(
        "the draft&#x27;s vocabulary does not hold this token: it could never have proposed it")
    assert "1 of the 2 tokens the target chose itself" in html and "vocabulary of 5 tokens" in html
    assert "outside the draft&#x27;s vocabulary" in html.split('class="sv-timeline"')[0]  # the legend's entry
    assert outside_texts(timeline_html(sample_trace(), vocab=frozenset({6, 9}))) == []
    assert outside_texts(timeline_html(sample_trace(), vocab=frozenset())) == [" thou", " love"]
    plain = timeline_html(sample_trace())  # no vocabulary given: nothing marked, no legend entry, no note
    assert "data-outside" not in plain and "could never" not in plain and "chose itself" not in plain
