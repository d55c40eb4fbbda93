"""Throughput and latency of `hf-bahdanau serve` under a bounded load on 127.0.0.1.

The same sentences (the first --sentences of Multi30k's test_2016_flickr source side) are translated three ways at the
same engine, beams and threads:
  offline   `translate`'s own path in this process (length-sorted batches of --offline-batch-size), no HTTP;
  batched   the server with dynamic batching, --clients concurrent clients each sending one sentence a request;
  one-by-one  the same server and clients with batches of one sentence and no wait: one request at a time.
Each server runs in its own process (`hf-bahdanau serve --port 0`); the load generator (aiohttp, asyncio) runs here.
Offline and batched take turns --repeats times (a busy machine slows some rounds: the medians are compared, each
round is printed); one-by-one runs once. Prints a Markdown table: sentences/s, the ratios, and each request's
p50/p95 latency.

  python scripts/benchmark_server.py --model runs/quick-de-en --threads 1 --clients 32 --sentences 400
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import os
import re
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import aiohttp
import httpx

REPO = Path(__file__).resolve().parents[1]


def read_sentences(data_dir: Path, language: str, count: int) -> list[str]:
    with gzip.open(data_dir / "multi30k" / f"test_2016_flickr.{language}.gz", "rt", encoding="utf-8") as lines:
        return [line.strip() for line, _ in zip(lines, range(count), strict=False)]


def offline(args: argparse.Namespace) -> Callable[[list[str]], float]:
    """A function: the seconds `translate`'s path takes for some sentences (the model loaded once, beforehand)."""
    from hf_bahdanau import register
    from hf_bahdanau.serving.model import Decoding, ServedModel

    register()
    decoding = Decoding(engine=args.engine, num_beams=args.num_beams, threads=args.threads,
                        batch_size=args.offline_batch_size)  # fmt: skip
    model = ServedModel(args.model, decoding)

    def seconds(sentences: list[str]) -> float:
        start = time.perf_counter()
        model.translate(sentences)
        return time.perf_counter() - start

    return seconds


def start_server(args: argparse.Namespace, *options: str) -> tuple[subprocess.Popen, str]:
    command = [
        sys.executable,
        "-m",
        "hf_bahdanau.cli",
        "serve",
        "--model",
        args.model,
        "--engine",
        args.engine,
        "--threads",
        str(args.threads),
        "--port",
        "0",
        "--queue-limit",
        str(10 * args.sentences),
        *options,
    ]
    if args.num_beams:
        command += ["--num-beams", str(args.num_beams)]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env=env)  # fmt: skip
    for line in process.stderr:
        found = re.search(r"running on (http://127\.0\.0\.1:\d+)", line)
        if found:  # the rest of the log read on, so the server never waits on a full pipe
            threading.Thread(target=process.stderr.read, daemon=True).start()
            return process, found.group(1)
    raise SystemExit(f"the server did not start (exit {process.wait()})")


async def load(url: str, sentences: list[str], clients: int, source: str, target: str) -> tuple[float, list[float]]:
    """Seconds for `clients` concurrent clients to get every sentence translated (one a request), and each
    request's latency."""
    queue = list(reversed(sentences))
    latencies: list[float] = []

    async def client(http: aiohttp.ClientSession) -> None:
        while queue:
            sentence = queue.pop()
            sent = time.perf_counter()
            async with http.post("/translate", json={"q": sentence, "source": source, "target": target}) as response:
                response.raise_for_status()
                await response.json()
            latencies.append(time.perf_counter() - sent)

    connector = aiohttp.TCPConnector(limit=clients)
    async with aiohttp.ClientSession(url, connector=connector, timeout=aiohttp.ClientTimeout(600)) as http:
        await client_warm_up(http, sentences[0], source, target)
        start = time.perf_counter()
        await asyncio.wait_for(asyncio.gather(*(client(http) for _ in range(clients))), timeout=3600)
    return time.perf_counter() - start, latencies


async def client_warm_up(http: aiohttp.ClientSession, sentence: str, source: str, target: str) -> None:
    async with http.post("/translate", json={"q": sentence, "source": source, "target": target}) as response:
        response.raise_for_status()


class Server:
    """A server process and its load: `run(sentences)` -> (seconds, latencies); `batches` translated so far."""

    def __init__(self, args: argparse.Namespace, *options: str) -> None:
        self.args = args
        self.process, self.url = start_server(args, *options)
        model = httpx.get(self.url + "/health", timeout=30).json()["models"][0]
        self.source, self.target = model["source"], model["target"]

    def run(self, sentences: list[str]) -> tuple[float, list[float]]:
        return asyncio.run(load(self.url, sentences, self.args.clients, self.source, self.target))

    @property
    def batches(self) -> int:
        return httpx.get(self.url + "/health", timeout=30).json()["models"][0]["batches"]

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(60)


def percentile(values: list[float], share: float) -> float:
    return statistics.quantiles(values, n=100)[int(share * 100) - 1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--engine", default="torch", choices=("torch", "ctranslate2"))
    parser.add_argument("--num-beams", type=int)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--sentences", type=int, default=400)
    parser.add_argument("--source-language", default="de")
    parser.add_argument("--batch-wait-ms", type=float, default=20.0, help="the batched server's --batch-wait-ms")
    parser.add_argument("--repeats", type=int, default=3, help="rounds of offline and batched, taking turns")
    parser.add_argument("--offline-batch-size", type=int, default=32, help="translate's --batch-size")
    parser.add_argument("--data-dir", default=os.environ.get("HF_BAHDANAU_DATA_DIR", str(REPO.parent / "shared/data")))
    args = parser.parse_args()
    sentences = read_sentences(Path(args.data_dir), args.source_language, args.sentences)
    n = len(sentences)
    translate_offline = offline(args)
    batched = Server(args, "--batch-wait-ms", str(args.batch_wait_ms))
    offline_rounds, batched_rounds, batched_latencies = [], [], []
    try:
        for round_ in range(1, args.repeats + 1):
            offline_rounds.append(translate_offline(sentences))
            batches = batched.batches
            seconds, latencies = batched.run(sentences)
            batched_rounds.append(seconds)
            batched_latencies += latencies
            batch_size = n / (batched.batches - batches - 1)  # less the warm-up request
            share = 100 * offline_rounds[-1] / seconds
            print(f"round {round_}: offline {n / offline_rounds[-1]:.1f} sentences/s, batched {n / seconds:.1f} "
                  f"({batch_size:.1f} sentences a batch): {share:.0f}%", flush=True)  # fmt: skip
    finally:
        batched.stop()
    single = Server(args, "--batch-size", "1", "--batch-wait-ms", "0")
    try:
        single_seconds, single_latencies = single.run(sentences)
    finally:
        single.stop()
    offline_seconds, batched_seconds = statistics.median(offline_rounds), statistics.median(batched_rounds)
    rows = [
        (f"offline `translate` (batches of {args.offline_batch_size})", offline_seconds, None),
        ("server, dynamic batching", batched_seconds, batched_latencies),
        ("server, one request at a time", single_seconds, single_latencies),
    ]
    print(f"\n{n} sentences, {args.clients} clients, engine {args.engine}, {args.threads} thread(s), median of "
          f"{args.repeats} rounds (one-at-a-time: one)\n")  # fmt: skip
    print("| way | sentences/s | p50 latency | p95 latency |\n|---|---:|---:|---:|")
    for name, seconds, latencies in rows:
        p50 = f"{1000 * statistics.median(latencies):.0f} ms" if latencies else "-"
        p95 = f"{1000 * percentile(latencies, 0.95):.0f} ms" if latencies else "-"
        print(f"| {name} | {n / seconds:.1f} | {p50} | {p95} |")
    print(f"\nbatched / one at a time: {single_seconds / batched_seconds:.2f}x (goal 4x); "
          f"batched / offline: {100 * offline_seconds / batched_seconds:.0f}% (goal 70%)")  # fmt: skip


if __name__ == "__main__":
    main()
