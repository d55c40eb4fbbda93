"""Terminology, measured as the WMT terminology task measures it: each model translates the test split with beam 5,
without and with a glossary, side by side in one run, on one thread.

The glossary is `scripts/freedict_glossary.py`'s (FreeDict German-English entries whose German side occurs in a
test_2016_flickr source and whose English side in its reference). For each model it reports the term use rate (the
share of the applicable terms whose target side the translation holds: an exact, case-sensitive whole-word match),
sacreBLEU, chrF and sentences per second (after one warm-up batch), and writes a Markdown table (`table.md`), the
figures (`results.json`) and a plot (`glossary.png`: term use and BLEU of each model without and with the glossary)
into `--output-dir`.

    python scripts/freedict_glossary.py --install                     # outputs/freedict-glossary/glossary.tsv
    OMP_NUM_THREADS=1 HF_BAHDANAU_DATA_DIR=../shared/data python scripts/benchmark_glossary.py \\
        --model Transformer=runs/quick-de-en --model RNN=runs/de-en \\
        --glossary outputs/freedict-glossary/glossary.tsv --output-dir outputs/glossary-benchmark
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path

import sacrebleu

from hf_bahdanau import register
from hf_bahdanau.data.corpora import folder_split
from hf_bahdanau.decoding.glossary import Glossary, Term, term_used
from hf_bahdanau.decoding.translator import Translator

logger = logging.getLogger("benchmark_glossary")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", action="append", required=True, metavar="NAME=DIR", help="A model (repeatable).")
    parser.add_argument("--glossary", required=True, help="The glossary (TSV), e.g. freedict_glossary.py's.")
    parser.add_argument("--output-dir", required=True, help="Where table.md, results.json and glossary.png go.")
    parser.add_argument("--split", default="test", help="The split to translate (default: test, test_2016_flickr).")
    parser.add_argument("--max-samples", type=int, help="Only the first N sentences (a quick check).")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads (default 1).")
    parser.add_argument("--num-beams", type=int, default=5, help="Beams (default 5).")
    parser.add_argument("--batch-size", type=int, default=32, help="Sentences a batch.")
    return parser.parse_args(argv)


def term_use(terms: list[list[Term]], outputs: list[str]) -> tuple[int, int]:
    """How many of the terms that apply to each source (`terms`) their outputs use, and how many apply."""
    uses = [term_used(term.target, output) for found, output in zip(terms, outputs, strict=True) for term in found]
    return sum(uses), len(uses)


def subset_bleu(outputs: list[str], references: list[str], agreeing: list[bool], side: bool) -> float | None:
    """sacreBLEU of the sentences whose `agreeing` flag is `side` (None: there are none)."""
    pairs = [(output, reference) for output, reference, flag in zip(outputs, references, agreeing, strict=True)
             if flag is side]  # fmt: skip
    return sacrebleu.corpus_bleu([o for o, _ in pairs], [[r for _, r in pairs]]).score if pairs else None


def measure(folder: Path, glossary: Glossary, args: argparse.Namespace) -> dict[str, dict[str, float]]:
    """Term use, BLEU, chrF and sentences per second of one model, without and with the glossary."""
    sources, references = folder_split(folder, args.split, args.max_samples)
    translator = Translator.from_folder(folder, threads=args.threads, batch_size=args.batch_size)
    applying = [glossary.terms_for(source) for source in sources]  # the terms that apply to each source
    used, applied = term_use(applying, references)
    agreeing = [all(term_used(term.target, reference) for term in found)
                for found, reference in zip(applying, references, strict=True)]  # fmt: skip
    results = {"reference": {"term_use": 100 * used / applied, "terms": applied, "agreeing": sum(agreeing),
                             "sentences": len(sources)}}  # fmt: skip
    for name, terms in (("without", None), ("with", glossary)):
        translator.translate(sources[: args.batch_size], num_beams=args.num_beams, glossary=terms)  # warm-up
        began = time.perf_counter()
        outputs = [t.text for t in translator.translate(sources, num_beams=args.num_beams, glossary=terms)]
        seconds = time.perf_counter() - began
        used, applied = term_use(applying, outputs)
        results[name] = {
            "term_use": 100 * used / applied,
            "bleu": sacrebleu.corpus_bleu(outputs, [references]).score,
            "chrf": sacrebleu.corpus_chrf(outputs, [references]).score,
            "per_second": len(sources) / seconds,
            "bleu_agreeing": subset_bleu(outputs, references, agreeing, True),
            "bleu_other": subset_bleu(outputs, references, agreeing, False),
        }
        logger.info("%s %s the glossary: %s", folder, name, json.dumps(results[name]))
    return results


def table(results: dict[str, dict], sentences: int, args: argparse.Namespace) -> str:
    lines = [
        f"Multi30k {args.split} ({sentences} sentences), beam {args.num_beams}, torch fp32, {args.threads} thread(s); "
        f"{results[next(iter(results))]['reference']['terms']} glossary terms apply.",
        "",
        "| model | glossary | term use | BLEU | chrF | sentences/s | speed vs without | BLEU, terms in the reference "
        "| BLEU, the other sentences |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, row in results.items():
        for side in ("without", "with"):
            found = row[side]
            ratio = found["per_second"] / row["without"]["per_second"]
            lines.append(f"| {name} | {side} | {found['term_use']:.1f}% | {found['bleu']:.2f} | {found['chrf']:.2f} | "
                         f"{found['per_second']:.1f} | {ratio:.2f}x | {_score(found['bleu_agreeing'])} | "
                         f"{_score(found['bleu_other'])} |")  # fmt: skip
    reference = row["reference"]
    lines.append(f"\nThe references themselves use {reference['term_use']:.1f}% of the terms. \"Terms in the "
                 f"reference\": the {reference['agreeing']} sentences whose reference uses every term that applies "
                 f"(or that no term applies to); the other {reference['sentences'] - reference['agreeing']} have a "
                 "term the reference does not use, which the glossary still forces.")  # fmt: skip
    return "\n".join(lines) + "\n"


def _score(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def plot(results: dict[str, dict], path: Path) -> None:
    """Term use and BLEU of each model without and with the glossary, as grouped bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 2, figsize=(9, 3.5))
    names = list(results)
    for axis, measure_name, label in ((axes[0], "term_use", "term use (%)"), (axes[1], "bleu", "BLEU")):
        for offset, side in ((-0.2, "without"), (0.2, "with")):
            values = [results[name][side][measure_name] for name in names]
            bars = axis.bar([i + offset for i in range(len(names))], values, width=0.4, label=f"{side} glossary")
            axis.bar_label(bars, fmt="%.1f", fontsize=8)
        axis.set_xticks(range(len(names)), names)
        axis.set_ylabel(label)
    axes[0].legend(loc="lower right", fontsize=8)
    figure.suptitle("FreeDict glossary on Multi30k test_2016_flickr De→En, beam 5")
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    args = parse_args(argv)
    register()
    glossary = Glossary.from_file(args.glossary)
    output = Path(args.output_dir)
    output.mkdir(parents=True, exist_ok=True)
    results = {}
    for given in args.model:
        name, _, folder = given.partition("=")
        results[name] = measure(Path(folder), glossary, args)
    sentences = len(folder_split(Path(args.model[0].partition("=")[2]), args.split, args.max_samples)[0])
    (output / "results.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    (output / "table.md").write_text(table(results, sentences, args), encoding="utf-8")
    plot(results, output / "glossary.png")
    logger.info("\n%s", table(results, sentences, args))


if __name__ == "__main__":
    main()
