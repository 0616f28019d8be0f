"""A real browser on the Load lab: open it, run its smallest setting (batch sizes 1 and 2), and find the verdict and
the speedup chart. Needs Debian's chromium and playwright; skipped without."""
import pytest

from specviz.app import build_demo
from tests.helpers.app import chromium_page, needs_chromium, serve, sync_api, tiny_store

pytestmark = [needs_chromium, pytest.mark.slow]


@pytest.fixture(scope="module")
def app_url():
    with serve(build_demo(tiny_store())) as url:
        yield url


def test_the_smallest_load_run_draws_its_crossover(app_url):
    with chromium_page(viewport={"width": 1400, "height": 1000}) as page:
        page.goto(app_url)
        page.get_by_role("tab", name="Labs").click()
        page.get_by_role("tab", name="Load lab").click()
        page.locator("#load-batches").get_by_label("4", exact=True).uncheck()  # the defaults are 1, 2, 4
        page.locator("#load-run").click()
        sync_api.expect(page.locator("#load-status")).to_contain_text("Done in", timeout=300_000)
        verdict = page.locator("#load-verdict")
        sync_api.expect(verdict).to_contain_text("Measured:")
        sync_api.expect(verdict).to_contain_text("The goodput model:")
        sync_api.expect(verdict).to_contain_text("The model assumes:")
        sync_api.expect(page.locator("#load-speedup .js-plotly-plot")).to_have_count(1, timeout=30_000)
        assert page.locator(".toast-body.error, [data-testid='toast-body'].error").count() == 0
