"""The "Your engine" tab through its bound handler: the real llama.cpp recordings and the vLLM, SGLang and
TensorRT-LLM fixtures read, diagnosed and advised (format shown, findings, the advice table), the three cost
sources, a specviz run beside; bad input of every kind as a readable gr.Error, and the next call still works."""
from pathlib import Path

import gradio as gr
import pytest
import torch

from specviz import DecodeConfig, speculative_generate
from specviz.app import engine_inputs as ei
from specviz.app import engine_tab
from specviz.trace import MAX_TRACE_BYTES
from specviz.views.engine_report import md
from tests.helpers.app import tiny_store

FIXTURES = Path(__file__).resolve().parents[1] / "engines" / "fixtures"
LLAMA = FIXTURES / "llamacpp"
FORM = dict(grouping=ei.ONE_RUN, temperatures="", cost_source=ei.TYPED, c=0.1, v="1", bench_text="", bench_file=None,
            target="tiny-target", draft="tiny", beside=engine_tab.NOTHING, trace_file=None, k=2, temperature=0,
            max_new=6)
OUT = ("status", "runs", "findings", "advice", "table", "cost", "positions", "histogram", "advice_plot", "series",
       "verify_plot", "beside", "compare", "load", "load_plot")


@pytest.fixture(scope="module")
def h(pair):
    return engine_tab.handlers(tiny_store(pair))


def read(h, text="", files=None, **change):
    return dict(zip(OUT, h.read_engine(text, files, **{**FORM, **change})))



@pytest.mark.slow
def test_a_vllm_log_pasted(h):
    out = read(h, (FIXTURES / "vllm_healthy.log").read_text())
    assert "Detected format: vLLM log" in out["runs"] and "12 logging intervals" in out["runs"]  # a derived note
    assert "accepted / drafted = 3964 / 7731" in out["runs"]  # every rate with its definition
    assert "What the doctor finds" in out["findings"] and "alpha = 0.70" in out["findings"]
    assert "Problem" not in out["findings"]  # healthy: no cliff, collapse, mismatch or drift
    assert list(out["table"].k) == list(range(1, 9)) and "Best k = 4" in out["advice"]
    assert "num&#95;speculative&#95;tokens" in out["advice"]  # the flag, escaped
    assert all(out[name].data for name in ("positions", "advice_plot", "series"))
    assert out["histogram"].layout.title.text.startswith("No acceptance-length histogram")


@pytest.mark.parametrize("files, source, advised", [
    (["vllm_metrics_1.prom", "vllm_metrics_2.prom"], "Prometheus scrape (vllm)", True),
    (["sglang_healthy.jsonl"], "SGLang meta_info", True),
    (["trtllm_healthy.json"], "TensorRT-LLM per-request stats", True),
    (["vllm_requests_choice.jsonl"], "vLLM per-request metrics", True),
    (["llamacpp/metrics-before.txt", "llamacpp/metrics-after-t0.txt"], "Prometheus scrape (llamacpp)", True),
    (["llamacpp/server.log"], "llama.cpp server log", False),  # steps, but neither k nor per-position counts
])
@pytest.mark.slow
def test_each_format_uploaded(h, files, source, advised):
    out = read(h, files=[str(FIXTURES / f) for f in files])
    assert f"**Detected format: {md(source)}**" in out["runs"] and "What the doctor finds" in out["findings"]
    if advised:
        assert len(out["table"]) >= 8 and list(out["table"].k[:3]) == [1, 2, 3]
        assert "The k to run with" in out["advice"] and "| llama.cpp" in out["advice"]
    else:
        assert out["table"].empty and "No advice" in out["advice"] and "reports only totals" in out["advice"]


@pytest.mark.slow
def test_the_llamacpp_recordings_collapse_when_sampling(h):
    files = sorted(str(p) for p in LLAMA.glob("completion-t*.json"))
    out = read(h, files=files, grouping=ei.PER_TEMPERATURE)
    assert "Read 2 runs" in out["status"] and "T = 0.8" in out["runs"] and "5 inputs summed" in out["runs"]
    assert "**Problem** (temperature&#95;collapse)" in out["findings"] and "5.8%" in out["findings"]
    assert "No advice for run 1" in out["advice"]  # responses alone report no verify steps


@pytest.mark.slow
def test_a_vllm_collapse_pair_with_typed_temperatures(h):
    files = [str(FIXTURES / "vllm_greedy.jsonl"), str(FIXTURES / "vllm_sampled.jsonl")]
    out = read(h, files=files, grouping=ei.PER_FILE, temperatures="0, 0.7")
    assert "temperature&#95;collapse" in out["findings"]
    assert "run 1: vllm_greedy.jsonl" in set(out["table"].run)  # each run called by its file's name
    assert set(out["table"].run) <= {"run 1: vllm_greedy.jsonl", "run 2: vllm_sampled.jsonl"}
    assert out["histogram"].data  # the responses carry each step's accepted count


@pytest.mark.slow
def test_cost_from_llama_bench_and_typed_points(h):
    log = (FIXTURES / "vllm_cliff.log").read_text()
    out = read(h, log, cost_source=ei.BENCH, bench_file=str(LLAMA / "bench.md"), c=0.05)
    assert "llama-bench (bench.md)" in out["cost"] and "v&#40;" not in out["cost"]
    assert "**Problem** (cliff)" in out["findings"] and out["verify_plot"].data
    typed = read(h, log, v="1:1,9:1.4")
    assert "c = 0.1; v(1) = 1, v(9) = 1.4" in typed["cost"]
    bench = read(h, log, cost_source=ei.BENCH, bench_text=(LLAMA / "bench.csv").read_text())
    assert "llama-bench (the pasted text)" in bench["cost"]


@pytest.mark.slow
def test_measured_here_and_a_pair_beside(h):
    out = read(h, (FIXTURES / "vllm_healthy.log").read_text(), cost_source=ei.MEASURE, beside=engine_tab.PAIR)
    assert "(measured here)" in out["cost"] and "Extra verify rows are free here up to n =" in out["cost"]
    assert out["verify_plot"].data and md("specviz: tiny-target + tiny, k = 2") in out["beside"]
    assert "Detected format: specviz trace" in out["beside"]
    assert {t.name for t in out["positions"].data} >= {"vLLM log", "specviz: tiny-target + tiny, k = 2, T = 0"}


V0, V1 = (FIXTURES / "vllm_v0.log").read_text(), (FIXTURES / "vllm_healthy.log").read_text()


@pytest.mark.slow
def test_several_runs_pasted_with_labels_side_by_side(h):
    out = read(h, f"--- before the upgrade\n{V0}\n---   after: V1  \n{V1}")
    assert out["status"].startswith("**Read 2 runs**: vLLM log (V0 engine); vLLM log.")
    table = out["runs"].split("\n\n")[1].splitlines()  # the side-by-side table, a row per figure
    assert table[0] == f"| | {md('run 1: before the upgrade')} | {md('run 2: after: V1')} |"
    rows = {cells[0].strip("*"): cells[1:] for cells in ([c.strip() for c in line.strip("|").split("|")]
                                                          for line in table[2:])}  # input's '|' are escaped
    assert rows["read as"] == ["vLLM log (V0 engine)", "vLLM log"]
    # V0: steps = 800 drafted / k 4, accepted = 700 emitted - 200 steps (the printed 541 counts every match)
    assert [rows[f] for f in ("drafted", "accepted", "steps", "k")] == [["800", "7,731"], ["500", "3,964"],
                                                                       ["200", "2,577"], ["4", "3"]]
    assert rows["mean acceptance length"] == ["3.5", "2.538"]  # 1 + 500 / 200, 1 + 3964 / 2577
    assert rows["alpha (interval)"][1].startswith("0.701 (0.691 to 0.711, 90%; maximum likelihood")
    assert rows["how it was read"][0].startswith("V0 semantics") and md("vllm#9565") in rows["how it was read"][0]
    assert "read as V1 lines" in rows["how it was read"][1]
    findings = out["findings"]  # each run's findings under its label, the doctor's 'run i (format): ' dropped
    assert findings.index(f"##### {md('run 1: before the upgrade')}") < findings.index(f"##### {md('run 2: after: V1')}")
    assert "(vLLM log)" not in findings and "alpha = 0.70" in findings.split(md("run 2: after: V1"))[1]
    assert {t.name for t in out["positions"].data} >= {"run 2: after: V1"}
    assert set(out["table"].run) == {"run 1: before the upgrade", "run 2: after: V1"}


@pytest.mark.slow
def test_pasted_parts_and_uploads_each_a_run(h):
    out = read(h, f"{V1}\n---\n{V1}", files=[str(FIXTURES / "vllm_v0.log")])
    assert "Read 3 runs" in out["status"]  # two pasted parts and the upload (one run: the grouping's default)
    head = f"| | {md('run 1: pasted run 1')} | {md('run 2: pasted run 2')} | {md('run 3: vllm_v0.log')} |"
    assert head in out["runs"]
    one = read(h, V1, files=[str(FIXTURES / "vllm_healthy.log")])  # no '---' line: all one run, as before
    assert "Read 1 run**" in one["status"] and "| drafted | 15,462 |" in one["runs"]  # 2 x 7,731: summed


@pytest.mark.slow
def test_two_runs_charted_position_by_position(h):
    from specviz.engines import read_engine_run

    cliff = (FIXTURES / "vllm_cliff.log").read_text()
    out = read(h, f"--- healthy\n{V1}\n--- cliff\n{cliff}")
    a, b = read_engine_run(V1.encode()), read_engine_run(cliff.encode())
    rate_a, rate_b, change = out["compare"].data  # each run's conditional rate, and the change
    assert (rate_a.name, rate_b.name) == ("run 1: healthy", "run 2: cliff")
    reached_a, reached_b = (a.steps,) + a.accepted_per_pos[:-1], (b.steps,) + b.accepted_per_pos[:-1]
    both = [i for i in range(min(len(reached_a), len(reached_b))) if reached_a[i] and reached_b[i]]
    assert len(both) > 0 and list(rate_a.x) == [i + 1 for i in both]  # the positions both runs reached
    assert list(rate_a.y) == pytest.approx([a.accepted_per_pos[i] / reached_a[i] for i in both])
    assert list(rate_b.y) == pytest.approx([b.accepted_per_pos[i] / reached_b[i] for i in both])
    assert list(change.y) == pytest.approx([y - x for x, y in zip(rate_a.y, rate_b.y)])
    assert "runs&#95;compared" in out["findings"]  # and in words, with intervals
    lone = read(h, V1)["compare"]
    assert lone.layout.title.text.startswith("One run") or "One run" in str(lone.layout.annotations)


@pytest.mark.slow
def test_the_drafter_kind_prices_the_advice(h):
    words = {kind: read(h, V1, drafter=kind)["advice"] for kind in ("sequential", "block", "ngram")}
    assert "a sequential draft model, k draft steps a step" in words["sequential"]
    assert "a block drafter, the whole block in one draft pass" in words["block"]
    assert "an n-gram or prompt lookup, its drafting priced at 0" in words["ngram"]
    best = {kind: int(text.split("**Best k = ")[1].split("**")[0]) for kind, text in words.items()}
    assert best["ngram"] > best["sequential"]  # drafting for free: longer drafts pay
    with pytest.raises(gr.Error, match="unknown drafter kind"):
        read(h, V1, drafter="telepathy")


def test_pasted_parts_split_only_at_a_separator_line():
    assert ei.pasted_parts("a\nb\n") == [(None, "a\nb\n")]
    assert ei.pasted_parts("-" * 50 + "\nx\n---x\n") == [(None, "-" * 50 + "\nx\n---x\n")]  # not separators
    assert ei.pasted_parts("a\n---\nb\n--- two words\r\nc") == [(None, "a\n"), (None, "\nb\n"), ("two words", "\nc")]
    assert ei.pasted_parts("---\n\n--- x\nc") == [("x", "\nc")]  # an empty unlabelled part is dropped
    with pytest.raises(ValueError, match="the run labelled 'empty' is empty"):
        ei.pasted_parts("--- empty\n\n--- x\nc")
    with pytest.raises(ValueError, match="at most 80"):
        ei.pasted_parts("--- " + "x" * 81 + "\nc")


@pytest.mark.slow
def test_a_trace_imported_beside(h, pair, tmp_path):
    target, draft, _ = pair
    trace = speculative_generate(target, draft, torch.tensor([[1, 5, 9]]), DecodeConfig(k=3, max_new_tokens=8))
    path = tmp_path / "trace.json"
    path.write_text(trace.to_json())
    out = read(h, (FIXTURES / "vllm_healthy.log").read_text(), beside=engine_tab.TRACE, trace_file=str(path))
    assert "specviz trace" in out["beside"] and "rounds that drafted" in out["beside"]


@pytest.mark.slow
def test_engine_strings_are_escaped(h):
    response = (LLAMA / "completion-t0-p0.json").read_text()
    evil = "<script>alert(1)</script> [click](http://x) *$x$*"
    out = read(h, response.replace("/work/ext/gguf/target-f32.gguf", evil.replace('"', "")))
    shown = "".join(v for v in out.values() if isinstance(v, str))
    assert "model &lt;script&gt;alert(1)&lt;/script&gt; &#91;click&#93;(http&#58;//x) &#42;&#36;x&#36;&#42;" in shown
    assert "<script>" not in shown and "[click]" not in shown


def healthy_log() -> str:
    return (FIXTURES / "vllm_healthy.log").read_text()


def too_many(lines: list[str]) -> str:
    """The healthy log with one interval's accepted count above its drafted count (its printed rate to match)."""
    i = next(i for i, line in enumerate(lines) if "SpecDecoding metrics" in line)
    wrong = lines[i].replace("Accepted: 216 tokens", "Accepted: 999 tokens").replace("48.0%", "222.0%")
    return "\n".join(lines[:i] + [wrong])


def files_of(tmp_path, name: str, data: bytes) -> list[str]:
    path = tmp_path / name
    path.write_bytes(data)
    return [str(path)]


LOG = healthy_log()
BENCH_ONE_MODEL = (LLAMA / "bench.md").read_text()
BAD = {  # case: (form changes, words the message must hold); "files" given as (name, bytes) are written first
    "empty": (dict(text=" \n"), ["nothing to read"]),
    "unknown": (dict(text="hello\n"), ["the pasted text", "no line of a known format", "Accepted formats"]),
    "binary": (dict(files=("model.gguf", b"GGUF\x00\x01" * 10)), ["model.gguf is binary data", "Accepted formats"]),
    "not utf-8": (dict(files=("x.log", b"\xff\xfe odd")), ["x.log is not UTF-8"]),
    "truncated": (dict(text=(FIXTURES / "trtllm_healthy.json").read_text()[:300]), ["not valid JSON", "line "]),
    "mixed": (dict(text=(FIXTURES / "vllm_v0.log").read_text() + (LLAMA / "server.log").read_text()),
              ["two formats mixed"]),
    "mixed files": (dict(files=[str(FIXTURES / "vllm_healthy.log"), str(FIXTURES / "sglang_healthy.jsonl")]),
                    ["different formats"]),
    "accepted > drafted": (dict(text=too_many(LOG.splitlines())), ["line 2", "exceeds drafted (450)"]),
    "huge file": (dict(files=("huge.log", b"x" * (MAX_TRACE_BYTES + 1))), ["huge.log is 4.0 MiB; at most 4 MiB"]),
    "huge paste": (dict(text="y" * (MAX_TRACE_BYTES + 1)), ["the pasted text is 4.0 MiB; at most 4 MiB"]),
    "bad v": (dict(text=LOG, v="1:1,2:fast"), ["unreadable verify costs"]),
    "bad c": (dict(text=LOG, c=-1), ["c (a draft step"]),
    "one-model bench": (dict(text=LOG, cost_source=ei.BENCH, bench_text=BENCH_ONE_MODEL, c=None),
                        ["benches one model", "give c"]),
    "bad bench": (dict(text=LOG, cost_source=ei.BENCH, bench_text="| a | b |\n|---|---|\n| 1 | 2 |\n"),
                  ["'test' and 't/s' columns"]),
    "temperatures": (dict(text=LOG, temperatures="0, 0.7"), ["2 temperatures for 1 runs"]),
    "no trace": (dict(text=LOG, beside=engine_tab.TRACE), ["no file uploaded"]),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", BAD)
def test_bad_input_is_a_readable_error_and_the_next_call_works(h, tmp_path, case):
    change, words = BAD[case]
    change = dict(change)
    if isinstance(change.get("files"), tuple):
        change["files"] = files_of(tmp_path, *change["files"])
    with pytest.raises(gr.Error) as info:
        read(h, **change)
    message = str(info.value)
    assert all(word in message for word in words), message
    assert str(tmp_path) not in message  # an upload is named, not its temporary path
    assert "Detected format: vLLM log" in read(h, LOG)["runs"]


def test_a_typed_k_fills_in_a_log_without_one_and_a_printed_k_wins():
    from specviz.engines import read_engine_run

    silent, printed = read_engine_run(str(LLAMA / "server.log")), read_engine_run(str(LLAMA / "speculative-simple.txt"))
    assert silent.k is None and printed.k == 6  # the same llama.cpp server and draft, run at k = 6
    filled, kept, same = ei.typed_k([silent, printed], 7)[0], ei.typed_k([printed], 4)[0], ei.typed_k([printed], 6)[0]
    assert filled.k == 7 and filled.notes[-1] == "k = 7 as typed (the input does not print it)"
    assert kept.k == 6 and kept.notes[-1] == "k = 6 as the input prints it: the 4 typed is ignored"
    assert same == printed and ei.typed_k([silent], None) == [silent] and ei.typed_k([silent], "") == [silent]
    with pytest.raises(ValueError, match=r"drafted \(1823\) exceeds steps x k = 315 x 5"):
        ei.typed_k([silent], 5)  # the log's own counts say a step drafted more than 5
    for bad in (-1, 2.5, 65):
        with pytest.raises(ValueError, match="k"):
            ei.typed_k([silent], bad)
    assert ei.typed_k([silent], 0)[0].k is None  # 0 is the field's empty value: none typed


@pytest.mark.slow
def test_the_k_field_reaches_the_runs_shown(h):
    out = read(h, (LLAMA / "server.log").read_text(), engine_k=6)
    assert md("k = 6 as typed (the input does not print it)") in out["runs"]
    out = read(h, (LLAMA / "speculative-simple.txt").read_text(), engine_k=3)
    assert md("k = 6 as the input prints it: the 3 typed is ignored") in out["runs"]


@pytest.mark.slow
def test_the_load_each_interval_printed_is_charted_with_its_findings(h):
    wild = FIXTURES / "wild"
    paste = "\n".join(f"--- {name}\n" + (wild / f"vllm-v1-running-waiting-mtp-{name}.txt").read_text()
                      for name in ("8", "9"))
    out = read(h, paste)
    assert "#### Under load" in out["load"] and "too few loads to tell" in out["load"]  # two loads, on only
    loads = sorted(x for trace in out["load_plot"].data for x in trace.x)
    assert loads and set(loads) <= {8, 9}  # the running requests the two excerpts print
    quiet = read(h, (FIXTURES / "sglang_greedy.json").read_text())  # responses: no load printed beside them
    assert quiet["load"] == "" and not any(len(t.x or ()) for t in quiet["load_plot"].data)


DECODE = (FIXTURES / "wild" / "sglang-decode-batch-accept-rate-1.txt").read_text()


@pytest.mark.slow
def test_an_sglang_decode_batch_excerpt_pasted_alone_shows_its_means(h):
    out = read(h, DECODE)
    assert out["status"].startswith("**Read 1 run**: SGLang Decode batch log. 0 findings.")
    runs = out["runs"]
    assert "**Detected format: SGLang Decode batch log** (means as printed, no counts)" in runs
    assert ("| part | mean acceptance length | acceptance rate | running requests | queued requests | KV tokens | KV "
            "cache usage | generated tokens/s |\n| --- | --- | --- | --- | --- | --- | --- | --- |") in runs
    rows = [line for line in runs.splitlines() if line[:4] in ("| 1 ", "| 5 ")]
    assert rows == ["| 1 | 2.17 | 0.54 | 1 | 0 | 108 | 0 | 0.39 |",  # the excerpt's first and last lines, as printed
                    "| 5 | 1.8 | 0.45 | 1 | 0 | 412 | 0 | 165.59 |"]
    assert md("accept len / 4: not a fraction of drafts accepted") in runs  # the meaning applied
    for figure in ("drafted", "accepted", "steps", "per-position rates", "acceptance histogram"):
        assert f"- {md(figure + ': the source prints means, not counts')}" in runs
    for name in ("findings", "advice"):
        assert "the count-based doctor, the advice and the per-position charts need counts" in out[name]
    assert out["table"].empty and not any(len(t.x or ()) for t in out["positions"].data)
    loads = [x for trace in out["load_plot"].data for x in trace.x]
    assert "#### Under load" in out["load"] and loads and set(loads) == {1}  # '#running-req: 1' on every line


@pytest.mark.slow
def test_an_sglang_excerpt_beside_a_vllm_run(h):
    out = read(h, f"--- sglang\n{DECODE}\n--- vllm\n{V1}")
    assert out["status"].startswith("**Read 2 runs**: SGLang Decode batch log; vLLM log.")
    assert f"| | {md('run 1: sglang')} | {md('run 2: vllm')} |" in out["runs"]
    table = out["runs"].split("\n\n")[1].splitlines()
    rows = {cells[0].strip("*"): cells[1:] for cells in ([c.strip() for c in line.strip("|").split("|")]
                                                          for line in table[2:])}
    assert rows["drafted"] == ["- (means only)", "7,731"]
    assert rows["mean acceptance length"] == ["1.8 to 2.17 over 5 intervals (as printed)", "2.538"]
    assert "alpha = 0.70" in out["findings"] and md("run 1: sglang") + " prints means" in out["findings"]
    assert set(out["table"].run) == {"run 2: vllm"}  # the advice: the run with counts only
    assert {t.name for t in out["positions"].data} >= {"run 2: vllm"}
    assert "run 1: sglang" not in {t.name for t in out["positions"].data}
    drawn = {t.name for t in out["load_plot"].data if t.x is not None and len(t.x)}  # the load view: both runs
    assert {"run 1: sglang (speculation on)", "run 2: vllm (speculation on)"} <= drawn
