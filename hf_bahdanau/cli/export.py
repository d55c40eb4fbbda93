"""`hf-bahdanau export`: write a Transformer's CTranslate2 export for faster inference, the standard transformers
folder (MarianMT or Blenderbot) that loads without this package, either family's ONNX graphs, or a static page that
translates in the browser."""

from __future__ import annotations

import argparse
import sys

from hf_bahdanau.choices import EXPORT_QUANTIZATIONS
from hf_bahdanau.errors import InputError

from .arguments import add_command

SUMMARY = "export a model for CTranslate2, as a standard transformers model (Marian, Blenderbot), to ONNX or the web"
EPILOG = """\
examples:
  hf-bahdanau export --model runs/quick-de-en --format ctranslate2 --output runs/quick-de-en-ct2
  hf-bahdanau export --model runs/quick-de-en --format ctranslate2 --output ct2-int8 --quantization int8
  hf-bahdanau translate --model runs/quick-de-en-ct2 --engine ctranslate2 < sentences.de > sentences.en
  hf-bahdanau export --model runs/quick-de-en --format transformers --output runs/quick-de-en-standard
  hf-bahdanau export --model runs/quick-de-en --format onnx --output runs/quick-de-en-onnx
  hf-bahdanau translate --model runs/quick-de-en-onnx --engine onnxruntime --quantize int8 < sentences.de
  hf-bahdanau export --model runs/quick-de-en --format web --output runs/quick-de-en-web
  python3 -m http.server --directory runs/quick-de-en-web  # then open http://127.0.0.1:8000/
CTranslate2 is an optional extra: pip install hf_bahdanau[ctranslate2]. It runs Transformers only (no RNN).
--format transformers writes a MarianMTModel (post-norm model) or BlenderbotForConditionalGeneration (pre-norm)
folder that AutoModelForSeq2SeqLM.from_pretrained loads with no remote code (Transformers only, no RNN).
--format onnx (pip install hf_bahdanau[onnx]) writes ONNX graphs of either family, float32 and int8, in onnx/: for a
Transformer, the standard folder in transformers.js's layout (an encoder and a merged decoder with its cache).
--format web writes a page, its JavaScript and WASM runtime and the model's ONNX graphs (int8 unless --quantization
float32): it translates in the browser with no server beyond a static one. The runtime comes from the npm packages
that `npm ci --ignore-scripts --prefix web` installs in the repository (or --runtime).
"""


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Add `export` and its options to the command line's subparsers."""
    parser = add_command(commands, "export", SUMMARY, EPILOG)
    parser.add_argument("--model", required=True, help="A saved model folder, or a Hub repo id.")
    parser.add_argument(
        "--format",
        choices=("ctranslate2", "transformers", "onnx", "web"),
        default="ctranslate2",
        help="ctranslate2: CTranslate2's model folder; transformers: a standard MarianMT or Blenderbot folder; "
        "onnx: ONNX graphs (float32 and int8) of a Transformer or an RNN; web: a static page that translates in the "
        "browser.",
    )
    parser.add_argument("--output", required=True, help="The folder to write the export to.")
    parser.add_argument(
        "--quantization",
        choices=EXPORT_QUANTIZATIONS,
        help="How the weights are stored (--format ctranslate2, default float32; --format web: int8, the default, or "
        "float32; a standard folder holds float32, an ONNX export float32 and int8).",
    )
    parser.add_argument(
        "--runtime",
        metavar="NODE_MODULES",
        help="--format web: the node_modules folder holding @huggingface/transformers and onnxruntime-web (default: "
        "$HF_BAHDANAU_WEB_RUNTIME, else the repository's web/node_modules).",
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="Replace an earlier export in --output (refused where it holds files the export did not write).",
    )


def run(args: argparse.Namespace) -> None:
    """Export `--model` into `--output` and print the folder written."""
    if args.format not in ("ctranslate2", "web") and args.quantization not in (None, "float32"):
        raise InputError(
            f"--quantization applies to --format ctranslate2 and web: --format {args.format} writes its own weights "
            "(a standard folder float32, an ONNX export float32 and int8)"
        )
    if args.format != "web" and args.runtime is not None:
        raise InputError(f"--runtime applies to --format web: --format {args.format} writes no page")
    if args.format == "transformers":
        from hf_bahdanau.decoding.export.standard_folder import export_transformers

        output = export_transformers(args.model, args.output, overwrite=args.overwrite)
    elif args.format == "onnx":
        from hf_bahdanau.decoding.export.onnx import export_onnx

        output = export_onnx(args.model, args.output, overwrite=args.overwrite)
    elif args.format == "web":
        from hf_bahdanau.decoding.export.web import export_web

        quantization = args.quantization or "int8"
        output = export_web(args.model, args.output, quantization, runtime=args.runtime, overwrite=args.overwrite)
    else:
        from hf_bahdanau.decoding.export.ctranslate2 import check_ctranslate2, export_ctranslate2

        check_ctranslate2()
        quantization = args.quantization or "float32"
        output = export_ctranslate2(args.model, args.output, quantization, overwrite=args.overwrite)
    sys.stdout.write(f"{output}\n")
