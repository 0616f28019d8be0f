"""Trace records: hand-computed summaries, the frame, the JSON round trip, malformed input."""
import json
import math
from dataclasses import fields

import pytest

from specviz import Counts, DecodeConfig, PromptLookupDrafter, Round, Trace, speculative_generate


def rnd(index, drafted, n_accepted, emitted, k=None, u=None, beta=None, bonus=None, resampled=None):
    m = len(drafted)
    return Round(index=index, k=m if k is None else k, drafted=tuple(drafted), q=(0.5,) * m, p=(0.25,) * m,
                 accept_prob=(0.5,) * m, u=tuple(u or [None] * m), beta=tuple(beta or [None] * m),
                 n_accepted=n_accepted, emitted=tuple(emitted), resampled=resampled, bonus=bonus, next_p=0.1,
                 residual_top=((7, 0.6, 0.3, 0.1),) if resampled is not None else (), draft_s=0.01, target_s=0.02,
                 wall_s=0.04)


def hand_trace():
    # round 0: 4 drafted, 2 accepted, resample; round 1: 4 drafted, all accepted + bonus; round 2: 2 drafted, 0 accepted
    rounds = [
        rnd(0, [1, 2, 3, 4], 2, [1, 2, 9], u=[0.1, 0.2, 0.9, None], beta=[0.6, 0.5, 0.4, None], resampled=9),
        rnd(1, [5, 6, 7, 8], 4, [5, 6, 7, 8, 10], u=[0.1, 0.1, 0.1, 0.1], beta=[0.9, 0.9, 0.9, 0.9], bonus=10),
        rnd(2, [3, 3], 0, [11], u=[0.99, None], beta=[0.2, None], resampled=11),
    ]
    return Trace(prompt_ids=[0, 1], config=DecodeConfig(), rounds=rounds, total_s=0.5, token_text={1: "a<b"})


def test_summary_by_hand():
    s = hand_trace().summary()
    assert (s.rounds, s.new_tokens, s.drafted, s.accepted) == (3, 9, 10, 6)
    assert s.acceptance_rate == pytest.approx(6 / 10)  # accepted / drafted, not / (k + 1)
    assert s.tau == pytest.approx(9 / 3)
    assert s.alpha == pytest.approx((0.6 + 0.5 + 0.4 + 0.9 * 4 + 0.2) / 8)
    assert s.target_forwards_per_token == pytest.approx(3 / 9)
    assert s.tokens_per_s == pytest.approx(9 / 0.5)
    # position i: rounds with n_accepted > i over rounds that drafted position i
    assert s.per_position == pytest.approx((2 / 3, 2 / 3, 1 / 2, 1 / 2))


def test_frame_rows_and_statuses():
    df = hand_trace().to_frame()
    r0 = df[df["round"] == 0]
    assert r0["status"].tolist() == ["accepted", "accepted", "rejected", "discarded", "resampled"]
    assert df[df.drafted].shape[0] == 10
    assert df[df.status == "bonus"].token.tolist() == [10]
    assert df.loc[0, "ratio"] == pytest.approx(0.5) and df.loc[0, "text"] == "a<b"
    assert (df[df.drafted].status == "accepted").sum() / df.drafted.sum() == hand_trace().summary().acceptance_rate


def test_new_tokens_are_the_rounds_emitted():
    assert hand_trace().new_tokens == [1, 2, 9, 5, 6, 7, 8, 10, 11]


@pytest.mark.slow
def test_json_round_trip_is_lossless(llama, prompt):
    for trace in (hand_trace(), speculative_generate(llama, llama, prompt, DecodeConfig(k=3, max_new_tokens=20)),
                  speculative_generate(llama, PromptLookupDrafter(), prompt, DecodeConfig(temperature=0))):
        back = Trace.from_json(trace.to_json())
        assert back == trace
        assert back.to_frame().equals(trace.to_frame())


@pytest.mark.parametrize("text", ["", "{", "[]", '{"schema": "other"}', json.dumps({"schema": "specviz.trace/1"}),
                                  "\x00\xff garbage"])
def test_malformed_json_is_a_value_error(text):
    with pytest.raises(ValueError, match="trace"):
        Trace.from_json(text)


def test_tampered_round_is_a_value_error():
    data = json.loads(hand_trace().to_json())
    data["rounds"][0]["surprise"] = 1
    with pytest.raises(ValueError, match="unexpected"):
        Trace.from_json(json.dumps(data))
    data = json.loads(hand_trace().to_json())
    data["config"]["k"] = -3
    with pytest.raises(ValueError, match="k must be"):
        Trace.from_json(json.dumps(data))


# -- Counts: what rounds add up to -----------------------------------------------------------------------
def test_counts_by_hand():
    c = hand_trace().counts()
    assert (c.rounds, c.new_tokens, c.drafted, c.accepted, c.target_passes, c.beta_n) == (3, 9, 10, 6, 3, 8)
    assert (c.draft_s, c.target_s, c.total_s) == pytest.approx((0.03, 0.06, 0.5))
    assert c.beta_sum == pytest.approx(0.6 + 0.5 + 0.4 + 4 * 0.9 + 0.2)
    assert c.drafted_at == (3, 3, 2, 2) and c.accepted_at == (2, 2, 1, 1)  # rounds drafting / accepting position i
    assert (c.acceptance_rate, c.alpha, c.tau) == pytest.approx((6 / 10, 5.3 / 8, 9 / 3))
    assert (c.target_forwards_per_token, c.tokens_per_s) == pytest.approx((3 / 9, 9 / 0.5))
    assert c.per_position == pytest.approx((2 / 3, 2 / 3, 1 / 2, 1 / 2))
    assert Counts().acceptance_rate == Counts().alpha == Counts().tokens_per_s == 0.0 and Counts().per_position == ()


def autoregressive_trace():
    # the first round drafted nothing: the prefill served it, no target pass; then one pass a token
    rounds = [rnd(0, [], 0, [4], bonus=4), rnd(1, [], 0, [5], bonus=5), rnd(2, [], 0, [6], bonus=6)]
    return Trace(prompt_ids=[0], config=DecodeConfig(), mode="autoregressive", rounds=rounds, total_s=0.25)


def assert_counts_equal(a: Counts, b: Counts):
    for f in fields(Counts):  # ints exactly, float sums up to rounding
        assert getattr(a, f.name) == pytest.approx(getattr(b, f.name)), f.name


def test_counts_add_as_their_rounds_concatenated():
    a, b = hand_trace(), autoregressive_trace()
    assert b.counts().target_passes == 2
    both = Counts.of(a.rounds + b.rounds, a.total_s + b.total_s)
    assert_counts_equal(a.counts() + b.counts(), both)
    assert_counts_equal(b.counts() + a.counts(), both)  # per-position tuples of different lengths pad
    assert_counts_equal(sum([a.counts(), b.counts()], Counts()), both)
    assert sum([a.counts(), b.counts()]) == a.counts() + b.counts()
    assert Counts() + a.counts() == a.counts()
    assert both.target_passes == 3 + 2 and both.per_position == pytest.approx((2 / 3, 2 / 3, 1 / 2, 1 / 2))


def test_summary_rates_are_the_counts_rates(llama, prompt):
    trace = speculative_generate(llama, llama, prompt, DecodeConfig(k=3, max_new_tokens=20))
    s, c = trace.summary(), trace.counts()
    assert (s.acceptance_rate, s.alpha, s.tau, s.per_position) == (c.acceptance_rate, c.alpha, c.tau, c.per_position)
    assert (s.target_forwards_per_token, s.tokens_per_s, s.drafted, s.total_s) == \
        (c.target_forwards_per_token, c.tokens_per_s, c.drafted, c.total_s)


# -- from_json checks every field: imported traces are rendered into HTML --------------------------------
def tampered(scope: str, field: str, value) -> str:
    data = json.loads(hand_trace().to_json())
    (data["rounds"][0] if scope == "round" else data)[field] = value
    return json.dumps(data)


@pytest.mark.parametrize("scope,field,value,match", [
    ("round", "q", [0.5, 0.5, 0.5], r"rounds\[0\]\.q has 3 entries, drafted has 4"),
    ("round", "p", [0.25] * 5, r"rounds\[0\]\.p has 5 entries, drafted has 4"),
    ("round", "accept_prob", [], r"rounds\[0\]\.accept_prob has 0 entries"),
    ("round", "u", [0.1, 0.2], r"rounds\[0\]\.u has 2 entries"),
    ("round", "beta", [0.6, 0.5, 0.4, None, None], r"rounds\[0\]\.beta has 5 entries"),
    ("round", "n_accepted", 5, r"rounds\[0\]\.n_accepted \(5\) exceeds the drafted tokens \(4\)"),
    ("round", "n_accepted", -1, r"rounds\[0\]\.n_accepted must be an integer in \[0, 2\*\*31\), got int"),
    ("round", "n_accepted", True, r"rounds\[0\]\.n_accepted must be an integer in \[0, 2\*\*31\), got bool"),
    ("round", "k", 3, r"rounds\[0\]\.drafted \(4\) exceeds k \(3\)"),
    ("round", "k", "4", r"rounds\[0\]\.k must be an integer in \[0, 2\*\*31\), got str"),
    ("round", "index", 1.5, r"rounds\[0\]\.index must be an integer in \[0, 2\*\*31\), got float"),
    ("round", "drafted", [1, "<script>", 3, 4], r"rounds\[0\]\.drafted must be a list of token ids, got list"),
    ("round", "emitted", [1, 2.0, 9], r"rounds\[0\]\.emitted must be a list of token ids"),
    ("round", "q", [0.5, "<b>x</b>", 0.5, 0.5], r"rounds\[0\]\.q must be a list of finite numbers, got list"),
    ("round", "u", [0.1, 0.2, "0.9", None], r"rounds\[0\]\.u must be a list of finite numbers or nulls"),
    ("round", "resampled", "9", r"rounds\[0\]\.resampled must be a token id or null, got str"),
    ("round", "next_p", None, r"rounds\[0\]\.next_p must be a finite number, got NoneType"),
    ("round", "residual_top", [[7, "<img>", 0.3, 0.1]], r"rounds\[0\]\.residual_top must be a list of \[token"),
    ("round", "residual_top", [[7, 0.6, 0.3]], r"rounds\[0\]\.residual_top must be"),
    ("trace", "mode", "<img src=x onerror=alert(1)>", r"mode must be one of \('speculative', 'autoregressive'\)"),
    ("trace", "stop_reason", "crashed", r"stop_reason must be one of \('eos', 'length', 'budget', ''\), got str"),
    ("trace", "target_name", ["<b>"], r"target_name must be a string of valid Unicode of at most 256 characters, got list"),
    ("trace", "draft_name", 3, r"draft_name must be a string of valid Unicode of at most 256 characters, got int"),
    ("trace", "prompt_ids", [0, "1"], r"prompt_ids must be a list of at most 32768 token ids"),
    ("trace", "eos_token_ids", 2, r"eos_token_ids must be a list of token ids, got int"),
    ("trace", "token_text", {"one": "a"}, r"token_text must be an object \{\"token id\": \"text\"\}"),
    ("trace", "token_text", {"1": 5}, r"token_text must be an object"),
    ("trace", "total_s", "fast", r"total_s must be a finite number, got str"),
    ("trace", "rounds", {"0": {}}, r"rounds must be a list of objects, got dict"),
    ("trace", "rounds", [[]], r"rounds must be a list of objects, got list"),
    ("trace", "config", [], r"config must be an object of valid Unicode and numbers below 2\*\*63, got list"),
])
def test_from_json_rejects_a_bad_field_naming_it(scope, field, value, match):
    with pytest.raises(ValueError, match="malformed trace JSON: " + match) as info:
        Trace.from_json(tampered(scope, field, value))
    assert "<" not in str(info.value)  # the value itself is never echoed: it may be markup


def test_from_json_requires_the_trace_fields():
    data = json.loads(hand_trace().to_json())
    del data["rounds"]
    with pytest.raises(ValueError, match=r"missing \['rounds'\]"):
        Trace.from_json(json.dumps(data))
    del data["token_text"], data["stop_reason"]  # optional fields take their defaults
    data["rounds"] = []
    assert Trace.from_json(json.dumps(data)).stop_reason == ""
    data["config"]["record"] = "<yes>"
    with pytest.raises(ValueError, match="record must be True or False, got str"):
        Trace.from_json(json.dumps(data))


def test_unrecorded_traces_round_trip(llama, prompt):
    """record=False keeps no per-token lists: empty lists are then the schema, and the round trip is lossless."""
    trace = speculative_generate(llama, llama, prompt, DecodeConfig(k=3, max_new_tokens=10, record=False))
    assert all(r.drafted and r.q == () for r in trace.rounds)
    assert Trace.from_json(trace.to_json()) == trace


def test_deeply_nested_json_is_a_readable_error():
    with pytest.raises(ValueError, match="malformed trace JSON"):
        Trace.from_json('{"baseline": ' + "[" * 100_000 + "]" * 100_000 + "}")


def test_a_number_of_thousands_of_digits_is_a_readable_refusal():
    """Python refuses to read an integer of over 4,300 digits; the trace import says what was wrong in its own words."""
    with pytest.raises(ValueError, match="malformed trace JSON: a number with thousands of digits"):
        Trace.from_json('{"schema": 1, "prompt_ids": [' + "9" * 5000 + "]}")


# -- the schema admits exactly what each kind's condition, written out here, admits ------------------------------
def _count(v):
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**31


def _number(v):
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return False
    return abs(v) < 2**63 if isinstance(v, int) else math.isfinite(v)


def _text(v):
    try:
        return isinstance(v, str) and len(v) <= 256 and bool(v.encode("utf-8") or True)
    except UnicodeEncodeError:
        return False


def _id_key(v):
    return isinstance(v, str) and v.isascii() and v.isdigit() and len(v) < 11


def _hex(v):
    return isinstance(v, str) and len(v) <= 256 and len(v) % 2 == 0 and all(c in "0123456789abcdef" for c in v)


KIND_CASES = {  # (where the value goes in the hand trace's JSON, its condition)
    "count": (lambda d, v: d["rounds"][0].update(index=v), _count),
    "id?": (lambda d, v: d["rounds"][0].update(bonus=v), lambda v: v is None or _count(v)),
    "number": (lambda d, v: d.update(total_s=v), _number),
    "string": (lambda d, v: d.update(target_name=v), _text),
    "ids": (lambda d, v: d.update(eos_token_ids=[2, v]), _count),
    "prompt": (lambda d, v: d.update(prompt_ids=[v, 1]), _count),
    "numbers": (lambda d, v: d["rounds"][0].update(q=[0.5, v, 0.5, 0.5]), _number),
    "numbers?": (lambda d, v: d["rounds"][0].update(u=[0.5, v, 0.5, None]), lambda v: v is None or _number(v)),
    "mode": (lambda d, v: d.update(mode=v), lambda v: v in ("speculative", "autoregressive")),
    "stop_reason": (lambda d, v: d.update(stop_reason=v), lambda v: v in ("eos", "length", "budget", "")),
    "token_text": (lambda d, v: d.update(token_text={"1": v}), _text),
    "token_text key": (lambda d, v: d.update(token_text={v: "a"}) if isinstance(v, str) else None, _id_key),
    "token_bytes": (lambda d, v: d.update(token_bytes={"1": v}), _hex),
    "residual_top": (lambda d, v: d["rounds"][0].update(residual_top=[[7, v, 0.3, 0.1]]), _number),
    "residual_top token": (lambda d, v: d["rounds"][0].update(residual_top=[[v, 0.6, 0.3, 0.1]]), _count),
}
KIND_VALUES = [0, 1, -1, 2**31 - 1, 2**31, 2**63 - 1, 2**63, -(2**63) + 1, -(2**63), 10**400, 0.5, -0.5, 1e308,
               math.inf, -math.inf, math.nan, True, False, None, "", "1", "0123456789", "01234567890", "\u0661",
               "a" * 256, "a" * 257, "\ud800", "é", "ab", "abc", "AB", "00" * 128, "00" * 129, "eos", "speculative",
               [1], {"a": 1}, "<b>x</b>"]


@pytest.mark.parametrize("kind", sorted(KIND_CASES))
def test_each_kind_admits_exactly_what_its_condition_admits(kind):
    put, admits = KIND_CASES[kind]
    for value in KIND_VALUES:
        if kind == "token_text key" and not isinstance(value, str):
            continue  # a JSON object's key is a string
        data = json.loads(hand_trace().to_json())
        put(data, value)
        try:
            Trace.from_json(json.dumps(data))
            admitted = True
        except ValueError as e:
            admitted = False
            assert "<" not in str(e) and "input_value" not in str(e), str(e)
        assert admitted == admits(value), f"{kind}: {value!r:.40} admitted {admitted}"


ROUND_NAMES = [n for n in json.loads(hand_trace().to_json())["rounds"][0]]
TRACE_NAMES = [n for n in json.loads(hand_trace().to_json()) if n != "schema"]


@pytest.mark.parametrize("scope, name", [("round", n) for n in ROUND_NAMES] + [("trace", n) for n in TRACE_NAMES])
@pytest.mark.parametrize("hostile", ["<script>alert(1)</script>" + "x" * 10_000, [{"<img src=x>": 1}]])
def test_a_hostile_value_anywhere_is_refused_naming_its_field_only(scope, name, hostile):
    with pytest.raises(ValueError) as caught:
        Trace.from_json(tampered(scope, name, hostile))
    said = str(caught.value)
    where = f"rounds[0].{name}" if scope == "round" else name
    assert said.startswith(f"malformed trace JSON: {where}"), said  # rounds: its first round's fields differ
    assert "<" not in said and "alert" not in said and "input_value" not in said and len(said) < 300, said


def test_a_config_field_no_decode_config_has_is_refused():
    data = json.loads(hand_trace().to_json())
    data["config"]["temperatur"] = 0.5
    with pytest.raises(ValueError, match=r"malformed trace JSON: config fields differ: missing \[\], "
                                         r"unexpected \['temperatur'\]"):
        Trace.from_json(json.dumps(data))


def test_a_baseline_is_checked_as_the_trace_is():
    base = json.loads(hand_trace().to_json())
    base["rounds"][1]["tree"] = {"nodes": [{"parent": -1}], "path": [], "children": "top"}
    data = json.loads(hand_trace().to_json()) | {"baseline": base}
    with pytest.raises(ValueError, match=r"baseline\.rounds\[1\]\.tree\.nodes\[0\]\.fields differ: missing \['accept"):
        Trace.run_from_json(json.dumps(data))
