"""The explorer's first screen in a real browser, at a laptop's and a projector's sizes: without scrolling, the prompt,
Target, Draft, k and Run, then the gallery's first ready runs and the colours' legend before a run, the start of the
timeline after one; nothing wider than the window. A token's details show at once on hover, and on a click or a tap
(pinned until the next one elsewhere), larger in the presenter view. Same skip/require rules as test_browser.py."""
import pytest

from specviz.app import build_demo
from specviz.config import DEFAULTS
from specviz.views.summary import k_note
from tests.helpers.app import chromium_page, needs_chromium, serve, sync_api, tiny_store

pytestmark = [needs_chromium, pytest.mark.slow]
SIZES = [(1280, 800, False), (1024, 768, False), (1024, 768, True)]  # (width, height, presenter view)
FORM = ["#prompt", "#target", "#draft", "#k", "#run"]
TIP = "e => getComputedStyle(e, '::after').content"


@pytest.fixture(scope="module")
def app_url():
    with serve(build_demo(tiny_store())) as url:
        yield url


def on_first_screen(page, selector: str) -> None:
    """``selector``'s first element lies wholly inside the viewport, the page not scrolled."""
    size, box = page.viewport_size, page.locator(selector).first.bounding_box()
    assert page.evaluate("window.scrollY") == 0
    assert box is not None, selector
    assert box["x"] >= 0 and box["x"] + box["width"] <= size["width"], (selector, box, size)
    assert box["y"] >= 0 and box["y"] + box["height"] <= size["height"], (selector, box, size)


def no_horizontal_scroll(page) -> None:
    assert page.evaluate("document.documentElement.scrollWidth") <= page.viewport_size["width"]


def presenter_on(page) -> None:
    """The presenter view switched on, the page back at its top: the click scrolls the switch into view where the
    page is still laying out (a busy host: 38 px once), and the first screen is what shows at the top."""
    page.locator("#presenter input").check()
    page.wait_for_function("document.querySelector('.sv-presenter') !== null", timeout=10_000)
    page.evaluate("window.scrollTo(0, 0)")


@pytest.mark.parametrize("width, height, presenter", SIZES, ids=["1280x800", "1024x768", "presenter-1024x768"])
def test_the_first_screen_holds_the_form_run_and_then_the_timeline(app_url, width, height, presenter):
    with chromium_page(viewport={"width": width, "height": height}) as page:
        page.goto(app_url)
        sync_api.expect(page.locator("#run")).to_be_visible(timeout=30_000)
        if presenter:
            presenter_on(page)
        page.wait_for_timeout(500)  # fonts and layout settled
        for selector in FORM + ["#gallery-row .sv-gallery-btn", "#timeline .sv-legend"]:
            on_first_screen(page, selector)
        no_horizontal_scroll(page)
        assert not page.locator("#more-settings #shape").is_visible()  # the rest is folded
        assert k_note(page.locator("#draft input").input_value(), DEFAULTS.temperature) in page.locator("#k").inner_text()
        page.locator("#run").click()
        sync_api.expect(page.locator("#summary")).to_contain_text("predicted", timeout=60_000)
        sync_api.expect(page.locator("#run")).to_have_text("Run", timeout=120_000)  # baseline and spread done
        for selector in FORM + ["#timeline .sv-timeline .sv-round .sv-tok"]:
            on_first_screen(page, selector)  # the timeline's first round, under the form's eyes
        no_horizontal_scroll(page)


def test_a_tokens_details_show_on_hover_and_stay_on_a_tap(app_url):
    """On a touch screen too: the details appear at once (no title's delay), follow the pointer, stay pinned after a
    tap until a tap elsewhere, span the timeline without widening the page, and grow with the presenter view."""
    with chromium_page(viewport={"width": 1024, "height": 768}, has_touch=True) as page:
        page.goto(app_url)
        page.locator("#gallery-row .sv-gallery-btn").first.click()  # a ready run: no model work
        sync_api.expect(page.locator("#summary")).to_contain_text("tokens in", timeout=30_000)
        tokens = page.locator("#timeline .sv-timeline .sv-round .sv-tok")
        first, second = tokens.nth(0), tokens.nth(1)
        assert first.evaluate(TIP) == "none" and first.get_attribute("title") is None
        first.hover()
        shown = first.evaluate(TIP)
        assert "round 1" in shown and "p = " in shown  # at once: read in the same frame as the hover
        second.hover()
        assert first.evaluate(TIP) == "none" and "p = " in second.evaluate(TIP)
        page.mouse.move(2, 2)
        assert second.evaluate(TIP) == "none"
        first.tap()
        page.mouse.move(2, 2)
        assert "p = " in first.evaluate(TIP)  # pinned: the pointer has left
        no_horizontal_scroll(page)
        small = first.evaluate("e => parseFloat(getComputedStyle(e, '::after').fontSize)")
        page.locator("#summary").tap()
        assert first.evaluate(TIP) == "none"  # a tap elsewhere lets it go
        presenter_on(page)
        first.tap()
        assert first.evaluate("e => parseFloat(getComputedStyle(e, '::after').fontSize)") > small * 1.3
        no_horizontal_scroll(page)
