"""What quality estimates add to translation time: CPU time of `Translator.translate` without and with
`quality=True`, in pairs.

The model is loaded once and warmed up on one batch; then each round translates the split's first N sentences
without and with estimates (which goes first alternates), on the threads given, timed by `time.process_time()`. The
figure is the median of the rounds' differences over the median time without: a pair's two runs are seconds apart,
so the machine's slower drifts cancel. Python's full garbage collections (the estimates' objects make them come
sooner; each walks the process's some 400,000 objects) are counted and timed apart, since a median leaves out the
few rounds they fall in. Prints a Markdown table row and the collections, and writes both as JSON (`--output`).

    OMP_NUM_THREADS=1 HF_BAHDANAU_DATA_DIR=../shared/data python scripts/benchmark_quality_cost.py \\
        --model runs/multi30k-de-en --num-beams 1 --sentences 1000 --rounds 6
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import time
from pathlib import Path

from hf_bahdanau import register
from hf_bahdanau.choices import ENGINES, QUANTIZATIONS
from hf_bahdanau.data.corpora import folder_split
from hf_bahdanau.decoding.translator import Translator


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="A model folder with a quality estimator.")
    parser.add_argument("--engine", choices=ENGINES, default="torch")
    parser.add_argument("--quantize", choices=QUANTIZATIONS, help="CTranslate2's computation (default: as stored).")
    parser.add_argument("--num-beams", type=int, default=5, help="Beams (default 5; 1: greedy).")
    parser.add_argument("--split", default="test", help="The split to translate (default: test, test_2016_flickr).")
    parser.add_argument("--sentences", type=int, default=300, help="The split's first N sentences (default 300).")
    parser.add_argument("--rounds", type=int, default=6, help="Pairs of runs (default 6).")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads (default 1).")
    parser.add_argument("--output", help="A JSON file for the times.")
    return parser.parse_args(argv)


def rounds(translate, texts: list[str], count: int) -> tuple[list[float], list[float], dict[str, list[float]]]:
    """The CPU seconds of `translate(texts, quality)` without and with estimates, `count` pairs, which runs first
    alternating; and the full garbage collections in each (`{"plain": [count, seconds], "with_estimates": ...}`)."""
    plain: list[float] = []
    estimated: list[float] = []
    collections = {"plain": [0, 0.0], "with_estimates": [0, 0.0]}
    running = {"condition": "plain", "start": 0.0}

    def watch(phase: str, info: dict) -> None:  # gc.callbacks: each collection's start and stop
        if info["generation"] != 2:
            return
        if phase == "start":
            running["start"] = time.process_time()
            return
        tally = collections[running["condition"]]
        tally[0] += 1
        tally[1] += time.process_time() - running["start"]

    gc.callbacks.append(watch)
    try:
        for round_ in range(count):
            for quality in (False, True) if round_ % 2 == 0 else (True, False):
                running["condition"] = "with_estimates" if quality else "plain"
                start = time.process_time()
                translate(texts, quality)
                (estimated if quality else plain).append(time.process_time() - start)
    finally:
        gc.callbacks.remove(watch)
    return plain, estimated, collections


def added(plain: list[float], estimated: list[float]) -> float:
    """The median of the pairs' differences over the median time without estimates."""
    differences = [with_ - without for without, with_ in zip(plain, estimated, strict=True)]
    return statistics.median(differences) / statistics.median(plain)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    register()
    sources, _ = folder_split(Path(args.model), args.split, args.sentences)
    translator = Translator.from_folder(args.model, engine=args.engine, quantize=args.quantize, threads=args.threads)

    def translate(texts: list[str], quality: bool) -> None:
        translator.translate(texts, num_beams=args.num_beams, quality=quality)

    for quality in (False, True):  # warm-up
        translate(sources[: translator.batch_size or 32], quality)
    plain, estimated, collections = rounds(translate, sources, args.rounds)
    search = "greedy" if args.num_beams == 1 else f"beam {args.num_beams}"
    engine = f"{args.engine} {args.quantize or ''}".strip()
    print(f"| {Path(args.model).name} | {engine} | {search} | {len(sources):,} | {statistics.median(plain):.2f} s | "
          f"{statistics.median(estimated):.2f} s | {added(plain, estimated):+.1%} |")  # fmt: skip
    print("full garbage collections: " + ", ".join(f"{name.replace('_', ' ')} {count} ({seconds:.2f} s)"
                                                   for name, (count, seconds) in collections.items()))  # fmt: skip
    if args.output:
        times = {"plain": plain, "with_estimates": estimated, "added": added(plain, estimated),
                 "full_collections": collections}  # fmt: skip
        Path(args.output).write_text(json.dumps(times, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
