"""File translation speed: `translate`'s length-sorted token batches against fixed-size batches in input order.

The file is Multi30k's test_2016_flickr source side repeated to `--lines` lines. Both ways translate it chunk by
chunk (`decoding.batching.SORT_WINDOW` lines), in turn (fixed, sorted, fixed, ...), so that noise from other processes
hits both alike; the table gives each way's total time, sentences/s and how many translations differ.

- fixed: the pipeline (`generate()`) in input order, `--batch-size` sentences a batch;
- sorted: the `Translator`, batches of at most `--batch-tokens` padded source tokens (and `--batch-size` sentences
  with `--cap`), as `hf-bahdanau translate --batch-tokens` does; each translation bounded by `length_bound` of its
  source (translate's default); the package's search, which lets each sentence leave the batch once it is final;
- sorted, unbounded: the same with the model's own `max_new_tokens` (what sorting alone gives).

    HF_BAHDANAU_DATA_DIR=../shared/data python scripts/benchmark_translate_file.py --model runs/quick-de-en \\
        --lines 10000 --threads 2 --num-beams 5 --batch-tokens 2048

The table is logged (and written to `--output`); a warning names the first lines whose translations differ from the
fixed way's.
"""

from __future__ import annotations

import argparse
import gzip
import logging
import os
import time
from pathlib import Path

import benchmark_speed as shared  # scripts/ is on sys.path when this file runs as a script
import torch

from hf_bahdanau import register
from hf_bahdanau.decoding.batching import SORT_WINDOW
from hf_bahdanau.decoding.loading import load_translation_model
from hf_bahdanau.decoding.translator import Translator
from hf_bahdanau.models.pipelines import TranslationPipeline

logger = logging.getLogger("benchmark_translate_file")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--lines", type=int, default=10_000)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--num-beams", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--batch-tokens", type=int, default=2048)
    parser.add_argument("--cap", action="store_true", help="Sorted batches also hold at most --batch-size sentences.")
    parser.add_argument("--output", type=Path, help="Write the table to this Markdown file.")
    parser.add_argument("--skip-unbounded", action="store_true", help="Leave out the 'sorted, unbounded' way.")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    torch.set_num_threads(args.threads)
    register()
    model, tokenizer = load_translation_model(args.model)
    pipe = TranslationPipeline(model=model, tokenizer=tokenizer, device=model.device)
    cap = args.batch_size if args.cap else None
    translator = Translator(model, tokenizer, batch_size=cap, batch_tokens=args.batch_tokens)
    source = model.config.source_language or "de"
    path = Path(os.environ.get("HF_BAHDANAU_DATA_DIR", "../shared/data")) / "multi30k" / f"test_2016_flickr.{source}.gz"
    sentences = gzip.open(path, "rt", encoding="utf-8").read().splitlines()
    lines = [sentences[i % len(sentences)] for i in range(args.lines)]
    options = {"num_beams": args.num_beams}
    times = {"fixed": 0.0, "sorted": 0.0} if args.skip_unbounded else {"fixed": 0.0, "sorted": 0.0, "unbounded": 0.0}
    outputs: dict[str, list[str]] = {name: [] for name in times}
    unbounded = {"max_new_tokens": model.generation_config.max_new_tokens}
    for start in range(0, len(lines), SORT_WINDOW):
        chunk = lines[start : start + SORT_WINDOW]
        began = time.perf_counter()
        outputs["fixed"] += [row["translation_text"] for row in pipe(chunk, batch_size=args.batch_size, **options)]
        times["fixed"] += time.perf_counter() - began
        for name, extra in (("sorted", {}), ("unbounded", unbounded))[: len(times) - 1]:
            began = time.perf_counter()
            outputs[name] += [found.text for found in translator.translate(chunk, **options, **extra)]
            times[name] += time.perf_counter() - began
        differ = [sum(a != b for a, b in zip(outputs["fixed"], outputs[name], strict=True)) for name in times]
        logger.info("%d lines: %s s, %s differ", len(outputs["fixed"]), [round(t, 1) for t in times.values()], differ)
    unlike = {
        name: [i + 1 for i, (a, b) in enumerate(zip(outputs["fixed"], outputs[name], strict=True)) if a != b]
        for name in times
    }  # the lines (from 1) each way translates otherwise than fixed
    differ = {name: len(found) for name, found in unlike.items()}
    for name, found in unlike.items():
        if found:
            shown = ", ".join(map(str, found[:10])) + (", ..." if len(found) > 10 else "")
            logger.warning("%s: %d of %d translations unlike fixed (lines %s)", name, len(found), len(lines), shown)
    cap = f", at most {args.batch_size} sentences" if args.cap else ""
    ways = {
        "fixed": f"fixed: {args.batch_size} sentences a batch, input order (the pipeline)",
        "unbounded": f"sorted by length, at most {args.batch_tokens} tokens a batch{cap}, the model's max_new_tokens",
        "sorted": f"sorted by length, at most {args.batch_tokens} tokens a batch{cap}, bounded by the source (default)",
    }
    table = (
        f"| {len(lines):,} lines, beams {args.num_beams}, {args.threads} threads | seconds | sentences/s | "
        "speed-up | translations unlike fixed |\n|---|---:|---:|---:|---:|\n"
    )
    for name, way in ((name, way) for name, way in ways.items() if name in times):
        table += (
            f"| {way} | {times[name]:.3g} | {len(lines) / times[name]:.1f} | {times['fixed'] / times[name]:.2f}x | "
            f"{differ[name]} |\n"
        )
    shared.report(table.rstrip("\n"), args.output)


if __name__ == "__main__":
    main()
