"""`hf-bahdanau demo`: serve a Gradio page to try a model (translations, n-best lists, attention)."""

from __future__ import annotations

import argparse

from .arguments import UsageError, add_command, positive_int, true_or_false

SUMMARY = "serve a web page to try a model: translations, n-best lists, attention"
EPILOG = """\
examples:
  hf-bahdanau demo --model runs/quick-de-en                 # then open http://127.0.0.1:7860
  hf-bahdanau demo --model OWNER/bahdanau-de-en --port 8080
The page (Gradio, pip install hf_bahdanau[demo]) has a text box, the decoding (greedy, beam search with its beam size,
sampling with its number of samples), the translation, the n-best list with each translation's score (its mean token
log-probability), and the attention figure `translate --heatmap` draws of the translation chosen in that list (for
the Transformer, of the layer and head chosen). Gradio's analytics are off; nothing leaves 127.0.0.1 unless
--share true. Ctrl-C stops it.
"""


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Add `demo` and its options to the command line's subparsers."""
    parser = add_command(commands, "demo", SUMMARY, EPILOG)
    parser.add_argument("--model", required=True, help="A saved model folder, or the Hub repo id of a published model.")
    parser.add_argument("--port", type=positive_int, default=7860, help="The port on 127.0.0.1.")
    parser.add_argument(
        "--share",
        type=true_or_false,
        default=False,
        metavar="{true,false}",
        help="Also ask Gradio for a public share link (which goes through Gradio's servers).",
    )


def run(args: argparse.Namespace) -> None:
    """Serve the demo page until Ctrl-C."""
    try:
        import gradio  # noqa: F401
    except ImportError:
        raise UsageError("the demo needs Gradio: pip install 'hf_bahdanau[demo]'") from None
    from hf_bahdanau.serving.demo import build_demo, launch

    launch(build_demo(args.model), port=args.port, share=args.share)
