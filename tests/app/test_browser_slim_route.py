"""The explorer in a real browser at 1024 px with an operator's Gemma-3 GGUF (a tiny one written here) and a feature
draft of its width named in SPECVIZ_EXTRA_MODELS: picking the GGUF as the target offers the feature draft, and a Run
with it decodes on the C stack (the summary names that forward for its baseline) and ends with the Run button back;
a link to such a run reopens with that draft picked. Same skip/require rules as test_browser.py."""
import pytest

from specviz.app import build_demo
from specviz.app.store import ModelStore
from specviz.runtime.native import gemma as native_gemma
from tests.helpers.app import chromium_page, needs_chromium, serve, sync_api
from tests.helpers.tiny_gguf import served_tiny_gemma

pytest.importorskip("gguf")
pytestmark = [needs_chromium, pytest.mark.slow,
              pytest.mark.skipif(not native_gemma.available(), reason="the C Gemma-3 pass needs AVX-512 VNNI")]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """(the app's URL, the folder of the tiny GGUF and its feature draft)."""
    with pytest.MonkeyPatch.context() as mp:
        root = tmp_path_factory.mktemp("browser-slim")
        served_tiny_gemma(root, mp)
        with serve(build_demo(ModelStore())) as url:
            yield url, root


@pytest.fixture
def app_url(served):
    return served[0]


def pick_the_tiny_pair(page):
    """The tiny GGUF picked as the target, then its feature draft among the drafts that fit it."""
    page.locator("#target input").click()
    page.get_by_role("option", name="tiny-gemma").click()
    page.locator("#draft input").click()
    option = page.get_by_role("option", name="tiny-feature")
    sync_api.expect(option).to_be_visible(timeout=30_000)
    option.click()


def test_the_explorer_runs_a_ggufs_feature_draft_on_the_c_stack(app_url):
    with chromium_page(viewport={"width": 1024, "height": 768}) as page:
        page.goto(app_url)
        sync_api.expect(page.locator("#run")).to_be_visible(timeout=30_000)
        pick_the_tiny_pair(page)
        page.locator("#prompt textarea").fill("a b the c a b the c a")
        page.locator("#run").click()
        sync_api.expect(page.locator("#summary")).to_contain_text("C stack", timeout=120_000)
        sync_api.expect(page.locator("#run")).to_have_text("Run", timeout=120_000)
        assert "tiny-feature" in page.locator("#summary").inner_text()
        assert page.locator("#timeline .sv-timeline .sv-round .sv-tok").count() > 0
        assert page.evaluate("document.documentElement.scrollWidth") <= 1024


def test_a_link_reopens_the_ggufs_run_with_its_feature_draft(app_url):
    with chromium_page(viewport={"width": 1024, "height": 768}) as page:
        page.goto(app_url + "?target=tiny-gemma&draft=tiny-feature&k=2&tab=explorer")
        sync_api.expect(page.locator("#draft input")).to_have_value("tiny-feature", timeout=30_000)
        sync_api.expect(page.locator("#target input")).to_have_value("tiny-gemma")
        page.locator("#prompt textarea").fill("a b the c a b the c a")
        page.locator("#run").click()
        sync_api.expect(page.locator("#summary")).to_contain_text("C stack", timeout=120_000)
        sync_api.expect(page.locator("#run")).to_have_text("Run", timeout=120_000)


def test_picking_a_draft_that_records_its_fastest_settings_sets_them_and_a_link_keeps_its_own_k(served):
    """The tiny draft's config records k = 4, stop 0.25 as its fastest sampled setting: picking it sets k and the
    stop to those (the form's default temperature is 0.8); a link that names k = 2 with it keeps k = 2."""
    import json

    from specviz.slim.feature_draft import CONFIG

    url, root = served
    config = root / "tiny-feature" / CONFIG
    before = config.read_text()
    config.write_text(json.dumps({**json.loads(before), "serving": {
        "greedy": {"k": 5, "draft_stop": 0.3}, "sampled": {"k": 4, "draft_stop": 0.25}, "measured": "here"}}))
    try:
        with chromium_page(viewport={"width": 1024, "height": 768}) as page:
            page.goto(url)
            sync_api.expect(page.locator("#run")).to_be_enabled(timeout=30_000)
            pick_the_tiny_pair(page)
            sync_api.expect(page.locator("#k input[type=number]")).to_have_value("4", timeout=15_000)
            page.locator("#more-settings").click()
            sync_api.expect(page.locator("#draft-stop input[type=number]")).to_have_value("0.25")
            assert "fastest measured sampled: k = 4, stop below q 0.25 (here)" in page.locator("#k").inner_text()
        with chromium_page(viewport={"width": 1024, "height": 768}) as page:
            page.goto(url + "?target=tiny-gemma&draft=tiny-feature&k=2&tab=explorer")
            sync_api.expect(page.locator("#draft input")).to_have_value("tiny-feature", timeout=30_000)
            sync_api.expect(page.locator("#run")).to_be_enabled(timeout=30_000)
            page.wait_for_timeout(1000)  # any change event the link's values fire has landed
            assert page.locator("#k input[type=number]").input_value() == "2"
    finally:
        config.write_text(before)
