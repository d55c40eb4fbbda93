"""`hf-bahdanau calibrate`: fit a model's quality estimators on its own translations of a held-out split and save
them in its folder (`quality_estimator.json`), for `translate --quality`, `evaluate` and the Translator."""

from __future__ import annotations

import argparse
from pathlib import Path

from .arguments import (
    UsageError,
    add_command,
    add_generation_arguments,
    check_engine_options,
    generation_options,
    load_translator,
)
from .evaluate import add_corpus_arguments, read_pairs
from .streams import write_out

SUMMARY = "fit a model's quality estimators (sentence score, word OK/BAD) on a held-out split"
EPILOG = """\
examples:
  hf-bahdanau calibrate --model runs/quick-de-en                    # the validation split of the training corpus
  hf-bahdanau calibrate --model runs/quick-de-en --engine ctranslate2 --num-beams 5
  hf-bahdanau translate --model runs/quick-de-en --quality < sentences.de

It translates the split, labels each translation against its reference (sentence chrF; a word is OK when it is in
a longest common subsequence with the reference's words) and fits two estimators: ours, on the model's token
log-probabilities and attention, and Bergamot's (its four word features), the baseline. It prints the figures of
both (Pearson r with sentence chrF, word MCC) on the split and writes MODEL/quality_estimator.json. Never the train
or test split.
"""


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Add `calibrate` and its options to the command line's subparsers."""
    parser = add_command(commands, "calibrate", SUMMARY, EPILOG)
    add_generation_arguments(parser)
    add_corpus_arguments(parser, "validation", "The held-out split to fit on (never the train or test split).")


def run(args: argparse.Namespace) -> None:
    """Translate the split, fit and save the estimators, print their figures."""
    from hf_bahdanau.decoding.calibration import calibrate
    from hf_bahdanau.decoding.loading import check_generation_length

    check_generation_length(args.model, args.max_new_tokens)
    check_engine_options(args)
    if args.split in ("train", "test"):
        raise UsageError(f"calibrate fits on held-out data, not the {args.split} split: choose another (validation)")
    translator = load_translator(args)
    pairs = read_pairs(args, translator)
    data = {"data": Path(pairs.data).name, "split": pairs.split}  # a name: the folder may be published
    try:
        estimator = calibrate(translator, args.model, pairs.sources, pairs.references, data, **generation_options(args))
    except ValueError as error:
        raise UsageError(str(error)) from None
    found = estimator.fitted["figures"]
    write_out(
        f"quality estimates on {found['sentences']} {pairs.split} sentences ({found['words']} words), "
        f"{'->'.join(pairs.languages)}:\n"
        f"  Pearson r with sentence chrF: {found['pearson']:.3f} (Bergamot's {found['bergamot_pearson']:.3f})\n"
        f"  word MCC: {found['mcc']:.3f} (Bergamot's {found['bergamot_mcc']:.3f})\n"
        f"written to {args.model}/quality_estimator.json\n",
        "the figures",
    )
