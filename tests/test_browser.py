"""A real browser drives the app: run an example, hover details on coloured tokens, every chart
drawn, stepping through rounds; saves docs/screenshot.png. Needs Debian's chromium and playwright
(CI: apt-get install -y chromium; pip install playwright); skipped without them."""
import os
import re
import socket
from pathlib import Path

import pytest

from specviz import DEFAULT_TARGET, list_models
from specviz.config import EXAMPLE_PROMPTS
from specviz.handlers import ModelStore
from specviz.ui import build_demo, launch

CHROMIUM = "/usr/bin/chromium"
SCREENSHOT = Path(__file__).resolve().parent.parent / "docs" / "screenshot.png"
if os.environ.get("SPECVIZ_REQUIRE_BROWSER") == "1":  # CI: a missing browser is a failure, not a skip
    import playwright.sync_api as sync_api

    assert os.path.exists(CHROMIUM), f"{CHROMIUM} is missing (apt-get install -y chromium)"
else:
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install playwright)")
pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM),
                                reason=f"{CHROMIUM} is missing (apt-get install -y chromium)")


def tiny_store():
    from transformers import AutoTokenizer

    from specviz.models import ASSETS, load_drafter
    from tests.conftest import perturbed, tiny_llama

    tok = AutoTokenizer.from_pretrained(ASSETS / "tokenizer")
    target = tiny_llama(vocab=len(tok), window=256, sharpen=20.0)
    draft = perturbed(target, scale=0.3)
    return ModelStore(load_model=lambda name: (target, tok),
                      load_drafter=lambda name: draft if name == "tiny" else load_drafter(name),
                      list_targets=lambda: ["tiny-target"], list_drafters=lambda: ["tiny", "prompt-lookup"],
                      default_target="tiny-target")


@pytest.fixture(scope="module")
def app_url():
    # the bundled models make a meaningful screenshot; tiny random ones stand in where they are absent
    store = ModelStore() if DEFAULT_TARGET in list_models() else tiny_store()
    demo = build_demo(store)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    launch(demo, prevent_thread_lock=True, server_name="127.0.0.1", server_port=port, quiet=True)
    yield f"http://127.0.0.1:{port}/"
    demo.close()


def test_run_an_example_and_step_through_rounds(app_url):
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=[
            "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update"])
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(app_url)
            example = EXAMPLE_PROMPTS[2]
            page.get_by_text(example, exact=True).first.click()  # an example fills the prompt
            sync_api.expect(page.locator("#prompt textarea")).to_have_value(example)
            page.locator("#run").click()
            sync_api.expect(page.locator("#summary")).to_contain_text("predicted", timeout=60_000)
            sync_api.expect(page.locator("#summary")).to_contain_text(re.compile(r"measured [\d.]+×"), timeout=60_000)  # baseline in
            tokens = page.locator("#timeline .sv-timeline .sv-round .sv-tok")
            assert tokens.count() > 0
            title = tokens.first.get_attribute("title")
            assert "p = " in title and "round 0" in title
            colour = tokens.first.evaluate("e => getComputedStyle(e).backgroundColor")
            assert colour not in ("rgba(0, 0, 0, 0)", "transparent")  # the timeline's CSS reached the page
            sync_api.expect(page.locator(".js-plotly-plot")).to_have_count(6, timeout=30_000)  # 4 charts + 2 replay
            before = page.locator("#replay").inner_text()
            assert "Round 0" in before
            page.locator("#next").click()
            sync_api.expect(page.locator("#replay")).to_contain_text("Round 1", timeout=15_000)
            assert page.locator("#replay").inner_text() != before
            SCREENSHOT.parent.mkdir(exist_ok=True)
            page.screenshot(path=str(SCREENSHOT), full_page=True)
        finally:
            browser.close()
