"""Engine output pasted the way a terminal, a container runner or an issue tracker shows it reads as the output
itself: every excerpt of fixtures/wild/ that reads with every figure right still does, figure by figure, after
colour codes, Windows line ends, docker compose / kubectl / timestamp prefixes, a Markdown quote or a code fence
with prose around it are put around it (specviz.engines.unwrap). What was removed is said in the run's notes."""
from __future__ import annotations

import pytest

from specviz.engines.read import read_engine_run, read_reported
from specviz.engines.unwrap import clean
from tests.helpers.wild import COUNTED, WILD, read_wrong, wrong_figures


def crlf(text):
    return text.replace("\n", "\r\n")


def prefixed(prefix):
    return lambda text: "".join(prefix + line for line in text.splitlines(True))


def coloured(text):
    return "".join("\x1b[32m" + line.rstrip("\n") + "\x1b[0m\n" for line in text.splitlines(True))


def fenced(text):
    return "Here is what it prints:\n```text\n" + text.rstrip("\n") + "\n```\nAny idea why?\n"


def nested(text):  # a quoted docker compose log with timestamps, coloured
    return prefixed("> ")(prefixed("vllm-1  | ")(prefixed("2026-05-08T16:26:29.123456789Z ")(coloured(text))))


WRAPS = {"crlf": crlf, "docker compose": prefixed("vllm-1  | "), "kubectl": prefixed("[pod/vllm-0/vllm] "),
         "timestamps": prefixed("2026-05-08T16:26:29.123456789Z "), "quote": prefixed("> "), "colour": coloured,
         "fence": fenced, "nested": nested}
RIGHT = [e for e in COUNTED if not read_wrong(e)]


@pytest.mark.parametrize("wrap", WRAPS, ids=list(WRAPS))
def test_every_excerpt_read_right_stays_right_when_wrapped(wrap):
    assert len(RIGHT) >= 40
    wrong = {}
    for entry in RIGHT:
        try:
            found = wrong_figures(entry, read_engine_run(WRAPS[wrap]((WILD / entry["file"]).read_text())))
        except ValueError as refused:
            found = [f"refused: {str(refused).splitlines()[0][:160]}"]
        if found:
            wrong[entry["file"]] = found[0]
    assert not wrong, wrong


def test_what_was_removed_is_said():
    text = (WILD / "vllm-v1-specdecoding-http-lines-11.txt").read_text()
    run = read_engine_run(nested(text))
    note = next(n for n in run.notes if n.startswith("read after removing"))
    for part in ("colour codes", "Markdown quote", "docker compose", "RFC 3339"):
        assert part in note, note
    assert not any(n.startswith("read after removing") for n in read_engine_run(text).notes)


@pytest.mark.parametrize("text", [
    "| model | size | t/s |\n| --- | --- | --- |\n| llama 8B | 4.6 GiB | 120.1 |\n",  # a table: no column taken
    "vllm:spec_decode_num_drafts_total{engine=\"0\"} | 7\nvllm:spec_decode_num_drafts_total{engine=\"1\"} | 9\n",
    "(APIServer pid=1) INFO 05-08 16:26:29 [metrics.py:101] SpecDecoding metrics: Accepted: 1 tokens\n",
    "[53409] draft acceptance rate = 0.81944 (  118 accepted /   144 generated)\n",
])
def test_an_engines_own_line_prefix_is_not_taken_for_a_wrapper(text):
    assert clean(text) == (text, "")


def test_a_prefix_only_some_lines_carry_is_kept():
    text = "vllm-1  | INFO SpecDecoding metrics: Accepted: 1 tokens\nINFO another line\n"
    assert clean(text) == (text, "")


@pytest.mark.parametrize("name", ["sglang-decode-batch-accept-rate-1.txt", "trtllm-bench-acceptance-length-2.txt",
                                  "sglang-bench-serving-accept-length-1.txt"])
def test_outputs_read_as_means_read_the_same_when_wrapped(name):
    """read_reported's means (SGLang Decode batch, trtllm-bench, bench_serving) from a docker compose log."""
    text = (WILD / name).read_text()
    plain, wrapped = read_reported(text), read_reported(prefixed("sglang-1  | ")(text))
    assert (wrapped.mean_length, wrapped.load, len(wrapped.series)) == (plain.mean_length, plain.load,
                                                                         len(plain.series))
    assert any("docker compose" in n for n in wrapped.notes)


def hard_wrapped(width):
    """Every line cut into rows of ``width`` characters, as a terminal copy of a long log line gives them."""
    def wrap(text):
        rows = []
        for line in text.splitlines():
            rows += [line[i:i + width] for i in range(0, max(len(line), 1), width)] or [""]
        return "\n".join(rows) + "\n"
    return wrap


@pytest.mark.parametrize("width", [80, 160])
def test_lines_a_terminal_hard_wrapped_are_joined_back(width):
    """A statistics line cut into rows of one width reads as the line; none reads wrong (a line cut once, with no
    second row of that width to show the terminal's width, may be refused)."""
    right, wrong = 0, {}
    for entry in RIGHT:
        text = (WILD / entry["file"]).read_text()
        if max(map(len, text.splitlines())) <= width:
            continue
        try:
            found = wrong_figures(entry, read_engine_run(hard_wrapped(width)(text)))
        except ValueError:
            continue
        right += not found
        if found:
            wrong[entry["file"]] = found[0]
    assert not wrong, wrong
    assert right >= 15


def test_a_table_of_one_width_is_not_joined():
    table = "\n".join(["+" + "-" * 70 + "+", "| SpecDecoding metrics: Accepted: 1 tokens" + " " * 29 + "|",
                       "+" + "-" * 70 + "+"]) + "\n"
    assert clean(table) == (table, "")
