"""A real browser on load: the Load lab's default run (batch sizes 1, 2 and 4, the form untouched) to its verdict,
the forward it ran on and its charts; and the "Your engine" tab's load view on a vLLM sweep with speculation on and
off, its findings and its chart. Needs Debian's chromium and playwright; skipped without."""
from pathlib import Path

import pytest

from specviz.app import build_demo
from tests.helpers.app import chromium_page, needs_chromium, serve, sync_api, tiny_store

pytestmark = [needs_chromium, pytest.mark.slow]
SWEEP = Path(__file__).resolve().parents[1] / "engines" / "fixtures" / "load_from_format"
ERRORS = ".toast-body.error, [data-testid='toast-body'].error"


@pytest.fixture(scope="module")
def app_url():
    with serve(build_demo(tiny_store())) as url:
        yield url


def test_the_load_labs_default_run_draws_its_crossover(app_url):
    with chromium_page(viewport={"width": 1400, "height": 1000}) as page:
        page.goto(app_url)
        page.get_by_role("tab", name="Labs").click()
        page.get_by_role("tab", name="Load lab").click()
        page.locator("#load-run").click()
        status = page.locator("#load-status")
        sync_api.expect(status).to_contain_text("Done in", timeout=600_000)
        sync_api.expect(status).to_contain_text("Forward: specviz.runtime.")  # the class batched decoding built
        verdict = page.locator("#load-verdict")
        for part in ("Measured:", "The goodput model:", "Why, at batch 1:", "Best k (the model's):",
                     "The model assumes:", "fitted on the passes these runs timed"):
            sync_api.expect(verdict).to_contain_text(part)
        sync_api.expect(page.locator("#load-speedup .js-plotly-plot")).to_have_count(1, timeout=30_000)
        assert page.locator(ERRORS).count() == 0


def test_the_engine_tabs_load_view_reads_a_sweep_on_and_off(app_url):
    on, off = ((SWEEP / f"vllm-load-sweep-{mode}.txt").read_text() for mode in ("on", "off"))
    with chromium_page(viewport={"width": 1400, "height": 1000}) as page:
        page.goto(app_url)
        page.get_by_role("tab", name="Your engine").click()
        page.locator("#engine-text textarea").fill(f"--- on\n{on}\n--- off\n{off}")
        page.locator("#engine-read").click()
        found = page.locator("#engine-load")
        sync_api.expect(found).to_contain_text("Under load", timeout=60_000)
        sync_api.expect(found).to_contain_text("speculation stops paying between 8 and 16 running requests: speedup "
                                               "1.38 (range 1.37-1.40) then 0.90 (range 0.89-0.91)")
        sync_api.expect(found).to_contain_text('"disable_by_batch_size": 8')  # the advice, in vLLM's own setting
        sync_api.expect(found).to_contain_text("the goodput model (step cost fitted on the run without speculation")
        sync_api.expect(page.locator("#engine-load-plot .js-plotly-plot")).to_have_count(1, timeout=30_000)
        assert page.locator(ERRORS).count() == 0
