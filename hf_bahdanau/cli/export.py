"""`hf-bahdanau export`: write a Transformer's CTranslate2 export for faster inference, or the standard transformers
folder (MarianMT or Blenderbot) that loads without this package."""

from __future__ import annotations

import argparse
import sys

from hf_bahdanau.choices import EXPORT_QUANTIZATIONS
from hf_bahdanau.errors import InputError

from .arguments import add_command

SUMMARY = "export a Transformer for CTranslate2, or as a standard transformers model (Marian, Blenderbot)"
EPILOG = """\
examples:
  hf-bahdanau export --model runs/quick-de-en --format ctranslate2 --output runs/quick-de-en-ct2
  hf-bahdanau export --model runs/quick-de-en --format ctranslate2 --output ct2-int8 --quantization int8
  hf-bahdanau translate --model runs/quick-de-en-ct2 --engine ctranslate2 < sentences.de > sentences.en
  hf-bahdanau export --model runs/quick-de-en --format transformers --output runs/quick-de-en-standard
CTranslate2 is an optional extra: pip install hf_bahdanau[ctranslate2]. It runs Transformers only (no RNN).
--format transformers writes a MarianMTModel (post-norm model) or BlenderbotForConditionalGeneration (pre-norm)
folder that AutoModelForSeq2SeqLM.from_pretrained loads with no remote code (Transformers only, no RNN).
"""


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Add `export` and its options to the command line's subparsers."""
    parser = add_command(commands, "export", SUMMARY, EPILOG)
    parser.add_argument("--model", required=True, help="A saved d2l_transformer folder, or a Hub repo id.")
    parser.add_argument(
        "--format",
        choices=("ctranslate2", "transformers"),
        default="ctranslate2",
        help="ctranslate2: CTranslate2's model folder; transformers: a standard MarianMT or Blenderbot folder.",
    )
    parser.add_argument("--output", required=True, help="The folder to write the export to.")
    parser.add_argument(
        "--quantization",
        choices=EXPORT_QUANTIZATIONS,
        default="float32",
        help="How the weights are stored (--format ctranslate2; a standard folder holds float32).",
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="Replace an earlier export in --output (refused where it holds files the export did not write).",
    )


def run(args: argparse.Namespace) -> None:
    """Export `--model` into `--output` and print the folder written."""
    if args.format == "transformers":
        from hf_bahdanau.decoding.standard_folder import export_transformers

        if args.quantization != "float32":
            raise InputError("--quantization applies to --format ctranslate2: a standard folder holds float32 weights")
        output = export_transformers(args.model, args.output, overwrite=args.overwrite)
    else:
        from hf_bahdanau.decoding.export import check_ctranslate2, export_ctranslate2

        check_ctranslate2()
        output = export_ctranslate2(args.model, args.output, args.quantization, overwrite=args.overwrite)
    sys.stdout.write(f"{output}\n")
