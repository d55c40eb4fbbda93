"""Serve `hf-bahdanau demo` on 127.0.0.1, translate a sentence on the page in headless Chromium (Debian's, driven by
Playwright) and take a screenshot, e.g. the README's:

    python scripts/demo_screenshot.py --model runs/quick-de-en --output docs/images/demo.png --overwrite

`tests/test_demo.py` drives the page with the functions here. Chromium is started without any network service of
its own (no updates, sync or QUIC), and every request that leaves the demo's address is refused and recorded.
"""

from __future__ import annotations

import argparse
import logging
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

logger = logging.getLogger("demo_screenshot")

CHROMIUM = "/usr/bin/chromium"  # Debian's package `chromium`
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]  # fmt: skip
TIMEOUT_MS = 120_000  # a translation on a busy 2-core machine


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextmanager
def served(model: str) -> Iterator[str]:
    """The demo of `model` served on 127.0.0.1 in a thread while the block runs; its URL."""
    from hf_bahdanau.serving.demo import build_demo, launch

    demo = build_demo(model)
    port = free_port()
    launch(demo, port=port, block=False)
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        demo.close()


@contextmanager
def page_of(
    url: str, outside: list[str], width: int = 1200, height: int = 1100, init_script: str | None = None
) -> Iterator[Any]:
    """A Playwright page of headless Chromium opened at `url`; a request for anything but `url`'s server is refused
    and appended to `outside`. `init_script`: JavaScript run in the page before its own scripts."""
    from playwright.sync_api import sync_playwright

    def only_local(route: Any) -> None:
        if route.request.url.startswith(url):
            route.continue_()
        else:
            outside.append(route.request.url)
            route.abort()

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": width, "height": height})
            page.set_default_timeout(TIMEOUT_MS)
            page.route("**/*", only_local)
            if init_script:
                page.add_init_script(init_script)
            page.goto(url)
            yield page
        finally:
            browser.close()


def translate_on_page(page: Any, text: str) -> dict[str, Any]:
    """Type `text`, press Translate and wait for the answer: the translation shown, the n-best rows and the
    attention image's natural size (both None when the page shows no translation; rows as lists of cells: rank, score,
    translation), and the page's message."""
    from playwright.sync_api import TimeoutError, expect

    busy = "document.querySelector('.pending, .progress-text, .eta-bar')"  # gradio's marks of a running event
    page.wait_for_function(f"() => !{busy}")  # an earlier event (a redraw) would write its outputs after ours
    page.locator("#source textarea").fill(text)
    page.locator("#translate").click()
    try:
        page.wait_for_function(f"() => {busy}", timeout=5000)
    except TimeoutError:  # over before the first look
        pass
    page.wait_for_function(f"() => !{busy}")
    translation = page.locator("#translation textarea").input_value()
    size = rows = None
    if not translation:  # then the page says why, once its markdown is rendered
        page.wait_for_function("() => document.querySelector('#message').innerText.trim()")
    else:
        image = page.locator("#attention img")
        expect(image).to_be_visible()
        page.wait_for_function("() => document.querySelector('#attention img').complete")
        size = image.evaluate("img => [img.naturalWidth, img.naturalHeight]")
        expect(page.locator("#nbest [role=gridcell]").first).to_be_visible()
        rows = [row.locator("[role=gridcell]").all_inner_texts() for row in page.locator("#nbest [role=row]").all()]
        rows = [cells for cells in rows if cells]  # the header row has column headers, no cells
    return {"translation": translation, "rows": rows, "image_size": size,
            "message": page.locator("#message").inner_text()}  # fmt: skip


def choose(page: Any, dropdown: str, option: str) -> str:
    """Choose `option` in the dropdown of id `dropdown` (e.g. "head", "1") and wait for the attention image to be
    redrawn; the new image's address."""
    before = page.locator("#attention img").get_attribute("src")
    page.locator(f"#{dropdown} input").click()
    page.get_by_role("option", name=option, exact=True).click()
    page.wait_for_function("(before) => document.querySelector('#attention img')?.src !== before", arg=before)
    return page.locator("#attention img").get_attribute("src")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="A model folder or a Hub repo id.")
    parser.add_argument("--text", default="Ein Mann mit einem roten Hut fährt mit dem Fahrrad die Straße entlang.")
    parser.add_argument("--output", required=True, help="The screenshot (PNG); an existing file needs --overwrite.")
    parser.add_argument("--overwrite", action="store_true", help="Replace an existing --output file.")
    args = parser.parse_args()
    if Path(args.output).exists() and not args.overwrite:
        parser.error(f"{args.output} exists: pass --overwrite to replace it")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    outside: list[str] = []
    with served(args.model) as url, page_of(url, outside) as page:
        shown = translate_on_page(page, args.text)
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=args.output, full_page=True)
    logger.info("translation %r, attention image %s; screenshot %s", shown["translation"], shown["image_size"],
                args.output)  # fmt: skip
    if outside:
        logger.warning("refused requests outside the demo: %s", outside)


if __name__ == "__main__":
    main()
