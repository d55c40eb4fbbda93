"""`hf-bahdanau train`: its options, parsed by transformers' `HfArgumentParser` over `ModelArguments`,
`TokenizerArguments`, `DataArguments`, `Seq2SeqTrainingArguments` and `RunArguments` (underscores or dashes),
optionally from a YAML/JSON `--config` file that command-line options override; its help; its run."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from dataclasses import MISSING, field, fields, make_dataclass
from pathlib import Path
from typing import Any, get_args, get_type_hints

from hf_bahdanau.redaction import REDACTED, is_secret_option

from .arguments import Formatter, UsageError, option_names

# The Trainer options most runs set, shown by `train --help`; `train --help-all` lists every one.
COMMON_TRAINING_OPTIONS = (
    "output_dir", "max_steps", "num_train_epochs", "per_device_train_batch_size", "learning_rate",
    "lr_scheduler_type", "warmup_steps", "label_smoothing_factor", "eval_steps", "save_steps", "logging_steps",
    "seed", "push_to_hub", "hub_model_id",
)  # fmt: skip
GENERATION_OPTIONS = ("generation_num_beams", "generation_max_length")
TRAIN_EPILOG = """\
Every option of transformers' Seq2SeqTrainingArguments is accepted too (--fp16, --gradient_accumulation_steps,
--eval_strategy, ...); `hf-bahdanau train --help-all` lists them all. Dashes and underscores are the same.

examples:
  hf-bahdanau train --config scripts/multi30k/quick-de-en.yaml --output-dir runs/quick-de-en
  hf-bahdanau train --data multi30k --src-lang de --tgt-lang en --model_type transformer --output-dir runs/de-en
  hf-bahdanau train --config scripts/multi30k/de-en.yaml --output-dir runs/de-en --max_steps 500 --overwrite
  hf-bahdanau train --config scripts/multi30k/de-en.yaml --output-dir runs/de-en --resume
"""


def _train_arguments() -> tuple[type, ...]:
    """The dataclasses `train` parses: `ModelArguments`, ..., `Seq2SeqTrainingArguments`, `RunArguments`."""
    from transformers import Seq2SeqTrainingArguments

    from hf_bahdanau.training.options import DataArguments, ModelArguments, RunArguments, TokenizerArguments

    return ModelArguments, TokenizerArguments, DataArguments, Seq2SeqTrainingArguments, RunArguments


def _read_config_file(path: str) -> dict:
    import yaml

    file = Path(path)
    if not file.is_file():
        raise UsageError(f"config file {file} not found")
    try:
        text = file.read_text(encoding="utf-8")
        values = json.loads(text) if file.suffix == ".json" else yaml.safe_load(text)
    except OSError as err:
        raise UsageError(f"config file {file} cannot be read ({err.strerror or err})") from None
    except UnicodeDecodeError as err:
        raise UsageError(f"config file {file} is not UTF-8 text (byte {err.start})") from None
    except json.JSONDecodeError as err:
        raise UsageError(f"config file {file}: line {err.lineno} is not valid JSON ({err.msg})") from err
    except RecursionError:
        raise UsageError(f"config file {file}: nested too deeply to read") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"line {mark.line + 1} is not valid YAML" if mark else "not valid YAML"
        raise UsageError(f"config file {file}: {where} ({getattr(err, 'problem', None) or err})") from err
    if not isinstance(values, dict):
        raise UsageError(f"config file {file} must hold a mapping of option names to values")
    known = {f.name for cls in _train_arguments() for f in fields(cls)}
    values = {key.replace("-", "_"): value for key, value in values.items()}
    unknown = sorted(set(values) - known)
    if unknown:
        raise UsageError(f"config file {file}: unknown option(s) {', '.join(unknown)}")
    hints = {name: kind for cls in _train_arguments() for name, kind in get_type_hints(cls).items()}
    return {name: _config_value(file, name, value, hints.get(name)) for name, value in values.items()}


# What a config file's value of each plain option type must be, and how an error names it.
PLAIN_TYPES = {bool: "true or false", int: "an integer", float: "a number", str: "text"}


def _config_value(file: Path, name: str, value: Any, annotation: Any) -> Any:
    """`value` of option `name` from a config file, checked against the option's type (a float that is a whole
    number becomes an int for an int option); a one-line UsageError naming the option and value otherwise.
    Strings are left to the parser, which converts and checks them as on the command line."""
    kinds = [kind for kind in get_args(annotation) or (annotation,) if kind is not type(None)]
    if value is None or isinstance(value, str) or not kinds or not set(kinds) <= set(PLAIN_TYPES):
        return value  # None, text, or a type this check does not know (lists, enums): the parser decides
    if isinstance(value, bool):
        fits = bool in kinds
    elif isinstance(value, int):
        fits = int in kinds or float in kinds
    elif isinstance(value, float):
        if float not in kinds and int in kinds and value.is_integer():
            return int(value)
        fits = float in kinds
    else:
        fits = False
    if not fits:
        expected = " or ".join(PLAIN_TYPES[kind] for kind in kinds)
        shown = REDACTED if is_secret_option(name) else repr(value)
        raise UsageError(f"config file {file}: {name} must be {expected}, got {shown}")
    return value


def _grouped(dataclass_type: type, title: str, names: Sequence[str] | None = None) -> type:
    """`dataclass_type` (or only its fields `names`, with the run defaults) as a help section called `title`."""
    from hf_bahdanau.training.options import TRAINING_DEFAULTS

    if names is None:
        group = {"_argument_group_name": title}
        return make_dataclass(dataclass_type.__name__, [], bases=(dataclass_type,), namespace=group)
    hints = get_type_hints(dataclass_type)
    chosen = []
    for option in (f for f in fields(dataclass_type) if f.name in names):
        default = TRAINING_DEFAULTS.get(option.name, option.default)
        default = None if default is MISSING else default
        chosen.append((option.name, hints[option.name], field(default=default, metadata=dict(option.metadata))))
    return make_dataclass(dataclass_type.__name__, chosen, namespace={"_argument_group_name": title})


def train_help_parser(full: bool = False) -> argparse.ArgumentParser:
    """The parser whose help `train --help` prints: our options by section, then a few of the Trainer's
    (`full`: every `Seq2SeqTrainingArguments` option)."""
    from transformers import HfArgumentParser

    model, tokenizer, data, trainer, run = _train_arguments()
    everything = [option.name for option in fields(trainer) if option.name not in GENERATION_OPTIONS]
    sections = [
        _grouped(model, "model: its type, and the options of a new model (default: its config's)"),
        _grouped(tokenizer, "tokenizer"),
        _grouped(data, "data"),
        _grouped(trainer, "generation during evaluation (saved as the model's generation config)", GENERATION_OPTIONS),
        _grouped(trainer, "training (Seq2SeqTrainingArguments)", everything if full else COMMON_TRAINING_OPTIONS),
        _grouped(run, "run"),
    ]
    parser = HfArgumentParser(
        sections,
        prog="hf-bahdanau train",
        usage="%(prog)s --output-dir DIR [--config FILE] [--data CORPUS --src-lang SRC --tgt-lang TGT] [options]",
        description="Train a translation model and save it with its tokenizer (a save_pretrained folder).",
        epilog=TRAIN_EPILOG,
        formatter_class=Formatter,
    )
    parser.add_argument("--config", help="A YAML or JSON file of these options; options given here override it.")
    parser.add_argument("--help-all", action="store_true", help="Show every Seq2SeqTrainingArguments option.")
    return parser


def split_config(argv: Sequence[str]) -> tuple[str | None, list[str]]:
    """The --config file `argv` names (or None) and the other arguments."""
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--config")
    known, rest = pre.parse_known_args(argv)
    return known.config, rest


def parse_train_args(argv: Sequence[str]) -> tuple:
    """The `_train_arguments()` dataclasses from options and `--config`; `-h` and `--help-all` print help and exit."""
    from transformers import HfArgumentParser

    from hf_bahdanau.training.options import TRAINING_DEFAULTS

    if {"-h", "--help", "--help-all"} & set(argv):
        train_help_parser(full="--help-all" in argv).print_help()
        raise SystemExit(0)
    config, rest = split_config(argv)
    parser = HfArgumentParser(_train_arguments(), prog="hf-bahdanau train", allow_abbrev=False)
    parser.set_defaults(**TRAINING_DEFAULTS)
    file_values = _read_config_file(config) if config else {}
    parser.set_defaults(**file_values)
    # TrainingArguments would fall back to ./trainer_output: make the choice explicit.
    given = {arg.split("=")[0] for arg in rest} | {f"--{name}" for name, value in file_values.items() if value}
    if not given & {"--output_dir", "--output-dir"}:
        raise UsageError("train needs --output-dir (on the command line or in the --config file)")
    try:  # the Trainer's own checks of its options raise ValueErrors, some of several lines
        *parsed, unknown = parser.parse_args_into_dataclasses(rest, return_remaining_strings=True)
    except ValueError as error:
        raise UsageError(" ".join(line.strip() for line in str(error).splitlines() if line.strip())) from None
    if unknown:
        raise UsageError(f"unrecognized arguments: {option_names(unknown)}")
    return tuple(parsed)


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Add `train` to the command line's subparsers; its options are parsed by `parse_train_args`."""
    commands.add_parser("train", help="train a model (options: hf-bahdanau train --help)", add_help=False)


def run(
    args: argparse.Namespace, rest: Sequence[str], command: Sequence[str], prepare: Callable[[], None] = lambda: None
) -> None:
    """Train with the options argparse left over (`rest`), recording the run's `hf-bahdanau` arguments `command`;
    `prepare` readies the libraries once they are parsed."""
    train_args = parse_train_args(rest)
    prepare()
    from hf_bahdanau.training.run import release_process_group, train
    from hf_bahdanau.training.run_folder import check_inputs_kept

    *_, training_args, run_args = train_args
    if run_args.overwrite:  # the --config file is read again at the end, for the run's card
        check_inputs_kept(Path(training_args.output_dir), [split_config(rest)[0]])

    train(*train_args, command=command)
    release_process_group()
