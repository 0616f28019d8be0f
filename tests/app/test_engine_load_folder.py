"""The "Your engine" tab on a llama.cpp load recording uploaded as a .zip of its folder, through its bound handler:
the load view's crossover, drift and per-range advice are the load doctor's on the same folder read directly, the
runs say which llama.cpp and which reading of its timings they were read with; a zip that is not a recording, or
not safe to open, is a readable gr.Error naming the upload, and the next call still works."""
from pathlib import Path

import gradio as gr
import pytest

from specviz.app import engine_inputs as ei
from specviz.app import engine_tab
from specviz.app.store import ModelStore
from specviz.engines.llamacpp_load import read_llamacpp_load
from specviz.engines.load_doctor import diagnose_load
from specviz.views.engine_report import md
from tests.helpers.zipped import zip_folder

RECORDED = Path(__file__).resolve().parents[1] / "engines" / "fixtures" / "llamacpp_load"
FORM = dict(grouping=ei.ONE_RUN, temperatures="", cost_source=ei.TYPED, c=0.1, v="1", bench_text="", bench_file=None,
            target="t", draft="d", beside=engine_tab.NOTHING, trace_file=None, k=2, temperature=0, max_new=6)
OUT = ("status", "runs", "findings", "advice", "table", "cost", "positions", "histogram", "advice_plot", "series",
       "verify_plot", "beside", "compare", "load", "load_plot")
K = 4  # the recording's commands: --spec-draft-n-max 4 (its README.md)


def no_model(name):
    raise AssertionError(f"the load view loads no model ({name} asked for)")


@pytest.fixture(scope="module")
def h():
    store = ModelStore(load_model=no_model, load_drafter=no_model, list_targets=lambda: ["t"],
                       list_drafters=lambda: ["d"], default_target="t", default_draft="d", default_model_draft="d")
    return engine_tab.handlers(store)


def read(h, files, text="", **change):
    return dict(zip(OUT, h.read_engine(text, files, **{**FORM, **change})))


def upload(tmp_path, data: bytes, name: str = "llamacpp_load.zip") -> list[str]:
    path = tmp_path / name
    path.write_bytes(data)
    return [str(path)]


@pytest.fixture(scope="module")
def reference():
    """The load doctor's findings on the folder read directly, by code."""
    return {f.code: f for f in diagnose_load(read_llamacpp_load(RECORDED), k=K)}


@pytest.mark.slow
@pytest.mark.parametrize("engine_k", [None, 0, K])
def test_the_zipped_recordings_load_view_is_the_doctors_on_the_folder(h, tmp_path, reference, engine_k):
    out = read(h, upload(tmp_path, zip_folder(RECORDED, "llamacpp_load/")), engine_k=engine_k)
    load = out["load"]
    assert load.startswith("#### Under load\n")
    for code in ("load_crossover", "load_drift", "load_model", "load_advice"):
        assert md(reference[code].text) in load, code
    assert reference["load_crossover"].numbers["decided"]  # so the chart shades the crossover
    shaded = [s for s in out["load_plot"].layout.shapes if s.type == "rect"]
    assert [(s.x0, s.x1) for s in shaded] == [(reference["load_crossover"].numbers["last_paying_load"],
                                               reference["load_crossover"].numbers["first_losing_load"])]
    charted = {trace.name: len(trace.x) for trace in out["load_plot"].data}
    assert charted == {"run 1: llamacpp_load.zip: speculation on (speculation on)": 16,  # 4 configurations x 4 spans
                       "run 2: llamacpp_load.zip: speculation off (speculation off)": 16}


@pytest.mark.slow
def test_the_tab_says_which_llama_cpp_and_which_reading_the_figures_come_from(h, tmp_path):
    out = read(h, upload(tmp_path, zip_folder(RECORDED)))
    runs = read_llamacpp_load(RECORDED)
    source = runs["on"].source
    assert out["status"].startswith(f"**Read 2 runs**: {md(source)}; {md(source)}.")
    assert out["runs"].count(f"**Detected format: {md(source)}**") == 2
    version = next(note for note in runs["on"].notes if note.startswith("read as llama.cpp version: "))
    assert "0.5.0-dev (build 1, commit 0c1e570)" in version  # the recording's README.md
    assert out["runs"].count(f"- {md(version)}") == 2 and f"- {md(runs['on'].notes[-1])}" in out["runs"]
    assert (f"Read as: {md('run 1: llamacpp_load.zip: speculation on')}: llama.cpp, read as {md(source)}, "
            f"speculation on; {md('run 2: llamacpp_load.zip: speculation off')}: llama.cpp, read as {md(source)}, "
            "speculation off") in out["load"]
    assert "print means, not counts" in out["findings"]  # no counts: the count-based doctor leaves them out


@pytest.mark.slow
def test_a_recording_beside_a_pasted_run(h, tmp_path):
    log = (RECORDED.parent / "vllm_healthy.log").read_text()
    out = read(h, upload(tmp_path, zip_folder(RECORDED)), text=log)
    assert out["status"].startswith("**Read 3 runs**: vLLM log;")
    assert "alpha = 0.70" in out["findings"]  # the vLLM run's counts, diagnosed as before
    assert md("run 1: the pasted text") + ": vLLM" in out["load"]  # charted beside the recording
    assert md("run 2: llamacpp_load.zip: speculation on") + ": llama.cpp" in out["load"]


BAD = {  # case: (the upload's name and bytes, words the message holds)
    "not a recording": (("logs.zip", zip_folder(RECORDED / "np1-on", "np1/")),
                        ["logs.zip: not a llama.cpp load recording", "np1-on/, np1-off/"]),
    "dot dot": (("evil.zip", zip_folder(RECORDED, "", extra={"../np1-on/completions.jsonl": b"{}"})),
                ["evil.zip: the zip holds an entry with an absolute path or '..'"]),
    "too many entries": (("many.zip", zip_folder(RECORDED, "", extra={f"np1-on/{i}": b"" for i in range(300)})),
                         ["many.zip: the zip holds 3", "entries; at most 256"]),
    "zip bomb": (("bomb.zip", zip_folder(RECORDED, "", extra={"np1-on/padding": bytes(ei.MAX_RECORDING_BYTES)})),
                 ["bomb.zip: the zip unpacks to 16.4 MiB; at most 16 MiB"]),
    "broken": (("cut.zip", zip_folder(RECORDED)[:2000]), ["cut.zip: not a zip file"]),
}


@pytest.mark.parametrize("case", BAD)
def test_a_bad_zip_is_a_readable_error(h, tmp_path, case):
    (name, data), words = BAD[case]
    with pytest.raises(gr.Error) as info:
        read(h, upload(tmp_path, data, name))
    message = str(info.value)
    assert all(word in message for word in words), message
    assert str(tmp_path) not in message and "expected a zip of the folder" in message


@pytest.mark.slow
def test_after_a_refusal_the_next_call_works(h, tmp_path):
    with pytest.raises(gr.Error, match="not a zip file"):
        read(h, upload(tmp_path, b"PK\x03\x04 cut short", "cut.zip"))
    assert "#### Under load" in read(h, upload(tmp_path, zip_folder(RECORDED)))["load"]
