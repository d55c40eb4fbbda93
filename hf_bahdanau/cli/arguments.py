"""What the commands share on the command line: the usage error, the help formatter, argparse value types, the
generation options of `evaluate` and `translate` and the `Translator` they make of them. Imports nothing heavy, so
`--help` answers at once."""

from __future__ import annotations

import argparse
import logging
import math
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from hf_bahdanau.choices import ENGINES, QUANTIZATIONS
from hf_bahdanau.errors import InputError

if TYPE_CHECKING:
    from hf_bahdanau.decoding.cascade import Cascade
    from hf_bahdanau.decoding.translator import Translator

logger = logging.getLogger("hf_bahdanau")


class UsageError(InputError):
    """Options that do not go together, or that a command does not take; reported without a traceback."""


class Formatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """Examples kept as written; `(default: ...)` after each option that has a default and does not say it."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if (
            action.default is None
            or action.default is False
            or action.default == argparse.SUPPRESS
            or "default" in text
        ):
            return text
        return super()._get_help_string(action)


# ---- train ------------------------------------------------------------------------------------------------


def positive_int(text: str) -> int:
    """argparse type: an integer of at least 1 (anything else is a one-line usage error)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def finite_float(text: str) -> float:
    """argparse type: a finite number (nan and inf are one-line usage errors)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text}")
    return value


def true_or_false(text: str) -> bool:
    """argparse type: `true` or `false` (any case)."""
    if text.lower() not in ("true", "false"):
        raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")
    return text.lower() == "true"


def option_names(args: Sequence[str]) -> str:
    """Unknown arguments as their option names only: a value may be a secret (a mistyped `--hub_tokn hf_...`)."""
    names = [arg.split("=")[0] for arg in args if arg.startswith("-")]
    values = len(args) - len(names)
    return " ".join(names) + (f" (and {values} value{'s' * (values > 1)}, not shown)" if values else "")


def add_generation_arguments(parser: argparse.ArgumentParser) -> None:
    """The model and decoding options `evaluate` and `translate` share."""
    parser.add_argument("--model", required=True, help="A saved model folder (from `train`).")
    parser.add_argument(
        "--num-beams", "--num_beams", type=positive_int, help="Beam size; 1 is greedy (default: the model's, 5)."
    )
    parser.add_argument(
        "--max-new-tokens",
        "--max_new_tokens",
        type=positive_int,
        help="Longest translation, in tokens (default: the model's).",
    )
    parser.add_argument("--batch-size", "--batch_size", type=positive_int, default=32, help="Sentences per batch.")
    parser.add_argument(
        "--quantize",
        choices=QUANTIZATIONS,
        help="Translate with int8 linear and recurrent layers, for CPUs (the folder stays fp32); with "
        "--engine ctranslate2, CTranslate2's int8; with --engine onnxruntime, the export's int8 graphs.",
    )
    parser.add_argument(
        "--length-penalty",
        "--length_penalty",
        type=finite_float,
        help="Beam search divides a translation's log-probability by its length to this power (default: the "
        "model's, 1.0).",
    )
    parser.add_argument(
        "--engine",
        choices=ENGINES,
        default="torch",
        help="ctranslate2: CTranslate2 runs the Transformer (pip install hf_bahdanau[ctranslate2]); --model is an "
        "`export`ed folder, or a model folder whose export is made once into MODEL/ctranslate2-QUANTIZATION/ "
        "and redone when the model changes. onnxruntime: ONNX Runtime runs either family (pip install "
        "hf_bahdanau[onnx]); --model is an `export --format onnx` folder.",
    )
    parser.add_argument("--threads", type=positive_int, help="CPU threads (default: the engine's).")
    parser.add_argument(
        "--glossary",
        metavar="FILE.tsv",
        help="Terms each translation must use: SOURCE<TAB>TARGET lines (# comments and a header line allowed). A "
        "term applies to a sentence whose text holds its source side (whole words, any case); beam search then "
        "places its target side in the translation (needs --engine torch and beams).",
    )
    parser.add_argument(
        "--avoid",
        metavar="FILE",
        help="Words or phrases no translation may contain, one a line (each also with its first letter upper-cased).",
    )


def generation_options(args: argparse.Namespace) -> dict[str, Any]:
    """The generation settings given on the command line (the glossary and the phrases to avoid read from their
    files); the rest come from the model's generation config."""
    from hf_bahdanau.decoding.glossary import Glossary, read_phrases

    options = {"num_beams": args.num_beams, "max_new_tokens": args.max_new_tokens}
    options["length_penalty"] = args.length_penalty
    options["glossary"] = Glossary.from_file(args.glossary) if args.glossary else None
    options["avoid"] = read_phrases(args.avoid) if args.avoid else None
    options["prefix"] = getattr(args, "prefix", None) or None
    return {name: value for name, value in options.items() if value is not None}


def load_translator(args: argparse.Namespace, folder: str | None = None) -> Translator:
    """`Translator.from_folder` of `--model` (or `folder`) with the command's engine, quantization, threads and
    batches."""
    from hf_bahdanau.decoding.translator import Translator

    return Translator.from_folder(folder or args.model, engine=args.engine, quantize=args.quantize,
                                  threads=args.threads, batch_size=args.batch_size,
                                  batch_tokens=getattr(args, "batch_tokens", None),
                                  torch_fallback=getattr(args, "torch_fallback", False))  # fmt: skip


def translate_texts(translator: Translator, texts: Sequence[str], args: argparse.Namespace) -> list[str]:
    """The best translation of each text, in order, with the command's decoding options (a bar on a terminal)."""
    found = translator.translate(texts, progress=sys.stderr.isatty(), **generation_options(args))
    return [translation.text for translation in found]


def check_engine_options(args: argparse.Namespace) -> None:
    """Refuse a glossary with the CTranslate2 and ONNX Runtime engines, which cannot place required terms, and phrases
    to avoid with ONNX Runtime (before anything loads)."""
    if args.glossary and args.engine != "torch":
        engine = "CTranslate2" if args.engine == "ctranslate2" else "ONNX Runtime"
        raise UsageError(f"--glossary needs --engine torch: {engine} cannot place required terms")
    if args.engine == "onnxruntime" and (args.avoid or getattr(args, "prefix", None)):
        raise UsageError("--avoid and --prefix need --engine torch or ctranslate2: the ONNX Runtime engine has neither")


def add_fallback_arguments(parser: argparse.ArgumentParser, teachers: str) -> None:
    """The options of a student that calls its teacher (`translate`, `serve`); `teachers`: what --fallback's help
    says of several."""
    parser.add_argument(
        "--fallback",
        metavar="TEACHER",
        action="append",
        help="A teacher model folder: every sentence whose quality estimate is below --min-quality is re-translated "
        "by it (one call for those of a batch). The model must have a quality estimator (hf-bahdanau calibrate); "
        f"the teacher searches as its folder's generation config says. {teachers}",
    )
    parser.add_argument(
        "--min-quality",
        "--min_quality",
        type=quality_threshold,
        metavar="Q",
        help="With --fallback: the least sentence estimate (0 to 1, the predicted chrF / 100) kept from the model.",
    )
    parser.add_argument(
        "--fallback-engine", "--fallback_engine", choices=ENGINES, default="torch", help="The teacher's engine."
    )


def quality_threshold(text: str) -> float:
    """argparse type: a number from 0 to 1."""
    value = finite_float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a number from 0 to 1, got {value:g}")
    return value


def check_fallback_options(args: argparse.Namespace, several: bool = True) -> None:
    """--fallback and --min-quality go together, --fallback once unless `several` (checked before anything loads)."""
    if args.fallback and len(args.fallback) > 1 and not several:
        raise UsageError(f"{args.command} takes one --fallback TEACHER")
    if args.fallback and args.min_quality is None:
        raise UsageError("--fallback needs --min-quality Q: the estimate below which its teacher re-translates")
    if args.min_quality is not None and not args.fallback:
        raise UsageError("--min-quality needs --fallback TEACHER: the model that re-translates what scores below it")


def with_fallback(translator: Translator, args: argparse.Namespace) -> Translator | Cascade:
    """`translator`, or with `--fallback TEACHER` the `Cascade` of it and its teacher (loaded with
    `--fallback-engine`, unquantized, with the command's threads and batches)."""
    if not args.fallback:
        return translator
    from hf_bahdanau.decoding.cascade import Cascade
    from hf_bahdanau.decoding.translator import Translator

    teacher = Translator.from_folder(args.fallback[0], engine=args.fallback_engine, threads=args.threads,
                                     batch_size=args.batch_size, batch_tokens=args.batch_tokens)  # fmt: skip
    return Cascade(translator, teacher, args.min_quality)


def said_fallback(translator: Translator | Cascade, args: argparse.Namespace) -> None:
    """Log how many sentences the teacher of `--fallback` re-translated."""
    if args.fallback:
        logger.info("the teacher re-translated %d of %d sentences (estimated below %g)", translator.retranslated,
                    translator.estimated, args.min_quality)  # fmt: skip


def add_command(commands: argparse._SubParsersAction, name: str, summary: str, epilog: str) -> argparse.ArgumentParser:
    """A command's parser: `summary` as its help and description, `epilog` (its examples) kept as written."""
    return commands.add_parser(name, help=summary, description=summary, epilog=epilog, formatter_class=Formatter)
