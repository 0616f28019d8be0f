"""No server path in any message a visitor reads: every error shown by the app (specviz/app/widgets.py) has its
absolute paths cut to the file name, URLs and plain text untouched."""
import pytest

from specviz.app.widgets import friendly, hide_paths


@pytest.mark.parametrize("text, shown", [
    ("could not read /tmp/gradio/0a1b2c/trace.json: no such file", "could not read …/trace.json: no such file"),
    ("model at ~/models/gemma-3/model.gguf refused", "model at …/model.gguf refused"),
    ("see https://huggingface.co/spaces/a/b", "see https://huggingface.co/spaces/a/b"),
    ("k >= 1, a/b and p/q stay", "k >= 1, a/b and p/q stay"),
    ("(/srv/app/assets/models/target)", "(…/target)"),
])
def test_paths_are_cut_to_their_file_name(text, shown):
    assert hide_paths(text) == shown


def test_a_handlers_error_names_no_server_folder(tmp_path):
    def load(path):
        open(path)  # an upload gone: the OSError's message carries its path

    with pytest.raises(Exception) as raised:
        friendly(load)(str(tmp_path / "upload" / "trace.json"))
    assert "trace.json" in str(raised.value) and str(tmp_path) not in str(raised.value)


def test_the_path_pattern_is_linear():
    import time

    def cost(n):
        text = "/" + "a/" * n + "x" + " " + "/" * n
        times = []
        for _ in range(7):  # the fastest of seven: a busy host's pauses only ever add time
            start = time.perf_counter()
            hide_paths(text)
            times.append(time.perf_counter() - start)
        return min(times)

    cost(1000)
    assert cost(40_000) / cost(10_000) < 12  # 4x the input: about 4x the work (quadratic would be 16x)
