"""Screenshots of the explorer's first screen as a visitor meets it, on the bundled models: at each size, the page
before a run, then after a run of the defaults (Run pressed, nothing else touched), the viewport only (what shows
without scrolling); prints where Run, the form and the timeline's first token sit.

    python scripts/measure/first_screen_shots.py [--out docs] [--sizes 1280x800 1024x768]

Writes OUT/first-screen-WIDTH.png (before), OUT/first-screen-WIDTH-run.png (after) and
OUT/first-screen-WIDTH-details.png (the run's first rejected draft clicked: its details pinned under its line).
Needs Debian's chromium and Playwright for Python (as the browser tests do). Every pixel is the real page during a real run.
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from specviz.app import build_demo  # noqa: E402
from specviz.app.store import ModelStore  # noqa: E402
from tests.helpers.app import chromium_page, serve, sync_api  # noqa: E402

DONE = re.compile(r"interleaved pairs|from one pair")  # the summary once the baseline and the spread are in
PLACES = {"Run": "#run", "prompt": "#prompt", "first ready run": "#gallery-row .sv-gallery-btn",
          "timeline's first token": "#timeline .sv-timeline .sv-round .sv-tok"}


def where(page) -> str:
    """Each place's top and bottom edge in px from the top of the viewport ("–" where it is not on the page)."""
    out = []
    for name, selector in PLACES.items():
        box = page.locator(selector).first.bounding_box() if page.locator(selector).count() else None
        out.append(f"{name} {box['y']:.0f}–{box['y'] + box['height']:.0f}" if box else f"{name} –")
    return ", ".join(out)


def shoot(url: str, width: int, height: int, out: Path) -> None:
    with chromium_page(viewport={"width": width, "height": height}) as page:
        page.goto(url)
        sync_api.expect(page.locator("#run")).to_be_visible(timeout=60_000)
        page.wait_for_timeout(1500)  # fonts and the page-load events
        page.screenshot(path=str(out / f"first-screen-{width}.png"))
        print(f"{width}x{height} before a run: {where(page)}")
        page.locator("#run").click()
        sync_api.expect(page.locator("#summary")).to_contain_text(DONE, timeout=300_000)
        sync_api.expect(page.locator("#run")).to_have_text("Run", timeout=300_000)
        page.mouse.move(0, 0)  # no button in its hover colour
        page.wait_for_timeout(500)
        page.screenshot(path=str(out / f"first-screen-{width}-run.png"))
        print(f"{width}x{height} after a run: {where(page)}")
        page.locator("#timeline .sv-timeline .sv-rejected").first.click()
        page.mouse.move(0, 0)  # pinned: the pointer has gone
        page.screenshot(path=str(out / f"first-screen-{width}-details.png"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "docs")
    ap.add_argument("--sizes", nargs="+", default=["1280x800", "1024x768"])
    args = ap.parse_args()
    with serve(build_demo(ModelStore())) as url:
        for size in args.sizes:
            width, height = map(int, size.split("x"))
            shoot(url, width, height, args.out)


if __name__ == "__main__":
    main()
