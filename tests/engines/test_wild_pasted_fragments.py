"""Real excerpts pasted as fragments (fixtures/wild/): a bench result's JSON members without their braces, a log's
fields without their counts, an example summary of an older version, lines of concurrent API servers. Each is read
and compared with the numbers its source printed, or refused naming what it lacks."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from specviz.engines.read import read_engine_run
from specviz.engines.run import rates
from specviz.engines.unwrap import clean

WILD = Path(__file__).parent / "fixtures" / "wild"
MANIFEST = {e["file"]: e for e in json.loads((WILD / "manifest.json").read_text())}


def rate(run, name: str) -> float:
    return next(r.value for r in rates(run) if r.name == name)


@pytest.mark.parametrize("name", ["vllm-ascend-bench-result-keys-8.txt", "vllm-ascend-bench-result-keys-9.txt"])
def test_bench_result_members_pasted_as_a_markdown_list_read_as_the_json(name):
    figures = MANIFEST[name]["figures"]
    run = read_engine_run(WILD / name)
    assert run.source == "vllm bench serve result JSON"
    assert (run.steps, run.drafted, run.accepted) == (figures["spec_decode_num_drafts"],
                                                      figures["spec_decode_draft_tokens"],
                                                      figures["spec_decode_accepted_tokens"])
    assert run.k == 3  # three per-position rates; draft tokens / drafts = 71925 / 23975 = 60981 / 20327 = 3
    assert rate(run, "acceptance rate") * 100 == pytest.approx(figures["spec_decode_acceptance_rate"], abs=1e-9)
    assert rate(run, "mean acceptance length") == pytest.approx(figures["spec_decode_acceptance_length"], abs=1e-9)
    # rate x drafts: 0.7734306569343066 x 23975 = 18543, 0.5592075078206465 x 23975 = 13407, ... = 9620
    assert [a / run.steps for a in run.accepted_per_pos] == pytest.approx(
        figures["spec_decode_per_position_acceptance_rates"], abs=1e-12)
    assert any("without their object's braces" in note for note in run.notes)


def test_the_first_bench_result_has_these_per_position_counts():
    run = read_engine_run(WILD / "vllm-ascend-bench-result-keys-8.txt")
    assert run.accepted_per_pos == (18543, 13407, 9620)  # sum 41570 = spec_decode_accepted_tokens


def test_json_members_are_braced_only_when_every_line_is_one():
    members = '- "spec_decode_num_drafts": 3\n- "spec_decode_accepted_tokens": **2**\n'
    text, what = clean(members)
    assert json.loads(text) == {"spec_decode_num_drafts": 3, "spec_decode_accepted_tokens": 2} and what
    for other in (members + "Some prose after the list\n", '"a": 1\n"a": 2\n', '- "a": [1, 2\n',
                  "- Accepted: 3 tokens\n", '{"a": 1}\n'):
        assert clean(other) == (other, ""), other


def test_two_api_servers_lines_in_one_second_add_up():
    """Each APIServer pid aggregates its own engine: the two lines are concurrent and their counts add."""
    run = read_engine_run(WILD / "vllm-ascend-specdecoding-api-servers-8.txt")
    assert (run.accepted, run.drafted, run.k) == (474 + 418, 624 + 561, 3)
    assert run.steps == 624 // 3 + 561 // 3 == 395
    assert run.accepted_per_pos == (195 + 164, 160 + 140, 119 + 114)  # 0.938 x 208 = 195.1, 0.877 x 187 = 164.0, ...
    assert [round(rate(part, "mean acceptance length"), 2) for part in run.series] == [3.28, 3.24]
    assert [part.load.gen_tps for part in run.series] == [68.2, 60.2]


def test_gemma4_mtp_intervals_read_around_an_http_line():
    run = read_engine_run(WILD / "vllm-v1-specdecoding-gemma4-mtp-12.txt")
    assert (run.accepted, run.drafted, run.steps, run.k) == (40, 5376, 913 + 431, 4)
    assert run.accepted_per_pos == (40, 0, 0, 0)  # 0.027 x 913 = 25, 0.035 x 431 = 15
    assert [f"{100 * rate(part, 'acceptance rate'):.1f}%" for part in run.series] == ["0.7%", "0.9%"]


def test_speculative_simple_with_eagle3_reads_its_summary():
    run = read_engine_run(WILD / "llamacpp-speculative-simple-eagle3-6.txt")
    assert (run.drafted, run.accepted, run.k, run.emitted) == (112, 36, 8, 136)
    assert run.steps == 136 - 36  # n_predict gains accepted + 1 a verify step
    assert f"{100 * rate(run, 'acceptance rate'):.3f}%" == "32.143%"


def test_print_timing_lines_without_their_prefix_read_as_a_server_log():
    run = read_engine_run(WILD / "llamacpp-server-timing-pair-8.txt")
    assert (run.accepted, run.drafted, run.emitted, run.steps) == (764, 833, 1598, None)
    assert round(rate(run, "acceptance rate"), 5) == 0.91717


@pytest.mark.parametrize(("name", "says"), [
    ("vllm-v1-specdecoding-fields-only-12.txt", ["'SpecDecoding metrics' line without its counts",
                                                 "'Accepted: N tokens, Drafted: M tokens'"]),
    ("vllm-eagle-example-bonus-at-0-6.txt", ["offline example summary", "'acceptance at token 0' is 1.00",
                                             "drafts are positions 1 and on"]),
    ("llamacpp-server-adaptive-depth-cumulative-7.txt", ["cur_accepted=8381, cur_generated=11488",
                                                         "not read as the run's counts"]),
])
def test_fragments_without_counts_are_refused_saying_what_they_lack(name, says):
    with pytest.raises(ValueError) as refused:
        read_engine_run(WILD / name)
    message = str(refused.value).splitlines()[0]
    assert all(part in message for part in says), message


def test_a_later_example_summary_cut_to_its_positions_is_not_called_the_early_one():
    text = "mean acceptance length: 2.46\nacceptance at token 0: 0.77\nacceptance at token 1: 0.45\n"
    with pytest.raises(ValueError) as refused:
        read_engine_run(text)
    message = str(refused.value).splitlines()[0]
    assert "offline example summary" in message and "is 1.00" not in message
