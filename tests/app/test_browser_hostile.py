"""Hostile prompts in a real browser: markup typed into the prompt is shown as text in the timeline,
its hover titles and the round replay, and never runs. Same skip/require rules as test_browser.py
(tests/apphelpers.py: skipped without playwright or chromium, a failure under SPECVIZ_REQUIRE_BROWSER=1)."""
import pytest

from specviz.app import build_demo
from tests.helpers.app import chromium_page, needs_chromium, serve, sync_api, tiny_store

pytestmark = [needs_chromium, pytest.mark.slow]
HOSTILE = {  # prompt -> a character that must reach the drafts' hover titles as itself
    "<script>window.__pwned=1</script>": "<", '<img src=x onerror="window.__pwned=1">': "<",
    '"quotes" & ampersands': '"', "&lt;b&gt; &amp;amp; &#x3C;": "&",  # entities typed stay entities, undecoded
}
GLYPHS = ("↵", "→", "␍")  # whitespace shown as glyphs: such tokens' text differs from their title's repr


@pytest.fixture(scope="module")
def app_url():
    # prompt-lookup drafts n-grams copied from the prompt, so the hostile text reaches the drafts' hover titles too
    with serve(build_demo(tiny_store(default_draft="prompt-lookup"))) as url:
        yield url


@pytest.fixture(scope="module")
def page(app_url):
    with chromium_page(viewport={"width": 1400, "height": 1000}) as page:
        yield page


def run(page, app_url, prompt):
    page.goto(app_url)
    page.locator("#prompt textarea").fill(prompt)
    page.locator("#more-settings").click()  # the baseline's checkbox is folded under "More settings"
    page.get_by_label("Also run the autoregressive baseline (measured speedup)").uncheck()
    page.locator("#run").click()
    summary = page.locator("#summary")
    sync_api.expect(summary).to_contain_text("predicted", timeout=60_000)
    sync_api.expect(summary).not_to_contain_text("running…", timeout=60_000)  # the decode finished
    sync_api.expect(page.locator("#replay")).to_contain_text("Round 1", timeout=60_000)  # and its views are in
    page.wait_for_timeout(300)  # an injected <img onerror> would fire on its own tick


@pytest.mark.parametrize("hostile", HOSTILE)
def test_hostile_prompt_is_shown_as_text_and_never_runs(page, app_url, hostile):
    prompt = f"{hostile} | {hostile} |"  # repeated: prompt-lookup matches " |" and drafts the markup's first tokens
    run(page, app_url, prompt)
    assert page.evaluate("typeof window.__pwned") == "undefined"  # no injected script or handler ran
    assert page.locator('img[src="x"]').count() == 0 and page.locator("#timeline .sv-timeline img").count() == 0
    assert page.locator("#timeline script, #replay script, #replay img").count() == 0
    timeline = page.locator("#timeline .sv-timeline")
    text = timeline.inner_text()
    assert prompt in text  # the markup as characters: neither run as markup, nor escaped twice, nor decoded

    tokens = timeline.locator(".sv-tok").evaluate_all(
        "els => els.map(e => [e.dataset.status, e.textContent, e.getAttribute('data-tip')])")  # the details
    generated = [(t, title) for status, t, title in tokens if status != "prompt"]
    assert generated and all(title for _, title in generated)
    for t, title in generated:  # a title starts with its token's text, repr()'d: the escaped text, decoded once
        if t == "◌":  # a token that completes no character: its bytes instead
            assert title.startswith("(bytes "), title
        elif not any(g in t for g in GLYPHS):
            assert title.startswith(f"{t!r}  round "), (t, title)
    titles = "\n".join(title for _, title in generated)
    assert HOSTILE[hostile] in titles, titles  # hostile characters reached the hover titles, as characters
    if "&" not in hostile:
        assert "&lt;" not in titles and "&quot;" not in titles and "&amp;" not in titles  # not escaped twice

    replay = page.locator("#replay .sv-tok").evaluate_all("els => els.map(e => e.getAttribute('data-tip'))")
    assert replay and HOSTILE[hostile] in "".join(replay)  # round 0 drafted the markup: its replay shows it
    if "&" not in hostile:
        assert "&lt;" not in "".join(replay) and "&quot;" not in "".join(replay)


def test_a_crafted_trace_is_refused_or_shown_as_text_and_never_runs(page, app_url, tmp_path):
    """Markup in every string field of an imported trace (names, token texts) is shown as text; markup in a
    number field (index, k) or an enum (stop reason) is refused by Trace.from_json with a readable error.
    Neither runs: no dialog, no injected element."""
    import json

    from tests.helpers.traces import sample_trace

    evil = '<img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script>'
    dialogs = []
    page.on("dialog", lambda d: dialogs.append(d.message) or d.dismiss())
    trace = sample_trace()
    trace.target_name, trace.draft_name = evil, f"**bold** [link](javascript:alert(1)) {evil}"
    trace.token_text = {t: evil for t in trace.token_text}
    good = tmp_path / "shown.json"
    good.write_text(trace.to_json())
    page.goto(app_url)
    page.locator("#upload input[type=file]").set_input_files(str(good))
    sync_api.expect(page.locator("#replay")).to_contain_text("Round 1", timeout=30_000)
    page.wait_for_timeout(300)
    assert evil in page.locator("#timeline .sv-timeline").inner_text()  # the markup as characters
    assert "javascript:alert(1)" in page.locator("#summary").inner_text()  # a name is text, not a link
    assert page.locator("#summary a, #summary img, #timeline img, #replay img, #summary script").count() == 0
    assert page.evaluate("typeof window.__pwned") == "undefined"
    for field, value in (("index", evil), ("k", evil), ("stop_reason", evil)):
        data = json.loads(trace.to_json())
        (data["rounds"][0] if field != "stop_reason" else data)[field] = value
        bad = tmp_path / f"bad-{field}.json"
        bad.write_text(json.dumps(data))
        page.goto(app_url)  # a fresh upload box
        page.locator("#upload input[type=file]").set_input_files(str(bad))
        sync_api.expect(page.get_by_text("malformed trace JSON").first).to_be_visible(timeout=15_000)
    assert page.evaluate("typeof window.__pwned") == "undefined" and dialogs == []


INJECTED = ("img", "form", "a", "input[type=password]", "script", "iframe")
MARKUP = ('<a href="https://x.test/">win</a><img src="https://x.test/t.png" onerror="window.__pwned=3">'
          '<form action="https://x.test/"><input type="password"></form>')


def elements(page) -> list[int]:
    """How many of each INJECTED kind the page holds, outside the upload box (which links the file it holds)."""
    return page.evaluate(f"() => {list(INJECTED)}.map(s => [...document.querySelectorAll(s)]"
                         ".filter(e => !e.closest('#upload')).length)")


def opened(page, url) -> list[int]:
    page.goto(url)
    sync_api.expect(page.locator("#run")).to_be_visible(timeout=30_000)
    page.wait_for_timeout(1500)  # the page-load events have run
    return elements(page)


def test_crafted_links_inject_no_element(page, app_url):
    """?gallery=MARKUP quotes it in its toast, ?shape=MARKUP in the toast of the run it makes: as text, and the
    page's count of img, form, a, password, script and iframe elements stays what a plain page has."""
    from urllib.parse import urlencode

    plain = opened(page, app_url)
    assert opened(page, f"{app_url}?{urlencode({'gallery': MARKUP})}") == plain
    toast = page.get_by_text("no gallery run called").first
    sync_api.expect(toast).to_be_visible(timeout=30_000)
    assert "<form" in toast.inner_text() and elements(page) == plain
    assert opened(page, f"{app_url}?{urlencode({'shape': MARKUP, 'prompt': MARKUP})}") == plain
    page.locator("#run").click()
    toast = page.get_by_text("unreadable tree").first
    sync_api.expect(toast).to_be_visible(timeout=30_000)
    page.wait_for_timeout(300)
    assert "<img" in toast.inner_text() and elements(page) == plain
    assert page.evaluate("typeof window.__pwned") == "undefined"


def test_markup_in_a_traces_config_injects_no_element(page, app_url, tmp_path):
    """Markup in a config value or name is refused with a readable toast that shows it as text."""
    import json

    from tests.helpers.traces import sample_trace

    plain = opened(page, app_url)
    for change in ({"rule": MARKUP}, {"k_policy": MARKUP}, {MARKUP[:60]: 1}):
        data = json.loads(sample_trace().to_json())
        data["config"].update(change)
        path = tmp_path / "config.json"
        path.write_text(json.dumps(data))
        opened(page, app_url)
        page.locator("#upload input[type=file]").set_input_files(str(path))
        sync_api.expect(page.locator(".toast-body").first).to_be_visible(timeout=15_000)
        page.wait_for_timeout(300)
        assert elements(page) == plain, change
    assert page.evaluate("typeof window.__pwned") == "undefined"
