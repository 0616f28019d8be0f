"""gpu_task: spaces.GPU on ZeroGPU only."""
import sys
import types

from specviz.app.gpu import GPU_SECONDS, gpu_task


def handler(x):
    return x + 1


def fake_spaces(calls):
    def GPU(duration=None):
        def wrap(fn):
            calls.append(duration)
            return lambda *a, **kw: ("on gpu", fn(*a, **kw))
        return wrap
    return types.SimpleNamespace(GPU=GPU)


def test_wrapped_on_zero_gpu(monkeypatch):
    calls = []
    monkeypatch.setitem(sys.modules, "spaces", fake_spaces(calls))
    monkeypatch.setenv("SPACES_ZERO_GPU", "true")
    assert gpu_task(handler)(1) == ("on gpu", 2) and calls == [GPU_SECONDS]


def test_untouched_elsewhere(monkeypatch):
    calls = []
    monkeypatch.setitem(sys.modules, "spaces", fake_spaces(calls))
    monkeypatch.delenv("SPACES_ZERO_GPU", raising=False)
    assert gpu_task(handler) is handler  # spaces importable, but not a ZeroGPU Space
    monkeypatch.setenv("SPACES_ZERO_GPU", "1")
    monkeypatch.setitem(sys.modules, "spaces", None)  # ZeroGPU flag but no spaces package: import fails
    assert gpu_task(handler) is handler and calls == []
