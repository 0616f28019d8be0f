"""The README's five-minute tour, walked in a browser as it is written (steps 1 to 9), on the bundled models where
they are (tiny random ones stand in elsewhere): each step's control is where the README says, does what it says, and
no step leaves an error on the page. Needs Debian's chromium and playwright; skipped without them."""
import re
from pathlib import Path

import pytest

from specviz import DEFAULT_TARGET, list_models
from specviz.app import build_demo
from specviz.app.store import ModelStore
from tests.helpers.app import chromium_page, needs_chromium, serve, sync_api, tiny_store

pytestmark = [needs_chromium, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
ERRORS = ".toast-body.error, [data-testid='toast-body'].error"
LONG = 600_000  # ms: a run with its baseline and spread on a busy 2-core machine
VLLM_LOG = ROOT / "tests" / "engines" / "fixtures" / "vllm_healthy.log"


@pytest.fixture(scope="module")
def app_url():
    store = ModelStore() if DEFAULT_TARGET in list_models() else tiny_store()
    with serve(build_demo(store)) as url:
        yield url


def run_done(page, outcome) -> None:
    """Wait for a Run's outcome, then for its button to take clicks again. Not the button alone: on a busy host the
    button may not yet have left "Run" when the click returns, and the run has not begun."""
    sync_api.expect(outcome.first).to_be_visible(timeout=LONG)
    sync_api.expect(page.locator("#run")).to_have_text("Run", timeout=LONG)


def no_errors(page) -> None:
    assert page.locator(ERRORS).count() == 0 and not page.get_by_text("internal error").count()


def test_the_readmes_tour_walks_as_written(app_url):
    tour = (ROOT / "README.md").read_text(encoding="utf-8").split("## A five-minute tour", 1)[1].split("\n## ", 1)[0]
    assert [int(n) for n in re.findall(r"^(\d)\. \*\*", tour, flags=re.M)] == list(range(1, 10))
    with chromium_page(viewport={"width": 1280, "height": 800}) as page:
        page.goto(app_url)
        # 1. Explorer -> Run: the run streams into the timeline; the summary leads with target passes per token
        for field in ("#prompt", "#target", "#draft", "#k", "#temperature", "#run"):
            sync_api.expect(page.locator(field)).to_be_visible(timeout=60_000)
        page.locator("#run").click()
        run_done(page, page.locator("#summary").get_by_text("target forward"))
        token = page.locator("#timeline .sv-round .sv-tok").first
        token.click()  # click or tap: the details panel pinned
        assert "p = " in token.get_attribute("data-tip")
        no_errors(page)
        # 2. Round replay: next steps to round 2
        sync_api.expect(page.locator("#replay")).to_contain_text("Round 1 of")
        page.locator("#next").click()
        sync_api.expect(page.locator("#replay")).to_contain_text("Round 2 of", timeout=30_000)
        # 3. More settings -> Draft shape -> 3,2,2,1 -> Run: a token tree
        page.locator("#more-settings").click()
        page.locator("#shape input").click()
        page.get_by_role("option", name="3,2,2,1").click()
        page.locator("#run").click()
        run_done(page, page.locator("#timeline .sv-round-tree"))
        no_errors(page)
        # 4. the glossary, then What if? and Take alpha, k, c, v from this run (after the tree run of step 3)
        page.locator("#glossary").click()
        sync_api.expect(page.locator("#glossary")).to_contain_text("β")
        page.locator("#what-if").click()
        page.locator("#from-run").click()
        sync_api.expect(page.locator("#what-if-plot .js-plotly-plot")).to_have_count(1, timeout=30_000)
        page.wait_for_timeout(1_000)
        no_errors(page)
        # 5. the gallery at the top: a ready run opens at once; export writes files
        page.locator(".sv-gallery-btn").first.click()
        sync_api.expect(page.locator("#replay")).to_contain_text("Round 1 of", timeout=30_000)
        page.locator("#export").click()
        sync_api.expect(page.get_by_text(re.compile(r"\.json"))).not_to_have_count(0, timeout=30_000)
        no_errors(page)
        # 6. Learn: predict, then Reveal: run it
        page.get_by_role("tab", name="Learn", exact=True).click()
        page.locator("#lesson-choice label").first.click()
        page.locator("#lesson-reveal").click()
        sync_api.expect(page.locator("#lesson-answer")).to_contain_text("Answer", timeout=LONG)
        no_errors(page)
        # 7. Labs: the k sweep's Estimate time answers
        page.get_by_role("tab", name="Labs", exact=True).click()
        page.get_by_role("tab", name="k sweep lab", exact=True).click()
        panel = page.locator("[role='tabpanel']:visible").last
        panel.get_by_role("button", name="Estimate time", exact=True).click()
        sync_api.expect(panel.get_by_text(re.compile(r"Estimated|would take"))).not_to_have_count(0, timeout=LONG)
        no_errors(page)
        # 8. Compare drafts and Batch are tabs; the presenter view is a checkbox at the top
        for tab in ("Compare drafts", "Batch"):
            page.get_by_role("tab", name=tab, exact=True).click()
        page.locator("#presenter input").check()
        assert page.evaluate("document.querySelector('.sv-presenter') !== null")
        page.locator("#presenter input").uncheck()
        # 9. Your engine: paste a vLLM log, read what the doctor finds and the k it advises
        page.get_by_role("tab", name="Your engine", exact=True).click()
        page.locator("#engine-text textarea").fill(VLLM_LOG.read_text())
        page.locator("#engine-read").click()
        sync_api.expect(page.locator("#engine-findings")).to_contain_text("What the doctor finds", timeout=60_000)
        sync_api.expect(page.locator("#engine-advice")).to_contain_text("Best k", timeout=30_000)
        no_errors(page)
