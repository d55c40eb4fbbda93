"""Scale of the data path: a synthetic corpus of N pairs (default 2M) through `train`, map-style and `--streaming`.

The corpus is Multi30k recombined: pair i joins two Multi30k training pairs drawn at random (source with source,
target with target), written as a Multi30k-style folder (`train.de`/`train.en` of N lines, Multi30k's own `val` and
`test_2016_flickr`) into a temporary folder that is removed at the end (never committed). For each path it runs
`hf-bahdanau train` in a child process with a fresh datasets cache and reports:

- time to the first training step: from the start of the process to the log line of step 1 (the corpus read into
  Arrow, the tokenizer trained, the corpus tokenized, for map-style; the tokenizer trained on the stream's start,
  for streaming);
- peak RSS of `train`: the largest resident set of the process and its children (tokenizing processes), polled
  every 0.2 s (memory-mapped Arrow pages that are resident count);
- tokens/s of the data pipeline alone (source + target tokens: `tokenize_corpus` over the corpus, or the bucketed
  stream's batches read from the start) against the model's training tokens/s (train samples/s of the same run
  times the mean tokens of a pair), measured in this process after the runs.

    python scripts/benchmark_scale.py --pairs 2000000 --output scale.md
    python scripts/benchmark_scale.py --pairs 20000 --max-steps 5   # a quick check
"""

from __future__ import annotations

import argparse
import gzip
import json
import logging
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

logger = logging.getLogger("benchmark_scale")

MODEL = ["--embedding_size", "64", "--hidden_size", "64", "--encoder_layers", "1", "--decoder_layers", "1"]


def write_corpus(multi30k: Path, folder: Path, pairs: int, seed: int = 0) -> None:
    """`pairs` recombined Multi30k de-en pairs as `train.{de,en}`, and Multi30k's validation and test files."""
    folder.mkdir(parents=True)
    sides = {
        lang: gzip.open(multi30k / f"train.{lang}.gz", "rt", encoding="utf-8").read().splitlines()
        for lang in ("de", "en")
    }
    rng = random.Random(seed)
    size = len(sides["de"])
    with open(folder / "train.de", "w", encoding="utf-8") as de, open(folder / "train.en", "w", encoding="utf-8") as en:
        for start in range(0, pairs, 100_000):
            picks = [(rng.randrange(size), rng.randrange(size)) for _ in range(min(100_000, pairs - start))]
            de.write("".join(f"{sides['de'][a].strip()} {sides['de'][b].strip()}\n" for a, b in picks))
            en.write("".join(f"{sides['en'][a].strip()} {sides['en'][b].strip()}\n" for a, b in picks))
    for name in ("val.de.gz", "val.en.gz", "test_2016_flickr.de.gz", "test_2016_flickr.en.gz"):
        shutil.copy(multi30k / name, folder / name)


def run_train(folder: Path, work: Path, name: str, extra: list[str], max_steps: int) -> dict[str, float]:
    """One `train` run in a child process: seconds to step 1, peak RSS (MB) of the process with its children and of
    the process alone, train samples/s."""
    env = {**os.environ, "HF_HOME": str(work / f"hf-{name}"), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    command = [
        sys.executable, "-m", "hf_bahdanau.cli", "train", "--data", str(folder), "--src-lang", "de",
        "--tgt-lang", "en", "--output-dir", str(work / name), *MODEL, "--max_steps", str(max_steps),
        "--per_device_train_batch_size", "64", "--logging_steps", "1", "--eval_strategy", "no",
        "--load_best_model_at_end", "false", "--save_strategy", "no", "--max_eval_samples", "64", *extra,
    ]  # fmt: skip
    log = work / f"{name}.log"
    start = time.perf_counter()
    with open(log, "w") as out:
        process = psutil.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
        peak, peak_main, first_step = 0, 0, None
        while process.poll() is None:
            try:
                tree = [process, *process.children(recursive=True)]
                peak = max(peak, sum(p.memory_info().rss for p in tree if p.is_running()))
                peak_main = max(peak_main, process.memory_info().rss)
            except psutil.Error:
                pass
            if first_step is None and re.search(r"step 1: ", log.read_text(errors="replace")):
                first_step = time.perf_counter() - start
            time.sleep(0.2)
    text = log.read_text(errors="replace")
    if process.returncode != 0:
        raise RuntimeError(f"{name} failed:\n{text[-3000:]}")
    first_step = first_step or time.perf_counter() - start
    samples = float(re.findall(r'"train_samples_per_second": ([0-9.e+-]+)', text)[-1])
    return {
        "first_step_s": first_step,
        "peak_rss_mb": peak / 2**20,
        "peak_rss_main_mb": peak_main / 2**20,
        "train_samples_per_s": samples,
    }


def pipeline_tokens_per_s(folder: Path, model_dir: Path, streaming: bool, limit: int) -> tuple[float, float]:
    """Tokens/s of the data pipeline alone over `limit` pairs (tokenize_corpus, or the bucketed stream), and the mean
    tokens (source + target) of a pair."""
    from transformers import AutoTokenizer

    from hf_bahdanau.data.corpora import load_parallel_corpus
    from hf_bahdanau.data.streaming import LengthBucketedBatches, stream_train_pairs, tokenized_stream
    from hf_bahdanau.data.tokenized import tokenize_corpus

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    start = time.perf_counter()
    if streaming:
        pairs = stream_train_pairs(str(folder), "de", "en")
        batches = LengthBucketedBatches(tokenized_stream(pairs, tokenizer, "de", "en", 64, 64), 64, 10_000)
        tokens = rows = 0
        for batch in batches:
            tokens += sum(len(row["input_ids"]) + len(row["labels"]) for row in batch)
            rows += len(batch)
            if rows >= limit:
                break
    else:
        corpus = load_parallel_corpus(folder, "de", "en", splits=("train",))
        corpus["train"] = corpus["train"].select(range(min(limit, len(corpus["train"]))))
        start = time.perf_counter()  # the corpus is read already: tokenization alone
        tokenized, _ = tokenize_corpus(corpus, tokenizer, "de", "en", max_source_length=64, max_target_length=64)
        lengths = tokenized["train"].with_format("arrow")[:]
        tokens = sum(sum(len(ids) for ids in lengths[name].to_pylist()) for name in ("input_ids", "labels"))
        rows = len(tokenized["train"])
    seconds = time.perf_counter() - start
    return tokens / seconds, tokens / rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pairs", type=int, default=2_000_000)
    parser.add_argument("--max-steps", type=int, default=20)
    parser.add_argument("--pipeline-pairs", type=int, default=200_000, help="pairs timed for the pipeline alone")
    parser.add_argument(
        "--multi30k", type=Path, default=Path(os.environ.get("HF_BAHDANAU_DATA_DIR", "../shared/data")) / "multi30k"
    )
    parser.add_argument("--paths", nargs="+", default=["streaming", "map-style"], choices=["streaming", "map-style"])
    parser.add_argument("--num_proc", type=int, default=2, help="tokenizing processes of the map-style run")
    parser.add_argument("--output", type=Path, help="write the Markdown table here too")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    work = Path(tempfile.mkdtemp(prefix="benchmark_scale_"))
    os.environ["HF_HOME"] = str(work / "hf-pipeline")  # this process's datasets cache: a fresh one, removed at the end
    try:
        folder = work / "corpus"
        start = time.perf_counter()
        write_corpus(args.multi30k, folder, args.pairs)
        size = sum(path.stat().st_size for path in folder.iterdir()) / 2**20
        logger.info("wrote %d pairs (%.0f MB) in %.0f s", args.pairs, size, time.perf_counter() - start)
        rows = []
        paths = {"streaming": ["--streaming", "true"], "map-style": ["--num_proc", str(args.num_proc)]}
        for name in args.paths:
            extra = paths[name]
            logger.info("train, %s ...", name)
            result = run_train(folder, work, name, extra, args.max_steps)
            pipeline, per_pair = pipeline_tokens_per_s(folder, work / name, name == "streaming", args.pipeline_pairs)
            result.update(pipeline_tokens_per_s=pipeline, model_tokens_per_s=result["train_samples_per_s"] * per_pair)
            logger.info("%s: %s", name, json.dumps(result))
            rows.append((name, result))
        table = [
            f"Synthetic corpus: {args.pairs:,} de-en pairs (Multi30k recombined, {size:.0f} MB); `train` of a "
            f"{' '.join(MODEL)} RNN, batch 64, {args.max_steps} steps, {os.cpu_count()} CPUs.",
            "",
            "| path | time to first step (s) | peak RSS of train (MB): with its tokenizing processes / main process "
            "alone | pipeline tokens/s | model training tokens/s |",
            "|---|---:|---:|---:|---:|",
        ]
        for name, r in rows:
            table.append(
                f"| {name} | {r['first_step_s']:.0f} | {r['peak_rss_mb']:,.0f} / {r['peak_rss_main_mb']:,.0f} | "
                f"{r['pipeline_tokens_per_s']:,.0f} | "
                f"{r['model_tokens_per_s']:,.0f} |"
            )
        print("\n".join(table))
        if args.output:
            args.output.write_text("\n".join(table) + "\n", encoding="utf-8")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
