"""The "Is it exact?" panel: a card the kit wrote, read back with its verdict, power, tests and chart; the same
tests recomputed from its samples; the negative control caught at the card's N; every bad upload a readable
gr.Error, and the next call still works."""
import json

import gradio as gr
import pytest

from specviz.app import engine_exact as ex
from specviz.app.budget import Budget
from specviz.conformance import run
from specviz.serve import Engine, table_pair
from specviz.trace import MAX_TRACE_BYTES
from specviz.views.engine_report import md

N = 200  # per mode: enough for the typical rule's bias on the table pair (the kit flags it at 200 and at 500)


def kit_run(folder, rule: str):
    """The kit against the table pair served with ``rule``, in this process, its files written to ``folder``."""
    return run(ex.Served(Engine(*table_pair(), rule=rule), Budget(600)), [[1]], n=N, out_dir=folder, greedy_tokens=6)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = {}
    for rule in ("typical", "leviathan"):
        folder = tmp_path_factory.mktemp(rule)
        out[rule] = (kit_run(folder, rule), folder)
    return out


@pytest.fixture(scope="module")
def h():
    return ex.handlers()


@pytest.mark.slow
def test_a_flagged_card_read_back(h, runs):
    card, folder = runs["typical"]
    text, figure, plan = h.read_exact(str(folder / "card.json"), None)
    flagged = card.tests[card.tests.flagged]
    assert card.verdict == "flag" and len(flagged) > 0
    tested = int(card.tests.tested.sum())
    assert text.startswith(f"### Is it exact? **flag**: {len(flagged)} of {tested} tests flagged")
    assert "*read from card.json*" in text and md(card.power_sentence()) in text
    assert f"N = {N} per mode" in text and "T = 0.6, top-k 3, top-p 1, min-p 0" in text
    first = flagged.iloc[0]  # the table lists the flagged rows, each with the card's own figures
    assert f"| {first.position} | {first.kind} | {first.n_on} | {first.n_off} | {first.categories} | " in text
    assert f"{first.p_holm:.3g}" in text
    acc = card.acceptance
    assert f"{acc['accepted']:,} of {acc['drafted']:,} drafts ({acc['accepted'] / acc['drafted']:.1%})" in text
    assert "#### Greedy (T = 0)" in text
    bars = sum(len(trace.x) for trace in figure.data)
    assert bars == tested  # one bar per tested row
    assert plan == dict(n=N, n_predict=4, setting=dict(temperature=0.6, top_k=3, top_p=1.0, min_p=0.0), alpha=0.05)


@pytest.mark.slow
def test_the_samples_give_the_cards_tests_again(h, runs):
    card, folder = runs["leviathan"]
    text, _, plan = h.read_exact(None, [str(folder / "samples-off.jsonl"), str(folder / "samples-on.jsonl")])
    assert card.verdict == "pass" and text.startswith("### Is it exact? **pass**: none of")
    assert "*recomputed here from the samples*" in text and "No greedy check on this card" in text
    for row in card.tests[card.tests.tested].itertuples():  # every tested row's Holm p-value, as the card has it
        assert f"| {row.position} | {row.kind} | {row.n_on} | {row.n_off} | {row.categories} | {row.pvalue:.3g} | " \
               f"{row.p_holm:.3g} |" in text
    assert plan["n"] == N


@pytest.mark.slow
def test_the_negative_control_is_caught_at_the_cards_n(runs):
    plan = ex.control_plan(runs["leviathan"][0].to_json())
    result = ex.negative_control(plan, "typical", Budget(600))
    assert (result["n"], result["capped"], result["n_predict"]) == (N, False, 4)
    assert result["cards"]["typical"]["verdict"] == "flag"
    text = ex.report.control_markdown(result)
    assert text.startswith("#### Negative control: caught") and f"N = {N} per mode (the card's N)" in text
    assert "With Leviathan's rule (exact): **" + result["cards"]["leviathan"]["verdict"] + "**" in text


@pytest.mark.slow
def test_the_control_is_refused_up_front_over_the_budget(runs):
    plan = ex.control_plan(runs["typical"][0].to_json()) | dict(n=2000)
    with pytest.raises(ValueError, match=r"the negative control at N = 2,000 per mode would take about"):
        ex.negative_control(plan, "typical", Budget(0.5))


def card_json(runs) -> dict:
    return json.loads((runs["typical"][1] / "card.json").read_text())


def sample_lines(runs, mode: str) -> list[dict]:
    return [json.loads(line) for line in (runs["typical"][1] / f"samples-{mode}.jsonl").read_text().splitlines()]


def write(tmp_path, name: str, data) -> str:
    path = tmp_path / name
    if isinstance(data, bytes):
        path.write_bytes(data)
    elif isinstance(data, list):
        path.write_text("\n".join(json.dumps(x) for x in data) + "\n")
    else:
        path.write_text(json.dumps(data))
    return str(path)


def tampered(runs, **change) -> dict:
    card = card_json(runs)
    for key, value in change.items():
        if key == "row":
            card["tests"][value[0]] |= value[1]
        else:
            card[key] = value
    return card


BAD_CARDS = {  # case: (the card's bytes or JSON, words the message must hold)
    "not json": (b"{not json", ["card.json is not a card.json (not JSON"]),
    "not a card": ({"verdict": "pass"}, ["is not a conformance card: it lacks info, settings, n"]),
    "verdict edited": ("verdict", ["says 'pass' but its own rows say 'flag'"]),
    "flag edited": ("row", ["is marked flagged=False with Holm's p"]),
    "position": ("position", ["position must be 1 to 64, got 999"]),
    "too many rows": ("rows", ["'tests' must be a list of 1 to 1,000 rows"]),
    "huge": (b" " * (MAX_TRACE_BYTES + 1), ["card.json is 4.0 MiB; at most 4 MiB"]),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", BAD_CARDS)
def test_a_bad_card_is_a_readable_error_and_the_next_read_works(h, runs, tmp_path, case):
    data, words = BAD_CARDS[case]
    flagged = next(i for i, t in enumerate(card_json(runs)["tests"]) if t["flagged"])
    if isinstance(data, str):  # a card the kit wrote, edited
        data = {"verdict": lambda: tampered(runs, verdict="pass"),
                "row": lambda: tampered(runs, row=(flagged, dict(flagged=False))),
                "position": lambda: tampered(runs, row=(0, dict(position=999))),
                "rows": lambda: tampered(runs, tests=card_json(runs)["tests"] * 200)}[data]()
    with pytest.raises(gr.Error) as info:
        h.read_exact(write(tmp_path, "card.json", data), None)
    assert all(word in str(info.value) for word in words), str(info.value)
    assert str(tmp_path) not in str(info.value)
    assert h.read_exact(str(runs["typical"][1] / "card.json"), None)[0].startswith("### Is it exact? **flag**")


@pytest.mark.slow
def test_bad_samples_are_readable_errors(h, runs, tmp_path):
    on, off = sample_lines(runs, "on"), sample_lines(runs, "off")
    cases = [
        ([("samples-on.jsonl", on)], "upload the two sample files"),
        ([("a.jsonl", on), ("b.jsonl", on)], "upload the two sample files"),
        ([("on.jsonl", on), ("off.jsonl", off[:10])], "too few samples: 10 with speculation off"),
        ([("on.jsonl", on), ("off.jsonl", [dict(x, setting="other") for x in off])], "different settings or prompts"),
        ([("on.jsonl", on[:5] + [{"mode": "on"}]), ("off.jsonl", off)], "on.jsonl: line 6 lacks engine"),
        ([("on.jsonl", [dict(x, n_predict=10**9) for x in on]), ("off.jsonl", [dict(x, n_predict=10**9) for x in off])],
         "n_predict must be a whole number from 2 to 64"),
        ([("on.jsonl", b"\x00\x01"), ("off.jsonl", off)], "on.jsonl: its first line is not one of the kit's"),
    ]
    for files, words in cases:
        paths = [write(tmp_path, name, data) for name, data in files]
        with pytest.raises(gr.Error) as info:
            h.read_exact(None, paths)
        assert words in str(info.value) and str(tmp_path) not in str(info.value), str(info.value)
    with pytest.raises(gr.Error, match="nothing to read"):
        h.read_exact(None, None)
    with pytest.raises(gr.Error, match="read a card"):
        h.exact_control(None, "typical")


@pytest.mark.slow
def test_a_cards_strings_are_inert(h, runs, tmp_path):
    card = card_json(runs)
    card["info"]["engine"] = "<script>alert(1)</script> [x](http://y)"
    card["greedy"][0]["kind"] = "<b>near</b>"
    text = h.read_exact(write(tmp_path, "card.json", card), None)[0]
    assert "<script>" not in text and "[x]" not in text and "<b>" not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt; &#91;x&#93;(http&#58;//y)" in text


def test_the_recorded_llamacpp_card_reads_in_the_panel(h):
    from pathlib import Path

    folder = Path(__file__).resolve().parents[1] / "conformance" / "fixtures" / "llamacpp"
    card = json.loads((folder / "card.json").read_text())
    text, figure, plan = h.read_exact(str(folder / "card.json"), None)
    assert text.startswith(f"### Is it exact? **{card['verdict']}**") and md(card["power"]) in text
    assert f"N = {card['n']:,} per mode" in text and md(card["info"]["engine"]) in text
    assert sum(len(trace.x) for trace in figure.data) == sum(t["tested"] for t in card["tests"])
    assert plan["n"] == card["n"] and plan["setting"]["temperature"] == 0.8
