"""A real browser on the "Your engine" tab: paste the vLLM healthy log, read it, and see the detected format, the
doctor's findings and the charts drawn; saves a screenshot (docs/screenshot-engine.png with
SPECVIZ_REFRESH_SCREENSHOT=1, else a temporary file). Needs Debian's chromium and playwright; skipped without."""
import os
from pathlib import Path

import pytest

from specviz.app import build_demo
from tests.helpers.app import chromium_page, needs_chromium, serve, sync_api, tiny_store

FIXTURES = Path(__file__).resolve().parents[1] / "engines" / "fixtures"
DOCS_SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "screenshot-engine.png"
pytestmark = [needs_chromium, pytest.mark.slow]


@pytest.fixture(scope="module")
def app_url():
    with serve(build_demo(tiny_store())) as url:
        yield url


def test_paste_a_vllm_log_and_read_it(app_url, tmp_path):
    with chromium_page(viewport={"width": 1400, "height": 1000}) as page:
        page.goto(app_url)
        page.get_by_role("tab", name="Your engine").click()
        page.locator("#engine-text textarea").fill((FIXTURES / "vllm_healthy.log").read_text())
        page.locator("#engine-read").click()
        sync_api.expect(page.locator("#engine-runs")).to_contain_text("Detected format: vLLM log", timeout=60_000)
        sync_api.expect(page.locator("#engine-runs")).to_contain_text("accepted / drafted = 3964 / 7731")
        findings = page.locator("#engine-findings")
        sync_api.expect(findings).to_contain_text("What the doctor finds")
        sync_api.expect(findings).to_contain_text("the i.i.d. model fits the per-position counts")
        sync_api.expect(page.locator("#engine-advice")).to_contain_text("Best k = 4")
        sync_api.expect(page.locator("#engine-advice code").first).to_contain_text('"num_speculative_tokens": 4')
        for chart in ("positions", "advice-plot", "series", "histogram", "verify-plot"):
            sync_api.expect(page.locator(f"#engine-{chart} .js-plotly-plot")).to_have_count(1, timeout=30_000)
        sync_api.expect(page.locator("#engine-positions")).to_contain_text("Leviathan at alpha = 0.70")
        shot = DOCS_SCREENSHOT if os.environ.get("SPECVIZ_REFRESH_SCREENSHOT") == "1" else tmp_path / "engine.png"
        page.screenshot(path=str(shot), full_page=True)
        assert shot.stat().st_size > 10_000


def test_two_labelled_runs_side_by_side_and_a_card_read(app_url, tmp_path):
    from specviz.app.budget import Budget
    from specviz.app.engine_exact import Served
    from specviz.conformance import run
    from specviz.serve import Engine, table_pair

    run(Served(Engine(*table_pair(), rule="typical"), Budget(600)), [[1]], n=100, out_dir=tmp_path, greedy_tokens=4)
    healthy, cliff = (FIXTURES / "vllm_healthy.log").read_text(), (FIXTURES / "vllm_cliff.log").read_text()
    with chromium_page(viewport={"width": 1400, "height": 1000}) as page:
        page.goto(app_url)
        page.get_by_role("tab", name="Your engine").click()
        page.locator("#engine-text textarea").fill(f"--- before\n{healthy}\n--- after\n{cliff}")
        page.locator("#engine-read").click()
        runs = page.locator("#engine-runs")
        sync_api.expect(runs).to_contain_text("The runs side by side", timeout=60_000)
        sync_api.expect(runs.locator("table").first).to_contain_text("run 2: after")
        sync_api.expect(page.locator("#engine-compare .js-plotly-plot")).to_have_count(1, timeout=30_000)
        sync_api.expect(page.locator("#engine-compare")).to_contain_text("run 2: after against run 1: before")
        page.locator("#exact").get_by_text("Is it exact?").first.click()
        page.locator("#exact-card input[type=file]").set_input_files(str(tmp_path / "card.json"))
        page.locator("#exact-read").click()
        sync_api.expect(page.locator("#exact-verdict")).to_contain_text("Is it exact? flag", timeout=30_000)
        sync_api.expect(page.locator("#exact-plot .js-plotly-plot")).to_have_count(1, timeout=30_000)
        page.locator("#exact-control-run").click()
        sync_api.expect(page.locator("#exact-control")).to_contain_text("Negative control: caught", timeout=60_000)
