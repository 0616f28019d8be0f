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
       "verify_plot", "beside")


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


def test_the_llamacpp_recordings_collapse_when_sampling(h):
    files = sorted(str(p) for p in LLAMA.glob("completion-t*.json"))
    out = read(h, files=files, grouping=ei.PER_TEMPERATURE)
    assert "Read 2 runs" in out["status"] and "T = 0.8" in out["runs"] and "5 inputs summed" in out["runs"]
    assert "**Problem** (temperature&#95;collapse)" in out["findings"] and "5.8%" in out["findings"]
    assert "No advice for run 1" in out["advice"]  # responses alone report no verify steps


def test_a_vllm_collapse_pair_with_typed_temperatures(h):
    files = [str(FIXTURES / "vllm_greedy.jsonl"), str(FIXTURES / "vllm_sampled.jsonl")]
    out = read(h, files=files, grouping=ei.PER_FILE, temperatures="0, 0.7")
    assert "temperature&#95;collapse" in out["findings"] and set(out["table"].run) == {
        "run 1: vLLM per-request metrics, T = 0", "run 2: vLLM per-request metrics, T = 0.7"}
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


def test_a_trace_imported_beside(h, pair, tmp_path):
    target, draft, _ = pair
    trace = speculative_generate(target, draft, torch.tensor([[1, 5, 9]]), DecodeConfig(k=3, max_new_tokens=8))
    path = tmp_path / "trace.json"
    path.write_text(trace.to_json())
    out = read(h, (FIXTURES / "vllm_healthy.log").read_text(), beside=engine_tab.TRACE, trace_file=str(path))
    assert "specviz trace" in out["beside"] and "rounds that drafted" in out["beside"]


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
