"""``import specviz`` loads no heavy library it does not need yet: the public names resolve on first use, so a
program that only decodes never pays for pandas, scipy, plotly or gradio at import (each is tens of MB resident)."""
import json
import subprocess
import sys

import pytest

HEAVY = ("pandas", "scipy", "plotly", "gradio")


def loaded_after(code: str) -> set[str]:
    """The heavy libraries in sys.modules after running ``code`` in a fresh interpreter."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}})))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300, check=True)
    return set(json.loads(out.stdout.splitlines()[-1])) & set(HEAVY)


def test_import_specviz_loads_none_of_the_heavy_libraries():
    assert loaded_after("import specviz") == set()


@pytest.mark.slow
def test_the_probe_sees_a_heavy_library_once_a_name_that_needs_it_is_used():
    """The negative control: the same probe reports pandas once ``specviz.sweep`` (it returns a DataFrame) is used."""
    pytest.importorskip("pandas")
    assert "pandas" in loaded_after("import specviz\nspecviz.sweep")


def test_every_public_name_resolves_to_the_object_its_module_defines():
    import importlib

    import specviz

    for module, names in specviz._HOMES.items():
        home = importlib.import_module(module, "specviz")
        assert all(getattr(specviz, n) is getattr(home, n) for n in names)
    assert set(specviz.__all__) == set(specviz._HOME_OF)
    assert specviz.conformance.run is importlib.import_module("specviz.conformance").run
    assert specviz.runtime.gguf is importlib.import_module("specviz.runtime.gguf")  # modules, as eager imports gave
    with pytest.raises(AttributeError):
        specviz.no_such_name  # noqa: B018
