"""A real browser picks a lossy acceptance rule in the explorer (the summary says lossy and shows its total
variation beside the speedup) and runs the acceptance rule lab on its defaults (no error, every chart drawn).
Screenshots: docs/screenshot-rules.png and docs/screenshot-rule-lab.png with SPECVIZ_REFRESH_SCREENSHOT=1."""
import os
import re
from pathlib import Path

import pytest

from specviz.app import build_demo
from tests.helpers.app import chromium_page, needs_chromium, serve, sync_api, tiny_store

DOCS = Path(__file__).resolve().parents[2] / "docs"
pytestmark = [needs_chromium, pytest.mark.slow]


@pytest.fixture(scope="module")
def app_url():
    with serve(build_demo(tiny_store())) as url:
        yield url


def shot(locator, name: str, tmp_path) -> None:
    path = DOCS / name if os.environ.get("SPECVIZ_REFRESH_SCREENSHOT") == "1" else tmp_path / name
    locator.screenshot(path=str(path))
    assert path.stat().st_size > 5_000


def test_a_lossy_rule_is_labelled_and_costs_truth(app_url, tmp_path):
    with chromium_page(viewport={"width": 1400, "height": 1000}) as page:
        page.goto(app_url)
        page.locator("#more-settings").click()  # the acceptance rule is folded under "More settings"
        page.locator("#rule input").click()
        page.get_by_role("option", name="optimistic (lossy)").click()
        page.locator("#run").click()
        summary = page.locator("#summary")
        sync_api.expect(summary).to_contain_text("lossy", timeout=60_000)
        sync_api.expect(summary).to_contain_text(re.compile(r"TV = [\d.]+"), timeout=60_000)
        assert page.locator(".toast-body.error").count() == 0
        shot(summary, "screenshot-rules.png", tmp_path)


def test_the_rule_lab_runs_its_defaults_and_draws_every_chart(app_url, tmp_path):
    with chromium_page(viewport={"width": 1400, "height": 1000}) as page:
        page.goto(app_url)
        page.get_by_role("tab", name="Labs").click()
        page.get_by_role("tab", name="Acceptance rule lab").click()
        page.get_by_role("button", name="Run acceptance rule lab").click()
        panel = page.locator("[role=tabpanel]").filter(
            has=page.get_by_role("button", name="Run acceptance rule lab")).last  # the lab's own panel
        sync_api.expect(panel).to_contain_text(re.compile(r"Done: \d+ runs"), timeout=120_000)
        sync_api.expect(panel.locator(".js-plotly-plot")).to_have_count(3, timeout=30_000)
        assert page.locator(".toast-body.error").count() == 0
        shot(panel, "screenshot-rule-lab.png", tmp_path)
