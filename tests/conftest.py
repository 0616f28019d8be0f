"""The tests' one conftest: environment, and the fixtures shared across files. Builders and helpers live in
tests/helpers/ (import them from there, never from another test file or from this one)."""
import atexit
import os
import shutil
import tempfile

# gradio's upload folder one of this run's own, removed at its end: a folder shared with earlier runs fills to the
# app's cap (SPECVIZ_TEMP_MB), and then the served tests' uploads are refused as a full server's would be
if "GRADIO_TEMP_DIR" not in os.environ:
    os.environ["GRADIO_TEMP_DIR"] = tempfile.mkdtemp(prefix="specviz-tests-gradio-")
    atexit.register(shutil.rmtree, os.environ["GRADIO_TEMP_DIR"], True)
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the tests never reach a model hub (set before transformers loads)
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("SPECVIZ_TRUSTED_PROXIES", "1")  # served tests speak as clients behind one proxy (X-Forwarded-For)

import pytest  # noqa: E402
import torch  # noqa: E402

from tests.helpers.app import serve, tiny_store  # noqa: E402
from tests.helpers.models import DEVICE, tiny_gpt2, tiny_llama, ui_models  # noqa: E402

torch.set_num_threads(1)  # tiny models: one thread is fastest, and never oversubscribes a shared CPU


@pytest.fixture(scope="session")
def llama():
    return tiny_llama()


@pytest.fixture(scope="session")
def gpt2():
    return tiny_gpt2()


@pytest.fixture(scope="session")
def c_build(tmp_path_factory):
    """(folder, library, stale): the C layers built once for the tests that need a build of their own (not the
    user's cache), into a fresh private folder where ``stale``, a build of other sources, lay before it."""
    import shutil

    from specviz.runtime.native import build, library

    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    folder = tmp_path_factory.mktemp("native")
    stale = folder / "stack-0000000000000000.so"
    stale.write_bytes(b"")
    with pytest.MonkeyPatch.context() as env:
        env.setenv(library.CACHE_ENV, str(folder))
        return folder, build.compile_library(cc), stale


@pytest.fixture
def fresh_pilot_cache():
    """An empty ``labs.pilot_cache`` and no estimate's promise (``app.budget``) for the test, and again after it
    (both are per process)."""
    from specviz.app import budget
    from specviz.labs import pilot_cache

    pilot_cache.clear()
    budget._promises.clear()
    yield
    pilot_cache.clear()
    budget._promises.clear()


@pytest.fixture
def prompt():
    return torch.tensor([[1, 5, 9, 3, 7]], device=DEVICE)


# -- the app over tiny models (module-scoped: one per test file that asks) ---------------------------------
@pytest.fixture(scope="module")
def pair():
    """(target, draft, tokenizer): a tiny random target behind the bundled tokenizer and a perturbed copy."""
    return ui_models()


@pytest.fixture(scope="module")
def store(pair):
    return tiny_store(pair, default_draft="small")


@pytest.fixture(scope="module")
def client(store):
    """A gradio_client Client of the demo served in this process on a free port (as the app serves it)."""
    from gradio_client import Client

    from specviz.app import build_demo

    with serve(build_demo(store)) as url:
        yield Client(url, verbose=False)
