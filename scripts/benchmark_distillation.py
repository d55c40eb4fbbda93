"""Quality and speed of a teacher and its distilled students, side by side in one run, on one thread.

For each model and engine (torch fp32, CTranslate2 fp32 and CTranslate2 int8; CTranslate2 runs Transformers only),
it translates the test split (Multi30k's test_2016_flickr, as the teacher was trained) with beam 5 and greedily,
through the translator `hf-bahdanau translate` uses, and measures sacreBLEU and sentences per second (after one
warm-up batch). It writes a Markdown table (`table.md`) and a quality-speed plot (`quality_speed.png`: BLEU with beam 5
against sentences per second, log scale) into `--output-dir`, and logs the table.

    OMP_NUM_THREADS=1 HF_BAHDANAU_DATA_DIR=../shared/data python scripts/benchmark_distillation.py \\
        --teacher runs/multi30k-transformer-de-en \\
        --student 6-1=runs/distill-transformer-6-1-de-en --student small=runs/distill-transformer-small-de-en \\
        --student cgru=runs/distill-cgru-de-en --output-dir docs/distillation
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import time
from pathlib import Path
from typing import NamedTuple

import sacrebleu

from hf_bahdanau import register
from hf_bahdanau.data.corpora import folder_split
from hf_bahdanau.decoding.translator import Translator
from hf_bahdanau.publishing.card import count_parameters

logger = logging.getLogger("benchmark_distillation")

# (label, engine, quantize) of each way of running a model
ENGINES = (("torch fp32", "torch", None), ("CTranslate2 fp32", "ctranslate2", None),
           ("CTranslate2 int8", "ctranslate2", "int8"))  # fmt: skip
BEAMS = (5, 1)


class Row(NamedTuple):
    parameters: int
    bleu: dict[int, float]  # beams -> BLEU
    per_second: dict[int, float]  # beams -> sentences per second


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--teacher", required=True, help="The teacher's model folder.")
    parser.add_argument("--student", action="append", default=[], metavar="NAME=DIR", help="A student (repeatable).")
    parser.add_argument("--output-dir", required=True, help="Where table.md and quality_speed.png go.")
    parser.add_argument("--split", default="test", help="The split to translate (default: test, test_2016_flickr).")
    parser.add_argument("--max-samples", type=int, help="Only the first N sentences (a quick check).")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads (default 1).")
    parser.add_argument("--batch-size", type=int, default=32, help="Sentences a batch.")
    return parser.parse_args(argv)


def measure(folder: Path, engine: str, quantize: str | None, sources: list[str], references: list[str], args) -> Row:
    """BLEU and sentences per second of one model on one engine, for each of `BEAMS`."""
    translator = Translator.from_folder(folder, engine=engine, quantize=quantize, threads=args.threads,
                                        batch_size=args.batch_size)  # fmt: skip
    bleu, per_second = {}, {}
    for beams in BEAMS:
        translator.translate(sources[: args.batch_size], num_beams=beams)  # warm-up
        began = time.perf_counter()
        outputs = [found.text for found in translator.translate(sources, num_beams=beams)]
        seconds = time.perf_counter() - began
        bleu[beams] = sacrebleu.corpus_bleu(outputs, [references]).score
        per_second[beams] = len(sources) / seconds
    return Row(count_parameters(folder), bleu, per_second)


def engines_of(folder: Path) -> list[tuple[str, str, str | None]]:
    """The ways to run a model: CTranslate2 only for a Transformer, and only where it is installed."""
    transformer = json.loads((folder / "config.json").read_text(encoding="utf-8"))["model_type"] == "d2l_transformer"
    runs_ctranslate2 = transformer and importlib.util.find_spec("ctranslate2") is not None
    return [way for way in ENGINES if way[1] == "torch" or runs_ctranslate2]


def markdown_table(rows: list[tuple[str, str, Row]], sentences: int, threads: int) -> str:
    """One row per model and engine; speed-up against the teacher in torch fp32 with beam 5."""
    base = rows[0][2].per_second[5]
    lines = [
        f"| model ({sentences} sentences, {threads} thread{'s' * (threads > 1)}) | parameters | engine | BLEU beam 5 "
        "| BLEU greedy | sentences/s beam 5 | sentences/s greedy | speed-up beam 5 |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, label, row in rows:
        lines.append(
            f"| {name} | {row.parameters:,} | {label} | {row.bleu[5]:.2f} | {row.bleu[1]:.2f} | "
            f"{row.per_second[5]:.1f} | {row.per_second[1]:.1f} | {row.per_second[5] / base:.1f}x |"
        )
    return "\n".join(lines) + "\n"


def plot(rows: list[tuple[str, str, Row]], path: Path) -> None:
    """BLEU (beam 5) against sentences per second (beam 5, log scale): one marker a model, one colour an engine."""
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(7, 4.5))
    markers = dict(zip(dict.fromkeys(name for name, _, _ in rows), "o^sDvP*X", strict=False))
    for label, colour in zip((way[0] for way in ENGINES), ("tab:blue", "tab:orange", "tab:green"), strict=True):
        for name, engine, row in rows:
            if engine == label:
                axes.scatter(row.per_second[5], row.bleu[5], marker=markers[name], color=colour, s=60)
        axes.scatter([], [], color=colour, label=label)
    for name, marker in markers.items():
        axes.scatter([], [], marker=marker, color="grey", label=name)
    axes.set_xscale("log")
    axes.xaxis.set_major_locator(matplotlib.ticker.LogLocator(subs=(1.0, 2.0, 5.0)))  # 20, 50, 100, 200
    axes.xaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())  # 20, 50: not 2x10^1
    axes.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    axes.set_xlabel("sentences per second, beam 5 (log scale)")
    axes.set_ylabel("BLEU, beam 5")
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    args = parse_args(argv)
    register()
    import torch

    torch.set_num_threads(args.threads)
    teacher = Path(args.teacher)
    models = [("teacher", teacher)] + [(spec.split("=", 1)[0], Path(spec.split("=", 1)[1])) for spec in args.student]
    sources, references = folder_split(teacher, args.split, args.max_samples)
    rows = []
    for name, folder in models:
        for label, engine, quantize in engines_of(folder):
            logger.info("%s on %s", name, label)
            rows.append((name, label, measure(folder, engine, quantize, sources, references, args)))
    output = Path(args.output_dir)
    output.mkdir(parents=True, exist_ok=True)
    table = markdown_table(rows, len(sources), args.threads)
    (output / "table.md").write_text(table, encoding="utf-8")
    plot(rows, output / "quality_speed.png")
    logger.info("the table (also in %s):\n%s", output / "table.md", table)


if __name__ == "__main__":
    main()
