"""A real browser drives the app: run an example, details on coloured tokens, every chart
drawn, stepping through rounds; saves a screenshot (docs/screenshot.png with SPECVIZ_REFRESH_SCREENSHOT=1,
else a temporary file). Needs Debian's chromium and playwright
(CI: apt-get install -y chromium; pip install playwright); skipped without them."""
import os
import re
import time
from pathlib import Path

import pytest

from specviz import DEFAULT_TARGET, list_models
from specviz.app import build_demo
from specviz.app.store import ModelStore
from specviz.config import EXAMPLE_PROMPTS
from tests.helpers.app import chromium_page, needs_chromium, serve, sync_api, tiny_store  # shared skip/require logic

MEASURED = re.compile(r"measured (median )?[\d.]+×")  # one pair, or the median of several
DOCS_SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "screenshot.png"
pytestmark = [needs_chromium, pytest.mark.slow]


@pytest.fixture(scope="module")
def app_url():
    # the bundled models make a meaningful screenshot; tiny random ones stand in where they are absent
    store = ModelStore() if DEFAULT_TARGET in list_models() else tiny_store()
    with serve(build_demo(store)) as url:
        yield url


def test_run_an_example_and_step_through_rounds(app_url, tmp_path):
    with chromium_page(viewport={"width": 1400, "height": 1000}) as page:
        page.goto(app_url)
        example = EXAMPLE_PROMPTS[2]
        page.get_by_text(example, exact=True).first.click()  # an example fills the prompt
        sync_api.expect(page.locator("#prompt textarea")).to_have_value(example)
        page.locator("#run").click()
        sync_api.expect(page.locator("#summary")).to_contain_text("predicted", timeout=60_000)
        sync_api.expect(page.locator("#summary")).to_contain_text(MEASURED, timeout=60_000)  # baseline in
        tokens = page.locator("#timeline .sv-timeline .sv-round .sv-tok")
        assert tokens.count() > 0
        tip = tokens.first.get_attribute("data-tip")
        assert "p = " in tip and "round 1" in tip  # rounds numbered from 1 on screen
        colour = tokens.first.evaluate("e => getComputedStyle(e).backgroundColor")
        assert colour not in ("rgba(0, 0, 0, 0)", "transparent")  # the timeline's CSS reached the page
        sync_api.expect(page.locator(".js-plotly-plot")).to_have_count(6, timeout=30_000)  # 4 charts + 2 replay
        before = page.locator("#replay").inner_text()
        assert "Round 1 of" in before
        page.locator("#next").click()
        sync_api.expect(page.locator("#replay")).to_contain_text("Round 2 of", timeout=15_000)
        assert page.locator("#replay").inner_text() != before
        shot = DOCS_SCREENSHOT if os.environ.get("SPECVIZ_REFRESH_SCREENSHOT") == "1" else tmp_path / "screenshot.png"
        page.screenshot(path=str(shot), full_page=True)
        assert shot.stat().st_size > 10_000


def test_a_tree_round_is_drawn(app_url):
    with chromium_page(viewport={"width": 1400, "height": 1000}) as page:
        page.goto(app_url)
        page.locator("#more-settings").click()  # the draft shape is folded under "More settings"
        page.locator("#shape input").click()
        page.get_by_role("option", name="3,2,2,1").click()
        page.locator("#run").click()
        sync_api.expect(page.locator("#summary")).to_contain_text("tokens / target pass", timeout=60_000)
        page.locator("#next").click()
        tree = page.locator("#tree-plot .js-plotly-plot")
        sync_api.expect(tree).to_have_count(1, timeout=30_000)
        sync_api.expect(tree).to_contain_text("nodes verified in one target pass", timeout=15_000)
        sync_api.expect(tree).to_contain_text("not visited")  # the legend: every fate in the timeline's colours
        assert page.locator("#timeline .sv-round-tree").count() > 0  # the timeline marks tree rounds
        if os.environ.get("SPECVIZ_REFRESH_SCREENSHOT") == "1":
            page.locator("#tree-plot").screenshot(path=str(DOCS_SCREENSHOT.parent / "screenshot-tree.png"))


@pytest.mark.parametrize("tab", ["explorer"])
def test_the_page_fits_laptop_and_desktop_widths(app_url, tmp_path, tab):
    """One run, then the page at 1024, 1280 and 1920 px: nothing wider than the window, the replay table's last
    column (the decision) on screen, the plain text under the timeline; a screenshot at each width
    (docs/screenshot-WIDTH.png with SPECVIZ_REFRESH_SCREENSHOT=1)."""
    with chromium_page(viewport={"width": 1280, "height": 800}) as page:
        page.goto(app_url)
        page.locator("#run").click()
        sync_api.expect(page.locator("#summary")).to_contain_text(MEASURED, timeout=60_000)
        page.locator("#next").click()
        sync_api.expect(page.locator("#replay")).to_contain_text("Round 2 of", timeout=15_000)
        assert page.locator("#timeline .sv-plain").inner_text().strip()  # the generation as plain text
        for width in (1024, 1280, 1920):
            page.set_viewport_size({"width": width, "height": 800})
            page.wait_for_timeout(400)
            assert page.evaluate("document.documentElement.scrollWidth") <= width + 1, width
            decision = page.locator("#replay th").last.bounding_box()
            assert decision and decision["x"] + decision["width"] <= width, (width, decision)
            refresh = os.environ.get("SPECVIZ_REFRESH_SCREENSHOT") == "1"
            shot = (DOCS_SCREENSHOT.parent / f"screenshot-{width}.png") if refresh else tmp_path / f"{width}.png"
            page.screenshot(path=str(shot), full_page=True)
            assert shot.stat().st_size > 10_000


def test_presenter_view_enlarges_the_text(app_url, tmp_path):
    with chromium_page(viewport={"width": 1280, "height": 800}) as page:
        page.goto(app_url)
        size = lambda: page.locator(".sv-legend .sv-tok").first.evaluate("e => parseFloat(getComputedStyle(e).fontSize)")
        before = size()
        page.locator("#presenter input").check()
        page.wait_for_function("document.querySelector('.sv-presenter') !== null", timeout=10_000)
        assert size() > before
        refresh = os.environ.get("SPECVIZ_REFRESH_SCREENSHOT") == "1"
        shot = DOCS_SCREENSHOT.parent / "screenshot-presenter.png" if refresh else tmp_path / "presenter.png"
        page.screenshot(path=str(shot))


def test_a_link_reopens_the_settings(app_url):
    """A link carries the explorer's settings: opening it restores them; the link button writes one."""
    with chromium_page(viewport={"width": 1280, "height": 800}) as page:
        page.goto(app_url + "?prompt=Once+more+unto+the+breach&k=6&temperature=0&seed=3&shape=2,1,1&top_p=lots")
        sync_api.expect(page.locator("#prompt textarea")).to_have_value("Once more unto the breach", timeout=15_000)
        page.locator("#more-settings").click()  # the draft shape is folded under "More settings"
        sync_api.expect(page.locator("#shape input")).to_have_value("2,1,1")
        page.locator("#link-btn").click()
        link = page.locator("#link textarea")
        sync_api.expect(link).to_have_value(re.compile(r"^http://127\.0\.0\.1:\d+/\?prompt=Once\+more"), timeout=15_000)
        value = link.input_value()
        assert "k=6" in value and "temperature=0" in value and "seed=3" in value and "shape=2%2C1%2C1" in value
        page.goto(app_url + "?tab=learn")  # a link can open another tab
        sync_api.expect(page.locator("#lesson-step")).to_be_visible(timeout=15_000)


def test_run_pressed_as_a_link_opens_runs_the_links_settings(monkeypatch):
    """Run takes no click until the link's values are in the form: the page loader held back 1.5 s here, a click at
    once still runs the link's prompt (it ran the form's default prompt before)."""
    import gradio as gr

    from specviz.app import links

    def slow(store, loader=links.page_loader):
        load = loader(store)

        def from_request(request: gr.Request):
            time.sleep(1.5)
            return load(request)
        return from_request

    monkeypatch.setattr(links, "page_loader", slow)
    with serve(build_demo(tiny_store())) as url, chromium_page(viewport={"width": 1024, "height": 768}) as page:
        page.goto(url + "?prompt=Zebras+cross+the+river+at+noon&max_new_tokens=6&seed=5")
        page.locator("#run").click()  # playwright waits until it is enabled
        sync_api.expect(page.locator("#timeline .sv-prompt").first).to_be_visible(timeout=60_000)
        assert "noon" in page.locator("#timeline").inner_text()


def test_a_lesson_asks_then_reveals_from_a_run(app_url, tmp_path):
    with chromium_page(viewport={"width": 1280, "height": 900}) as page:
        page.goto(app_url)
        page.get_by_role("tab", name="Learn").click()
        sync_api.expect(page.locator("#lesson-step")).to_contain_text("Predict:", timeout=15_000)
        page.locator("#lesson-choice").get_by_text("fewer than one").click()
        page.locator("#lesson-reveal").click()
        answer = page.locator("#lesson-answer")
        sync_api.expect(answer).to_contain_text("Answer (from this run)", timeout=60_000)
        assert "passes per token" in answer.inner_text()
        refresh = os.environ.get("SPECVIZ_REFRESH_SCREENSHOT") == "1"
        page.screenshot(path=str(DOCS_SCREENSHOT.parent / "screenshot-lesson.png" if refresh else tmp_path / "l.png"))


def test_a_gallery_link_replays_at_once(app_url):
    with chromium_page(viewport={"width": 1280, "height": 800}) as page:
        page.goto(app_url + "?gallery=henry-tree")
        sync_api.expect(page.locator("#summary")).to_contain_text("tokens / target pass", timeout=15_000)
        sync_api.expect(page.locator("#timeline .sv-round-tree").first).to_be_visible()
        page.goto(app_url + "?gallery=juliet-own-tokenizer")  # a draft with its own tokenizer: both tokenizations
        sync_api.expect(page.locator("#summary")).to_contain_text("its own tokenizer", timeout=15_000)
        sync_api.expect(page.locator("#replay .sv-align-table")).to_be_visible()
        assert page.locator("#replay .sv-align-table tr").count() == 2


def test_the_temperature_lab_and_the_theory_explorer_draw(app_url, tmp_path):
    with chromium_page(viewport={"width": 1280, "height": 900}) as page:
        page.goto(app_url)
        page.locator("#what-if").click()  # the theory explorer opens; a button takes this run's numbers
        page.locator("#run").click()
        sync_api.expect(page.locator("#summary")).to_contain_text(MEASURED, timeout=60_000)
        # the run is over once its spread is measured: one model job at a time per visitor
        sync_api.expect(page.locator("#summary")).not_to_contain_text("Measuring the spread", timeout=120_000)
        page.locator("#from-run").click()
        sync_api.expect(page.locator("#what-if-plot .js-plotly-plot")).to_contain_text("this run, measured",
                                                                                      timeout=15_000)
        page.get_by_role("tab", name="Labs").click()
        page.get_by_role("tab", name="Temperature lab").click()
        page.get_by_role("button", name="Run temperature lab").click()
        sync_api.expect(page.get_by_text("Why: p and q")).to_be_visible(timeout=180_000)
        refresh = os.environ.get("SPECVIZ_REFRESH_SCREENSHOT") == "1"
        page.screenshot(path=str(DOCS_SCREENSHOT.parent / "screenshot-temperature.png" if refresh
                                 else tmp_path / "t.png"), full_page=True)
