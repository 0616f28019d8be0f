"""The timeline: escaping, one class per fate, hover text with the recorded numbers, visible newlines."""
import re

from specviz.config import DecodeConfig
from specviz.views.timeline import CSS, LEGEND, decision, fill_token_text, replay_html, timeline_html
from tests.helpers.traces import EVIL, sample_trace


def spans(html, status):
    return re.findall(rf'<span class="sv-tok sv-{status}"[^>]*title="([^"]*)"', html)


def test_every_token_text_is_escaped():
    html = timeline_html(sample_trace()) + replay_html(sample_trace(), 0)
    assert EVIL not in html and "<b>x</b>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert '"onmouseover' not in html and "&quot;onmouseover=alert(2)" in html
    # no tag in the output other than the ones the timeline writes itself
    assert set(re.findall(r"<(\w+)", html)) <= {"div", "span", "table", "tr", "td", "th", "p", "b", "i"}


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
    assert "(2 tokens)" in html
    assert "Round 1" in replay_html(sample_trace(), 99)  # clamped to the last round


class FakeTokenizer:
    def decode(self, ids, clean_up_tokenization_spaces=False):
        return f"t{ids[0]}"


def test_fill_token_text_covers_every_id():
    t = sample_trace()
    t.token_text = {}
    fill_token_text(t, FakeTokenizer())
    assert set(t.token_text) == {1, 2, 3, 4, 5, 6, 7, 8, 9}  # 8: prompt and residual_top
    assert t.token_text[8] == "t8"


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
