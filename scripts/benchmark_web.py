"""Translation in the browser, measured: each model's page (`hf-bahdanau export --format web`) served on 127.0.0.1 by
a static file server, in headless Chromium (Debian's, driven by Playwright) on one WASM thread. Prints a markdown
table: the payload (what the page loads: the model, the runtime), the time from page load to the first translation,
and words per second (source words of test_2016_flickr, translated one sentence at a time).

    python3 scripts/benchmark_web.py --models runs/quick-de-en --sentences 200
    python3 scripts/benchmark_web.py --models runs/quick-de-en-web --screenshot docs/images/web.png --overwrite

A `--models` entry is a model folder (exported here into a temporary folder, int8 unless --quantization float32) or
a web export. `tests/test_web.py` serves its pages with `served` here.
"""

from __future__ import annotations

import argparse
import functools
import gzip
import json
import logging
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from demo_screenshot import page_of  # noqa: E402  (a sibling script)

EXAMPLE = "Ein Mann mit einem roten Hut fährt mit dem Fahrrad die Straße entlang."


class StaticFiles(SimpleHTTPRequestHandler):
    """A static file server's handler with the types module scripts and WebAssembly need; it adds the bytes it sends
    to its server's `sent` and writes no log lines."""

    extensions_map = {**SimpleHTTPRequestHandler.extensions_map, ".js": "text/javascript", ".mjs": "text/javascript",
                      ".wasm": "application/wasm", ".json": "application/json"}  # fmt: skip

    def copyfile(self, source, outputfile) -> None:  # noqa: ANN001
        data = source.read()
        self.server.sent[self.path] = len(data)
        outputfile.write(data)

    def log_message(self, *args) -> None:  # noqa: ANN002
        pass


@contextmanager
def served(folder: Path) -> Iterator[tuple[str, dict[str, int]]]:
    """`folder` served by Python's static file server on 127.0.0.1 in a thread while the block runs: its URL, and
    the bytes sent for each path asked for."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(StaticFiles, directory=str(folder)))
    server.sent = {}
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/", server.sent
    finally:
        server.shutdown()
        server.server_close()


def translate_in_page(page, texts: list[str], num_beams: int = 1) -> list[str]:  # noqa: ANN001
    """`window.hfBahdanau.translate` of each text, in order, once the page's model is ready."""
    page.wait_for_function("() => window.hfBahdanau")
    script = """async ([texts, numBeams]) => {
        await window.hfBahdanau.ready;
        const found = [];
        for (const text of texts) found.push(await window.hfBahdanau.translate(text, {numBeams}));
        return found;
    }"""
    return page.evaluate(script, [texts, num_beams])


def test_sentences(data_dir: Path, count: int) -> list[str]:
    """The first `count` German sentences of Multi30k's test_2016_flickr."""
    with gzip.open(data_dir / "multi30k" / "test_2016_flickr.de.gz", "rt", encoding="utf-8") as lines:
        return [line.strip() for _, line in zip(range(count), lines, strict=False)]


def megabytes(sent: dict[str, int], prefix: str) -> float:
    return sum(size for path, size in sent.items() if path.startswith(prefix)) / 1e6


def measure(page_folder: Path, texts: list[str], num_beams: int, screenshot: Path | None) -> dict[str, float]:
    """One page's figures: MB sent (the model, the runtime and the page), seconds from navigation to the first
    translation, and words per second over `texts`."""
    outside: list[str] = []
    with served(page_folder) as (url, sent), page_of(url, outside, width=1000, height=300) as page:
        page.wait_for_function("() => window.hfBahdanau")
        first = page.evaluate(  # performance.now(): milliseconds since the page was asked for
            """async ([text, numBeams]) => {
                await window.hfBahdanau.ready;
                const ready = performance.now();
                await window.hfBahdanau.translate(text, {numBeams});
                return [ready / 1000, performance.now() / 1000];
            }""",
            [texts[0], num_beams],
        )
        start = time.perf_counter()
        translate_in_page(page, texts, num_beams)
        seconds = time.perf_counter() - start
        if screenshot:
            page.locator("#source").fill(EXAMPLE)
            page.locator("#beams").select_option(str(num_beams))
            page.locator("#translate").click()
            page.wait_for_function("() => document.querySelector('#translation').value")
            page.screenshot(path=screenshot)
    if outside:
        raise SystemExit(f"the page asked for files elsewhere: {outside}")
    return {
        "model_mb": megabytes(sent, "/model/"),
        "runtime_mb": sum(sent.values()) / 1e6 - megabytes(sent, "/model/"),
        "ready_s": first[0],
        "first_s": first[1],
        "words_per_s": sum(len(text.split()) for text in texts) / seconds,
    }


def page_folder(model: str, scratch: Path, quantization: str) -> Path:
    """`model` if it is a web export, else its web export made in `scratch`."""
    from hf_bahdanau.decoding.export.web import export_web, is_web_folder

    if is_web_folder(model):
        return Path(model)
    return export_web(model, scratch / Path(model).name, quantization)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", required=True, help="Model folders or web exports.")
    parser.add_argument("--quantization", choices=("int8", "float32"), default="int8")
    parser.add_argument("--sentences", type=int, default=200, help="test_2016_flickr sentences translated")
    parser.add_argument("--num-beams", type=int, default=1)
    parser.add_argument("--data-dir", type=Path, default=HERE.parent.parent / "shared" / "data")
    parser.add_argument("--screenshot", type=Path, help="A PNG of the first model's page with a translation.")
    parser.add_argument("--overwrite", action="store_true", help="Replace an existing --screenshot file.")
    args = parser.parse_args()
    if args.screenshot and args.screenshot.exists() and not args.overwrite:
        parser.error(f"{args.screenshot} exists: pass --overwrite to replace it")
    logging.basicConfig(level=logging.WARNING)
    texts = test_sentences(args.data_dir, args.sentences)
    print("| model | ONNX | model MB | runtime and page MB | ready (s) | first translation (s) | words/s |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="benchmark_web_") as scratch:
        for index, model in enumerate(args.models):
            folder = page_folder(model, Path(scratch), args.quantization)
            quantization = json.loads((folder / "model" / "page.json").read_text())["quantization"]
            shot = args.screenshot if index == 0 else None
            found = measure(folder, texts, args.num_beams, shot)
            row = [Path(model).name, quantization, f"{found['model_mb']:.1f}", f"{found['runtime_mb']:.1f}",
                   f"{found['ready_s']:.2f}", f"{found['first_s']:.2f}", f"{found['words_per_s']:.0f}"]  # fmt: skip
            print(f"| {' | '.join(row)} |", flush=True)


if __name__ == "__main__":
    main()
