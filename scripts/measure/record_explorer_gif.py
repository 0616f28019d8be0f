"""Record the README's animated capture: the explorer running an example on the bundled models, the timeline
streaming in round by round, as a small GIF (docs/explorer.gif).

    python scripts/measure/record_explorer_gif.py [--out docs/explorer.gif] [--width 760] [--every 0.1]

Needs Debian's chromium and Playwright for Python (as the browser tests do); about a minute on 2 cores. Every
frame is a screenshot of the real page during a real run: nothing is drawn by hand.
"""
from __future__ import annotations

import argparse
import io
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from PIL import Image  # noqa: E402 (gradio's dependency)

from specviz.app import build_demo  # noqa: E402
from specviz.app.store import ModelStore  # noqa: E402
from specviz.config import EXAMPLE_PROMPTS  # noqa: E402
from tests.helpers.app import chromium_page, serve, sync_api  # noqa: E402

DONE = re.compile(r"measured [\d.]+×")  # the summary once the baseline has run: the run is over


def frames_of_a_run(url: str, every_s: float, viewport: dict) -> list[bytes]:
    """PNG screenshots of the prompt, summary and timeline while one run streams in, then a few of the end."""
    shots = []
    with chromium_page(viewport=viewport) as page:
        page.goto(url)
        page.get_by_text(EXAMPLE_PROMPTS[0], exact=True).first.click()
        page.locator("#run").click()
        start = time.perf_counter()
        while time.perf_counter() - start < 90 and len(shots) < 120:
            shots.append(_shot(page))
            if DONE.search(page.locator("#summary").inner_text()):
                break
            time.sleep(every_s)
        sync_api.expect(page.locator("#summary")).to_contain_text(DONE, timeout=60_000)
        shots += [_shot(page)] * 12  # hold the finished run for a couple of seconds
    return shots


def _shot(page) -> bytes:
    """The top of the page (the form, the summary and the timeline), whatever a click scrolled to."""
    page.evaluate("window.scrollTo(0, 0)")
    return page.screenshot()


def to_gif(shots: list[bytes], out: Path, width: int, every_s: float) -> None:
    images = []
    for png in shots:
        im = Image.open(io.BytesIO(png)).convert("RGB")
        im = im.resize((width, round(im.height * width / im.width)), Image.LANCZOS)
        images.append(im)
    height = max(im.height for im in images)
    canvas = [Image.new("RGB", (width, height), "white") for _ in images]
    for c, im in zip(canvas, images):
        c.paste(im, (0, 0))
    palette = canvas[-1].quantize(colors=64, method=Image.MEDIANCUT)
    frames = [c.quantize(palette=palette, dither=Image.Dither.NONE) for c in canvas]
    frames[0].save(out, save_all=True, append_images=frames[1:], duration=int(every_s * 1000), loop=0, optimize=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "explorer.gif")
    ap.add_argument("--width", type=int, default=760)
    ap.add_argument("--every", type=float, default=0.1, help="seconds between frames")
    args = ap.parse_args()
    with serve(build_demo(ModelStore())) as url:
        shots = frames_of_a_run(url, args.every, {"width": 1280, "height": 900})
    to_gif(shots, args.out, args.width, args.every)
    print(f"{len(shots)} frames -> {args.out} ({args.out.stat().st_size / 1024:.0f} KiB)")


if __name__ == "__main__":
    main()
