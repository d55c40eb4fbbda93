"""Every engine on one trained model, side by side: torch fp32 and int8, CTranslate2 fp32 and int8 (a Transformer),
ONNX Runtime fp32 and int8, each through the one `Translator`, one thread, on the test split the model was trained
with. Per engine: sentences/s (the engines interleaved, the best of `--rounds`), the ratio to torch fp32, the share
of sentences whose token ids are torch fp32's, and sacreBLEU against the references. Prints a markdown table.

    python3 scripts/benchmark_engines.py --model runs/quick-de-en                   # greedy
    python3 scripts/benchmark_engines.py --model runs/quick-de-en --num-beams 5 --rounds 1

The ONNX export is written into a temporary folder (`hf-bahdanau export --format onnx`); the CTranslate2 one is the
export `--engine ctranslate2` caches in the model folder.
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
from pathlib import Path

import sacrebleu
import torch

from hf_bahdanau.data.corpora import folder_split
from hf_bahdanau.decoding.export.onnx import export_onnx
from hf_bahdanau.decoding.translator import Translator
from hf_bahdanau.json_files import read_json

REFERENCE = "torch fp32"


def engines(model: Path, onnx: Path) -> dict[str, Translator]:
    """The engines that hold this model: CTranslate2 has no RNN decoder."""
    found = {
        REFERENCE: Translator.from_folder(str(model), threads=1),
        "torch int8": Translator.from_folder(str(model), quantize="int8", threads=1),
    }
    if read_json(model / "config.json").get("model_type") == "d2l_transformer":
        found["CTranslate2 fp32"] = Translator.from_folder(str(model), engine="ctranslate2", threads=1)
        found["CTranslate2 int8"] = Translator.from_folder(str(model), engine="ctranslate2", quantize="int8", threads=1)
    found["ONNX Runtime fp32"] = Translator.from_folder(str(onnx), engine="onnxruntime", threads=1)
    found["ONNX Runtime int8"] = Translator.from_folder(str(onnx), engine="onnxruntime", quantize="int8", threads=1)
    return found


def measure(model: Path, split: str, num_beams: int, rounds: int, max_samples: int | None) -> str:
    """The markdown table of every engine on `model`'s `split`."""
    sources, references = folder_split(model, split, max_samples)
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix="benchmark_engines_") as scratch:
        onnx = export_onnx(model, Path(scratch) / "onnx")
        translators = engines(model, onnx)
        for translator in translators.values():  # warm-up: first calls load graphs and allocate
            translator.translate(sources[:8], num_beams=num_beams)
        best: dict[str, float] = {}
        found: dict[str, list] = {}
        for round_ in range(rounds):
            for name, translator in translators.items():
                start = time.perf_counter()
                found[name] = translator.translate(sources, num_beams=num_beams)
                best[name] = min(best.get(name, float("inf")), time.perf_counter() - start)
                logging.info("round %d, %s: %.1f s", round_ + 1, name, time.perf_counter() - start)
    lines = [
        "| engine | sentences/s | against torch fp32 | same tokens as torch fp32 | BLEU | BLEU change |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    reference_bleu = None
    for name, translations in found.items():
        texts = [each.hypotheses[0].text for each in translations]
        bleu = sacrebleu.corpus_bleu(texts, [references]).score
        reference_bleu = bleu if reference_bleu is None else reference_bleu
        same = sum(
            a.hypotheses[0].ids == b.hypotheses[0].ids for a, b in zip(translations, found[REFERENCE], strict=True)
        )
        lines.append(
            f"| {name} | {len(sources) / best[name]:.1f} | {best[REFERENCE] / best[name]:.2f}x | "
            f"{100 * same / len(sources):.1f}% | {bleu:.2f} | {bleu - reference_bleu:+.2f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, required=True, help="a trained model folder")
    parser.add_argument("--split", default="test")
    parser.add_argument("--num-beams", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3, help="the engines run in turn this many times; best kept")
    parser.add_argument("--max-samples", type=int, help="the first N sentences of the split")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    print(measure(args.model, args.split, args.num_beams, args.rounds, args.max_samples))


if __name__ == "__main__":
    main()
