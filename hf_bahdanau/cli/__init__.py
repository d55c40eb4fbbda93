"""The `hf-bahdanau` command line: train, evaluate, translate, export, publish, demo.

`train` takes transformers' example-script options (`HfArgumentParser` over `ModelArguments`, `TokenizerArguments`,
`DataArguments`, `Seq2SeqTrainingArguments`, `RunArguments`; underscores or dashes), optionally from a YAML/JSON
`--config` file that command-line options override. Arguments are parsed before torch and transformers are imported:
each command imports what it needs, so `--help` and usage errors answer at once.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import os
import signal
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import MISSING, field, fields, make_dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, get_args, get_type_hints

from hf_bahdanau.choices import DEFAULT_LICENSE, EXPORT_QUANTIZATIONS
from hf_bahdanau.choices import QUANTIZATIONS as QUANTIZE_CHOICES
from hf_bahdanau.training.redaction import REDACTED, is_secret_option, redact_message

if TYPE_CHECKING:
    from transformers import PreTrainedModel
    from transformers.tokenization_utils_base import PreTrainedTokenizerBase

    from hf_bahdanau.decoding.translator import Translation, Translator

logger = logging.getLogger("hf_bahdanau")

ENGINES = ("torch", "ctranslate2")
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


class UsageError(Exception):
    """A problem with what the user asked for; reported without a traceback."""


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
    text = file.read_text(encoding="utf-8")
    try:
        values = json.loads(text) if file.suffix == ".json" else yaml.safe_load(text)
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


def parse_train_args(argv: Sequence[str]) -> tuple:
    """The `_train_arguments()` dataclasses from options and `--config`; `-h` and `--help-all` print help and exit."""
    from transformers import HfArgumentParser

    from hf_bahdanau.training.options import TRAINING_DEFAULTS

    if {"-h", "--help", "--help-all"} & set(argv):
        train_help_parser(full="--help-all" in argv).print_help()
        raise SystemExit(0)
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--config")
    known, rest = pre.parse_known_args(argv)
    parser = HfArgumentParser(_train_arguments(), prog="hf-bahdanau train", allow_abbrev=False)
    parser.set_defaults(**TRAINING_DEFAULTS)
    file_values = _read_config_file(known.config) if known.config else {}
    parser.set_defaults(**file_values)
    # TrainingArguments would fall back to ./trainer_output: make the choice explicit.
    given = {arg.split("=")[0] for arg in rest} | {f"--{name}" for name, value in file_values.items() if value}
    if not given & {"--output_dir", "--output-dir"}:
        raise UsageError("train needs --output-dir (on the command line or in the --config file)")
    *parsed, unknown = parser.parse_args_into_dataclasses(rest, return_remaining_strings=True)
    if unknown:
        raise UsageError(f"unrecognized arguments: {_option_names(unknown)}")
    return tuple(parsed)


def _option_names(args: Sequence[str]) -> str:
    """Unknown arguments as their option names only: a value may be a secret (a mistyped `--hub_tokn hf_...`)."""
    names = [arg.split("=")[0] for arg in args if arg.startswith("-")]
    values = len(args) - len(names)
    return " ".join(names) + (f" (and {values} value{'s' * (values > 1)}, not shown)" if values else "")


# ---- shared by evaluate and translate ---------------------------------------------------------------------


def load_translation_model(path: str, quantize: str | None = None) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """A saved model folder's model (in eval mode; `quantize="int8"`: int8 linear and recurrent layers for CPU)
    and tokenizer, checked to belong together."""
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    from hf_bahdanau.data.tokenization import check_tokenizer_location
    from hf_bahdanau.models.pipelines import check_tokenizer_matches
    from hf_bahdanau.registry import check_saved_model_type

    folder = Path(path)
    if not (folder / "config.json").is_file():
        raise UsageError(f"{folder} is not a saved model folder (no config.json)")
    check_saved_model_type(folder)  # ours only: no code from the folder runs (trust_remote_code=False below)
    check_tokenizer_location(folder, "the model folder")
    if (folder / "pytorch_model.bin").is_file() and not any(folder.glob("model*.safetensors*")):
        raise UsageError(
            f"{folder} holds only pytorch_model.bin (a pickle, which can run code): hf-bahdanau reads safetensors "
            f"only; if you trust the file, convert it once with AutoModelForSeq2SeqLM.from_pretrained('{folder}', "
            f"use_safetensors=False).save_pretrained('{folder}')"
        )
    tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=False)
    # safetensors only; every weight found (strict); no "Loading weights" bar (see the model class)
    model = AutoModelForSeq2SeqLM.from_pretrained(
        folder, use_safetensors=True, quantize=quantize, trust_remote_code=False, strict=True
    ).eval()
    check_tokenizer_matches(model.config, tokenizer)
    return model, tokenizer


def check_generation_length(model_dir: str, max_new_tokens: int | None) -> None:
    """Refuse `--max-new-tokens` beyond the model's position table (a Transformer's `max_position_embeddings`; the
    RNN has none) before anything is loaded or translated: its decoder cannot read that many tokens."""
    try:
        config = json.loads((Path(model_dir) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return  # not a model folder: `load_translation_model` says so
    table = config.get("max_position_embeddings") if isinstance(config, dict) else None
    if max_new_tokens is not None and isinstance(table, int) and max_new_tokens > table:
        raise UsageError(
            f"--max-new-tokens {max_new_tokens} is more than the model can generate: {model_dir} has a position "
            f"table of {table} tokens (max_position_embeddings); pass at most {table}"
        )


def _generation_options(args: argparse.Namespace) -> dict[str, int | float]:
    """The generation settings given on the command line; the rest come from the model's generation config."""
    options = {"num_beams": args.num_beams, "max_new_tokens": args.max_new_tokens}
    options["length_penalty"] = args.length_penalty
    return {name: value for name, value in options.items() if value is not None}


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


def _add_generation_arguments(parser: argparse.ArgumentParser) -> None:
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
        choices=QUANTIZE_CHOICES,
        help="Translate with int8 linear and recurrent layers, for CPUs (the folder stays fp32); with "
        "--engine ctranslate2, CTranslate2's int8.",
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
        "and redone when the model changes.",
    )
    parser.add_argument("--threads", type=positive_int, help="CPU threads (default: the engine's).")


def load_translator(args: argparse.Namespace, model_dir: str | None = None) -> Translator:
    """The `Translator` of `--model` (or `model_dir`) with the command's engine, quantization, threads and batches."""
    from hf_bahdanau.decoding.sources import trained_source_length
    from hf_bahdanau.decoding.translator import Translator

    path = model_dir or args.model
    options = dict(batch_size=args.batch_size, batch_tokens=getattr(args, "batch_tokens", None),
                   trained_source_length=trained_source_length(path))  # fmt: skip
    if args.engine == "ctranslate2":
        _require_ctranslate2()
        return Translator.from_folder(path, engine=args.engine, quantize=args.quantize, threads=args.threads, **options)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    model, tokenizer = load_translation_model(path, args.quantize)
    return Translator(model, tokenizer, **options)


def translate_texts(translator: Translator, texts: Sequence[str], args: argparse.Namespace) -> list[str]:
    """The best translation of each text, in order, with the command's decoding options (a bar on a terminal)."""
    options = _generation_options(args)
    return [found.text for found in translator.translate(texts, progress=sys.stderr.isatty(), **options)]


@contextlib.contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM (e.g. `kill`, a job scheduler) raises KeyboardInterrupt as Ctrl-C does, in the main thread, meanwhile."""

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGTERM, interrupt)
    except ValueError:  # not the main thread: signals stay as they are
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


# ---- evaluate ---------------------------------------------------------------------------------------------


def _check_output_file(output: Path, model_dirs: Sequence[str], inputs: Sequence[str | None] = ()) -> None:
    """Refuse a hypotheses file that is any file evaluate reads (by inode: through a symlink or a hard link too) or
    lies in a model folder (an earlier hypotheses file there excepted) or a corpus folder."""
    from hf_bahdanau.folders import files_by_inode, inode

    target = output.resolve()
    homes = [Path(folder) for folder in model_dirs if target.is_relative_to(Path(folder).resolve())]
    single = output.is_file() and not output.is_symlink() and output.stat().st_nlink == 1  # no other name
    hypotheses = target.name.startswith("hypotheses") and (single or not output.exists())
    if homes and not hypotheses:
        raise UsageError(f"--output {output} would overwrite part of the model folder {homes[0]}: choose another")
    read = files_by_inode([*model_dirs, *inputs])
    if (key := inode(output)) in read and not (homes and hypotheses):
        raise UsageError(f"--output {output} is {read[key]}, which evaluate reads: choose another")
    for path in filter(None, inputs):
        if Path(path).is_dir() and target.is_relative_to(Path(path).resolve()):
            raise UsageError(f"--output {output} would overwrite the corpus {path}, which it evaluates: choose another")


def hypotheses_file_name(split: str, languages: tuple[str, str], beams: int, args: argparse.Namespace) -> str:
    """`evaluate`'s default hypotheses file: one per split, direction and decoding (`greedy` or `beamN`, and any
    length penalty, quantization or engine), so that evaluating another way never overwrites an earlier file."""
    decoding = ["greedy" if beams == 1 else f"beam{beams}"]
    if args.length_penalty is not None:
        decoding.append(f"lp{args.length_penalty:g}")
    decoding += [name for name in (args.quantize, args.engine) if name not in (None, "torch")]
    return f"hypotheses.{split}.{'-'.join(languages)}.{'-'.join(decoding)}.txt"


def run_evaluate(args: argparse.Namespace) -> None:
    from hf_bahdanau.data.cache import named_corpus_path
    from hf_bahdanau.data.corpora import load_parallel_corpus
    from hf_bahdanau.data.run_settings import corpus_id, read_data_settings
    from hf_bahdanau.metrics import count_repeating, load_metric
    from hf_bahdanau.publishing.evaluations import record_evaluation

    check_generation_length(args.model, args.max_new_tokens)
    if args.compare:
        _check_comparable(args)
    models = [args.model, *([args.compare] if args.compare else [])]
    if args.output:
        _check_output_file(Path(args.output), models)
    translator = load_translator(args)
    # Unless told otherwise, read the corpus exactly as training did (same normalisation, hence the same split).
    settings = read_data_settings(args.model)
    if args.data and corpus_id(args.data) not in (settings.get("data"), settings.get("data_path")):
        settings = {"d2l_normalize": settings.get("d2l_normalize", False)}  # another corpus: only this carries over
    data = args.data or settings.get("data")
    location = settings.get("data_path")  # a named corpus: where training read it
    if location and Path(location).exists():
        logger.info("reading %s from %s, where training read it", data, location)
        data = location
    elif location:
        logger.warning("%s is no longer in %s, where training read it: looking it up by name", data, location)
    src_lang = args.src_lang or translator.config.source_language
    tgt_lang = args.tgt_lang or translator.config.target_language
    if not data:
        raise UsageError("the model does not record its corpus: pass --data")
    if not src_lang or not tgt_lang:
        raise UsageError("the model does not record its languages: pass --src-lang and --tgt-lang")
    _check_direction("--model", args.model, translator.config, (src_lang, tgt_lang))
    normalize = args.d2l_normalize if args.d2l_normalize is not None else settings.get("d2l_normalize", False)
    test_split = args.test_split or settings.get("test_split", "test_2016_flickr")
    corpus = load_parallel_corpus(data, src_lang, tgt_lang, test_split=test_split, normalize=normalize)
    if args.output:  # the corpus found (a name resolved to its file or folder) is no place for the hypotheses
        _check_output_file(Path(args.output), models, [data, named_corpus_path(data)])
    if args.split not in corpus:
        raise UsageError(f"{data} has no {args.split!r} split (it has {', '.join(corpus)})")
    rows = corpus[args.split]
    if args.max_samples is not None:
        rows = rows.select(range(min(args.max_samples, len(rows))))
    sources = [pair[src_lang] for pair in rows["translation"]]
    references = [pair[tgt_lang] for pair in rows["translation"]]
    hypotheses = translate_texts(translator, sources, args)
    beams = args.num_beams if args.num_beams is not None else translator.generation_config.num_beams
    # The test split of a folder by its file (test_2016_flickr): the name the results and the hypotheses file carry.
    split = test_split if args.split == "test" and Path(named_corpus_path(data) or data).is_dir() else args.split
    output = Path(args.output or Path(args.model) / hypotheses_file_name(split, (src_lang, tgt_lang), beams, args))
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text("".join(f"{line}\n" for line in hypotheses), encoding="utf-8")
    scores = load_metric().compute(predictions=hypotheses, references=[[ref] for ref in references])
    sys.stdout.write(
        f"BLEU = {scores['bleu']:.2f}  ({scores['bleu_signature']})\n"
        f"BLEU lowercased = {scores['bleu_lowercase']:.2f}  ({scores['bleu_lowercase_signature']})\n"
        f"chrF = {scores['chrf']:.2f}  ({scores['chrf_signature']})\n"
        f"length ratio = {scores['sys_len'] / scores['ref_len']:.3f}  (hypotheses {scores['sys_len']} / "
        f"references {scores['ref_len']} tokens)\n"
        f"{count_repeating(hypotheses)} of {len(hypotheses)} translations repeat a phrase back to back, "
        f"{count_repeating(hypotheses, times=3)} three times or more (a decoder caught in a loop)\n"
        f"{len(hypotheses)} {args.split} sentences, {src_lang}->{tgt_lang}, beams {beams}; hypotheses in {output}\n"
    )
    sys.stdout.flush()  # the scores stand even where they cannot be stored
    if args.quantize is None and args.engine == "torch":  # the folder's card reports its fp32 weights' scores only
        try:
            record_evaluation(args.model, scores, data=data, split=split, languages=(src_lang, tgt_lang),
                              num_beams=beams, samples=len(hypotheses))  # fmt: skip
        except ValueError as error:
            raise UsageError(f"the scores above were not stored: {error}") from None
    else:
        engine = f"{args.engine} {args.quantize or 'fp32'}"
        logger.info("scores of the %s engine not stored in %s (its card reports torch fp32)", engine, args.model)
    if args.compare:
        other = Path(args.compare) / output.name if args.output is None else output.with_suffix(".compare.txt")
        _check_output_file(other, models, [data, named_corpus_path(data)])
        _compare(args, sources, references, hypotheses, (src_lang, tgt_lang), other)


def _check_comparable(args: argparse.Namespace) -> None:
    """Refuse an `evaluate --compare` folder that is not a model or is the --model folder itself, before any work."""
    check_generation_length(args.compare, args.max_new_tokens)
    if not (Path(args.compare) / "config.json").is_file():
        raise UsageError(f"--compare {args.compare} is not a saved model folder (no config.json)")
    if Path(args.compare).resolve() == Path(args.model).resolve():
        raise UsageError(f"--compare {args.compare} is the --model folder itself: compare another model")


def _check_direction(option: str, folder: str, config: Any, languages: tuple[str, str]) -> None:
    """Refuse to score a model in a direction other than the one its config records (where it records one)."""
    recorded = (config.source_language, config.target_language)
    if any(mine and mine != wanted for mine, wanted in zip(recorded, languages, strict=True)):
        raise UsageError(f"{option} {folder} translates {'->'.join(map(str, recorded))}, not {'->'.join(languages)}")


def _compare(
    args: argparse.Namespace,
    sources: Sequence[str],
    references: Sequence[str],
    hypotheses: Sequence[str],
    languages: tuple[str, str],
    output: Path,
) -> None:
    """Translate `sources` with the --compare model (the same decoding options), write its translations to `output`
    and print sacreBLEU's paired bootstrap test of both models' BLEU and chrF (--model is the baseline)."""
    from hf_bahdanau.metrics import BOOTSTRAP_SAMPLES, SIGNIFICANCE_LEVEL, paired_bootstrap

    translator = load_translator(args, args.compare)
    _check_direction("--compare", args.compare, translator.config, languages)
    others = translate_texts(translator, sources, args)
    output.write_text("".join(f"{line}\n" for line in others), encoding="utf-8")
    lines = [
        f"paired bootstrap resampling (sacreBLEU, {BOOTSTRAP_SAMPLES} resamples), {args.model} (baseline) against "
        f"{args.compare}; its hypotheses in {output}\n"
    ]
    for result in paired_bootstrap(hypotheses, others, references):
        (score, mean, ci), (other, other_mean, other_ci) = result.baseline, result.other
        if result.identical:
            verdict = "the two models translate every sentence alike: no difference"
        else:
            verdict = "significant" if result.significant else "not significant"
            verdict = f"the difference of {other - score:+.2f} is {verdict} at {SIGNIFICANCE_LEVEL}"
        lines.append(
            f"{result.metric}: {score:.2f} (mean {mean:.2f} ± {ci:.2f}, 95% CI) against {other:.2f} (mean "
            f"{other_mean:.2f} ± {other_ci:.2f}), p = {result.p_value:.4f}: {verdict}  ({result.signature})\n"
        )
    sys.stdout.write("".join(lines))


# ---- translate --------------------------------------------------------------------------------------------


def _interactive_lines(prompt: str) -> Iterable[str]:
    """Lines typed at a prompt, until end of input or `q` (like d2l's seed loop)."""
    while True:
        try:
            line = input(prompt)
        except EOFError:
            return
        if line.strip() == "q":
            return
        yield line


def _write_heatmap(translator: Translator, text: str, args: argparse.Namespace, **options: int) -> str:
    """Translate `text` and draw its attention to `args.heatmap`: one figure of the words' cross-attention (a layer,
    a head), or with `args.heatmap_all` every layer and head, and the self-attention beside it; the translation."""
    from hf_bahdanau.decoding.attention_maps import plot_attention_maps, plot_word_attention

    class Untruncated(logging.Filter):  # the translation of `text` says it was cut: once is enough
        def filter(self, record: logging.LogRecord) -> bool:
            return "truncated" not in record.getMessage()

    said = Untruncated()
    logging.getLogger("hf_bahdanau.models.pipelines").addFilter(said)
    try:
        maps = translator.attention_maps(text, **options)
    finally:
        logging.getLogger("hf_bahdanau.models.pipelines").removeFilter(said)
    if args.heatmap_all:
        plot_attention_maps(maps, text, args.heatmap)  # save_figure logs each file written
    else:
        plot_word_attention(maps, text, args.heatmap, layer=args.heatmap_layer, head=args.heatmap_head)
    return maps.translation


def _stdin_lines() -> list[str]:
    """Lines of stdin as UTF-8; bad bytes become U+FFFD (a warning names the line), so the rest still translates."""
    from hf_bahdanau.data.text_lines import decode_lines

    stream = getattr(sys.stdin, "buffer", None)  # None for a text stand-in such as io.StringIO
    raw = stream if stream is not None else (line.encode("utf-8", "surrogateescape") for line in sys.stdin)
    return [line.rstrip("\r\n") for line in decode_lines(raw, "stdin", replace=True)]


def _stdin_chunks(max_lines: int, pause: float = 0.05) -> Iterator[list[str]]:
    """The lines of stdin (as `_stdin_lines` reads them) in chunks to translate: `max_lines` at a time, and what has
    come whenever the input pauses for `pause` seconds, so that a line typed into a pipe is translated at once. A
    stand-in without a file descriptor (io.StringIO) is one chunk."""
    import select

    from hf_bahdanau.data.text_lines import decode_lines

    try:
        fd = sys.stdin.buffer.fileno()
    except (AttributeError, OSError, ValueError):
        yield _stdin_lines()
        return
    raw: list[bytes] = []
    pending, number, ended = b"", 1, False

    def taken(count: int) -> list[str]:
        nonlocal number
        chunk, raw[:count] = raw[:count], []
        lines = [line.rstrip("\r\n") for line in decode_lines(chunk, "stdin", replace=True, start=number)]
        number += len(chunk)
        return lines

    while not ended:
        if raw and not select.select([fd], [], [], pause)[0]:
            yield taken(len(raw))  # the input paused: translate what came
            continue
        data = os.read(fd, 1 << 16)
        ended = not data
        *lines, pending = (pending + data).split(b"\n") if data else (pending, b"")
        raw.extend(line + b"\n" for line in lines if data or line)
        while len(raw) >= max_lines:
            yield taken(max_lines)
    if raw:
        yield taken(len(raw))


def _check_translate_options(args: argparse.Namespace) -> None:
    """Refuse options the engine cannot do (before anything is loaded)."""
    if args.engine != "torch":
        asked = [name for name, value in (("--heatmap", args.heatmap), ("--scores", args.scores),
                 ("--alignments", args.alignments), ("--n-best", args.n_best)) if value]  # fmt: skip
        if asked:
            raise UsageError(f"{' and '.join(asked)} need --engine torch: CTranslate2 here returns translations only")
    if args.document or args.input_format == "jsonl":
        _check_document_options(args)


def _check_document_options(args: argparse.Namespace) -> None:
    """Refuse what `--document` and `--input-format jsonl` cannot do (before anything is loaded)."""
    given = "--document" if args.document else "--input-format jsonl"
    if args.text:
        raise UsageError(f"{given} reads {args.document or 'stdin'}: leave out the sentences given as arguments")
    asked = [name for name, value in (("--heatmap", args.heatmap), ("--n-best", args.n_best),
             ("--alignments", args.alignments)) if value]  # fmt: skip
    if asked:
        raise UsageError(f"{' and '.join(asked)} do not apply to {given}: translate sentences a line each")
    if args.scores and args.input_format != "jsonl":
        raise UsageError("--scores with --document needs --input-format jsonl (a 'score' field per record)")


def _translate_documents(translator: Translator, args: argparse.Namespace) -> None:
    """`--document FILE` (paragraphs split into sentences, written back as paragraphs) and `--input-format jsonl`
    (a `text` field per line, written back with `translation`, and `score` with --scores: the mean of its
    sentences' scores); every sentence translated in length-sorted token batches, the output written in order."""
    from hf_bahdanau.decoding.documents import (
        check_language,
        grouped,
        join_document,
        jsonl_line,
        read_jsonl,
        split_document,
        text_lines,
    )

    source = args.document if args.document and args.document != "-" else "stdin"
    if source == "stdin":
        text = "\n".join(_stdin_lines())
    else:
        try:
            text = Path(source).read_bytes().decode("utf-8-sig")  # a byte-order mark is not text
        except UnicodeDecodeError as error:
            raise UsageError(f"{source} is not UTF-8 text (byte {error.start})") from None
    language = check_language(args.document_language or translator.config.source_language) if args.document else None
    jsonl = args.input_format == "jsonl"
    records = read_jsonl(text_lines(text), source) if jsonl else None
    if records is None:  # the document's lines, each the sentences of a paragraph or none (a blank line)
        layouts = [[sentences] for sentences in split_document(text, language)]
    else:  # each record's text as a document, or as one sentence; a blank line as nothing
        layouts = [[] if r is None else split_document(r["text"], language) if language
                   else [[r["text"]]] if r["text"].strip() else [[]] for r in records]  # fmt: skip
    sentences = [sentence for layout in layouts for line in layout for sentence in line]
    counts = [sum(len(line) for line in layout) for layout in layouts]
    progress = sys.stderr.isatty()  # a bar on a terminal, not in a log file
    written = 0
    try:  # each paragraph (record) is written as soon as its sentences are translated
        with terminate_as_interrupt():
            batches = translator.translate_stream(sentences, progress=progress, **_generation_options(args))
            found = grouped(counts, (translation for batch in batches for translation in batch))
            for index, (layout, hypotheses) in enumerate(zip(layouts, found, strict=True)):
                translation = join_document(layout, [hypothesis.text for hypothesis in hypotheses])
                if records is None:
                    sys.stdout.write(f"{translation}\n")
                elif records[index] is None:
                    sys.stdout.write("\n")
                else:
                    record = {**records[index], "translation": translation}
                    if args.scores:  # null where nothing was translated (0.0 would say "certain")
                        scores = [hypothesis.score for hypothesis in hypotheses if hypothesis.score is not None]
                        record["score"] = round(sum(scores) / len(scores), 4) if scores else None
                    sys.stdout.write(jsonl_line(record))
                sys.stdout.flush()
                written += 1
    except KeyboardInterrupt:
        unit = "lines" if jsonl else "paragraph lines"
        raise KeyboardInterrupt(f"interrupted: wrote {written} of {len(layouts)} {unit}") from None


def run_translate(args: argparse.Namespace) -> None:
    from hf_bahdanau.decoding.batching import SORT_WINDOW
    from hf_bahdanau.decoding.translator import hypothesis_lines

    check_generation_length(args.model, args.max_new_tokens)
    _check_translate_options(args)
    translator = load_translator(args)
    options = _generation_options(args)
    beams = options.get("num_beams") or translator.generation_config.num_beams or 1
    if args.n_best and args.n_best > beams:
        raise UsageError(
            f"--n-best {args.n_best} is more than the {beams} beams searched: pass --num-beams {args.n_best}"
        )
    if args.heatmap and not args.text:
        raise UsageError("--heatmap needs the sentence as an argument")
    if (args.heatmap_layer or args.heatmap_head or args.heatmap_all) and not args.heatmap:
        raise UsageError("--heatmap-layer, --heatmap-head and --heatmap-all need --heatmap FILE.png")
    if args.heatmap_all and (args.heatmap_layer or args.heatmap_head):
        raise UsageError("--heatmap-all draws every layer and head: leave out --heatmap-layer and --heatmap-head")
    if args.document or args.input_format == "jsonl":
        _translate_documents(translator, args)
        return
    n_best = bool(args.n_best)
    decoding = dict(options, n_best=args.n_best or 1, alignments=args.alignments)

    def lines(index: int, translation: Translation) -> str:
        return hypothesis_lines(index, translation, n_best, args.scores or n_best, args.alignments)

    if not args.text and sys.stdin.isatty():
        logger.info("type a sentence and press Enter to translate it; q (or Ctrl-D) quits")
        for line in _interactive_lines(f"{translator.config.source_language or 'source'} > "):
            sys.stdout.write(lines(0, translator.translate([line], **decoding)[0]))
        return
    # stdin in chunks: the sort window's worth of lines, or what came before the input paused
    chunks = [list(args.text)] if args.text else _stdin_chunks(SORT_WINDOW)
    written = read = 0
    try:  # each batch is written as soon as it can be, in input order: an interrupted run keeps what it has done
        with terminate_as_interrupt():
            if args.heatmap:
                _write_heatmap(translator, args.text[0], args, **options)
            progress = sys.stderr.isatty()  # a bar on a terminal, not in a log file
            for texts in chunks:
                read += len(texts)
                for batch in translator.translate_stream(texts, progress=progress, **decoding):
                    sys.stdout.write("".join(lines(written + i, translation) for i, translation in enumerate(batch)))
                    sys.stdout.flush()
                    written += len(batch)
    except KeyboardInterrupt:
        raise KeyboardInterrupt(f"interrupted: wrote {written} translations of the {read} lines read") from None


# ---- export -----------------------------------------------------------------------------------------------


def _require_ctranslate2() -> None:
    """A usage error that says how to install CTranslate2 where it is missing."""
    from hf_bahdanau.decoding.export import require_ctranslate2

    try:
        require_ctranslate2()
    except ImportError as error:
        raise UsageError(str(error)) from None


def run_export(args: argparse.Namespace) -> None:
    from hf_bahdanau.decoding.export import export_ctranslate2

    _require_ctranslate2()
    output = export_ctranslate2(args.model, args.output, args.quantization, overwrite=args.overwrite)
    sys.stdout.write(f"{output}\n")


# ---- publish ----------------------------------------------------------------------------------------------


def run_publish(args: argparse.Namespace) -> None:
    if not args.model and not args.space:
        raise UsageError("publish needs --model (or --space for the demo Space of a model already published)")
    if args.model:
        _publish_model(args)
    if args.space:
        _publish_space(args)


def _publish_space(args: argparse.Namespace) -> None:
    """`publish --space`: the demo Space of the model `--repo-id`; a dry run shows its files."""
    from hf_bahdanau.publishing.space import publish_space

    done = publish_space(args.space, args.repo_id, private=args.private, dry_run=args.dry_run,
                         commit_message=args.commit_message, license=args.license)  # fmt: skip
    if not args.dry_run:
        sys.stdout.write(f"{done.url}\n")
        return
    for name, text in done.texts.items():
        sys.stdout.write(f"==> {name} <==\n{text.rstrip()}\n\n")
    sys.stdout.write(f"dry run: would upload to the Space {done.space_id}:\n" + "".join(f"  {n}\n" for n in done.texts))
    sys.stdout.write(f"  and {len(done.package)} files of the package (hf_bahdanau/*.py), which app.py imports\n")


def _publish_model(args: argparse.Namespace) -> None:
    from hf_bahdanau.publishing.upload import publish

    if args.with_ctranslate2:
        _require_ctranslate2()
    options = dict(private=args.private, revision=args.revision, commit_message=args.commit_message)
    done = publish(args.model, args.repo_id, license=args.license, dry_run=args.dry_run,
                   overwrite_card=args.overwrite_card, with_ctranslate2=args.with_ctranslate2,
                   **options)  # fmt: skip
    if not args.dry_run:
        sys.stdout.write(f"{done.url}\n")
        return
    if not done.card_kept:  # the card that would be written, then what would happen
        sys.stdout.write(done.card_text.rstrip("\n") + "\n\n")
    sys.stdout.write(f"dry run: would upload to {done.repo_id}:\n" + "".join(f"  {n}\n" for n in done.files))
    if done.card_kept:
        sys.stdout.write(f"model card: {done.card} is kept (not made by hf-bahdanau; --overwrite-card replaces it)\n")
    else:
        sys.stdout.write(f"model card: would be written to {done.card} (shown above; nothing written)\n")


# ---- demo -------------------------------------------------------------------------------------------------


def true_or_false(text: str) -> bool:
    """argparse type: `true` or `false` (any case)."""
    if text.lower() not in ("true", "false"):
        raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")
    return text.lower() == "true"


def run_demo(args: argparse.Namespace) -> None:
    try:
        import gradio  # noqa: F401
    except ImportError:
        raise UsageError("the demo needs Gradio: pip install 'hf_bahdanau[demo]'") from None
    from hf_bahdanau.serving.demo import build_demo, launch

    launch(build_demo(args.model), port=args.port, share=args.share)


# ---- entry point ------------------------------------------------------------------------------------------


EVALUATE_EPILOG = """\
examples:
  hf-bahdanau evaluate --model runs/quick-de-en                      # the test split training held out
  hf-bahdanau evaluate --model runs/quick-de-en --num-beams 1 --max-samples 200
  hf-bahdanau evaluate --model runs/de-en --data my-corpus.tsv --split test --output hyp.txt
  hf-bahdanau evaluate --model runs/de-en --compare runs/de-en-averaged   # paired bootstrap: significant or not?
"""
TRANSLATE_EPILOG = """\
examples:
  hf-bahdanau translate --model runs/quick-de-en "Ein Hund rennt." "Zwei Männer lachen."
  hf-bahdanau translate --model runs/quick-de-en < sentences.de > sentences.en   # one line out per line in
  hf-bahdanau translate --model runs/quick-de-en                                 # a prompt; q quits
  hf-bahdanau translate --model runs/quick-de-en "Ein Hund rennt." --heatmap attention.png
  hf-bahdanau translate --model runs/quick-de-en --document letter.de.txt > letter.en.txt  # paragraphs kept
  hf-bahdanau translate --model runs/quick-de-en --input-format jsonl --scores < in.jsonl > out.jsonl
"""
EXPORT_EPILOG = """\
examples:
  hf-bahdanau export --model runs/quick-de-en --format ctranslate2 --output runs/quick-de-en-ct2
  hf-bahdanau export --model runs/quick-de-en --format ctranslate2 --output ct2-int8 --quantization int8
  hf-bahdanau translate --model runs/quick-de-en-ct2 --engine ctranslate2 < sentences.de > sentences.en
CTranslate2 is an optional extra: pip install hf_bahdanau[ctranslate2]. It runs Transformers only (no RNN).
"""
PUBLISH_EPILOG = """\
examples:
  hf-bahdanau publish --model runs/de-en --repo-id OWNER/bahdanau-de-en --dry-run
  hf-bahdanau publish --model runs/de-en --repo-id OWNER/bahdanau-de-en --private
  hf-bahdanau publish --repo-id OWNER/bahdanau-de-en --space OWNER/bahdanau-de-en-demo --dry-run  # the demo Space
The token is HF_TOKEN or the one saved by `hf auth login`. A README.md you wrote is kept (--overwrite-card replaces
it); the card publish wrote earlier is refreshed.
"""

DEMO_EPILOG = """\
examples:
  hf-bahdanau demo --model runs/quick-de-en                 # then open http://127.0.0.1:7860
  hf-bahdanau demo --model OWNER/bahdanau-de-en --port 8080
The page (Gradio, pip install hf_bahdanau[demo]) has a text box, the decoding (greedy, beam search with its beam size,
sampling with its number of samples), the translation, the n-best list with each translation's score (its mean token
log-probability), and the attention figure `translate --heatmap` draws of the translation chosen in that list (for
the Transformer, of the layer and head chosen). Gradio's analytics are off; nothing leaves 127.0.0.1 unless
--share true. Ctrl-C stops it.
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hf-bahdanau",
        description="Train, evaluate, translate with, export, publish and demonstrate d2l's attention translation "
        "models as Hugging Face models.",
        epilog="Each command has its own help, e.g. hf-bahdanau train --help.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("train", help="train a model (options: hf-bahdanau train --help)", add_help=False)
    from hf_bahdanau.cli import distill

    distill.add_parser(commands)

    def command(name: str, summary: str, epilog: str) -> argparse.ArgumentParser:
        return commands.add_parser(name, help=summary, description=summary, epilog=epilog, formatter_class=Formatter)

    evaluate = command("evaluate", "translate a split and score it with sacreBLEU and chrF", EVALUATE_EPILOG)
    _add_generation_arguments(evaluate)
    evaluate.add_argument("--data", help="A corpus name, folder, file or Hub dataset (default: the training corpus).")
    evaluate.add_argument("--split", default="test", help="The split to translate and score.")
    evaluate.add_argument(
        "--test-split", "--test_split", help="Which file of a folder is the test set (default: as trained)."
    )
    evaluate.add_argument(
        "--d2l-normalize",
        "--d2l_normalize",
        action=argparse.BooleanOptionalAction,
        help="d2l normalisation of the corpus (default: as in training).",
    )
    evaluate.add_argument("--src-lang", "--src_lang", help="Source language code (default: the model's).")
    evaluate.add_argument("--tgt-lang", "--tgt_lang", help="Target language code (default: the model's).")
    evaluate.add_argument("--max-samples", "--max_samples", type=positive_int, help="Score only the first N pairs.")
    evaluate.add_argument(
        "--output",
        help="Hypotheses file (default: hypotheses.SPLIT.SRC-TGT.DECODING.txt in --model, e.g. "
        "hypotheses.test_2016_flickr.de-en.beam5.txt; --num-beams 1: ...greedy.txt).",
    )
    evaluate.add_argument(
        "--compare",
        metavar="OTHER_MODEL_DIR",
        help="Also translate the split with this model (same decoding options; its hypotheses in its folder, or "
        "OUTPUT.compare.txt with --output) and test the difference with sacreBLEU's paired bootstrap resampling "
        "(1000 resamples): both models' BLEU and chrF with 95%% confidence intervals, the p-value, significant or not.",
    )

    translate = command("translate", "translate arguments, stdin lines, or at a prompt", TRANSLATE_EPILOG)
    _add_generation_arguments(translate)
    translate.add_argument("text", nargs="*", help="Sentences to translate (default: stdin; a prompt on a terminal).")
    translate.add_argument(
        "--heatmap",
        metavar="FILE.png",
        help="Draw the first sentence's attention into this one file: the cross-attention between source and "
        "translation words (subwords merged) of the last layer, heads averaged.",
    )
    translate.add_argument(
        "--heatmap-layer", "--heatmap_layer", type=positive_int, help="Draw this layer (from 1) instead of the last."
    )
    translate.add_argument(
        "--heatmap-head", "--heatmap_head", type=positive_int, help="Draw this head (from 1) instead of their average."
    )
    translate.add_argument(
        "--heatmap-all",
        "--heatmap_all",
        action="store_true",
        help="Draw every layer and head, token by token: the cross-attention grid in FILE.png, and for the "
        "Transformer its self-attention in FILE-encoder.png and FILE-decoder.png (three files).",
    )
    translate.add_argument(
        "--n-best",
        "--n_best",
        type=positive_int,
        help="Write the K best translations of each source (K at most the beams), best first, as lines "
        "INDEX<TAB>SCORE<TAB>TRANSLATION (INDEX: the source's line, from 0).",
    )
    translate.add_argument(
        "--scores",
        action="store_true",
        help="Write SCORE<TAB>TRANSLATION lines: SCORE is the translation's mean token log-probability (0 is "
        "certain; low scores flag doubtful output); an empty source gets 0.0000 and an empty translation.",
    )
    translate.add_argument(
        "--alignments",
        action="store_true",
        help="Append <TAB>ALIGNMENT to each line: Pharaoh pairs i-j linking source word i to translation word j "
        "(whitespace words from 0, subwords merged), each translation word to the source word it attends to most "
        "(the Transformer's last-layer cross-attention averaged over heads; the RNN's attention).",
    )
    translate.add_argument(
        "--batch-tokens",
        "--batch_tokens",
        type=positive_int,
        help="Batches hold at most N padded source tokens (and at most --batch-size sentences); sources are "
        "sorted by length (within windows of 2,000 lines) and written back in input order.",
    )
    translate.add_argument(
        "--document",
        metavar="FILE",
        help="Translate a document (- for stdin): paragraphs (split at blank lines, their lines joined) are split "
        "into sentences (sentencex), and each paragraph's translation is written on one line, its sentences joined "
        "by a space; blank lines are kept. With --input-format jsonl, each record's text is such a document.",
    )
    translate.add_argument(
        "--document-language",
        "--document_language",
        metavar="CODE",
        help="The language the sentence splitter splits --document by (default: the model's source language).",
    )
    translate.add_argument(
        "--input-format",
        "--input_format",
        choices=("text", "jsonl"),
        default="text",
        help="jsonl: each input line is a JSON object with a 'text' field; each output line is that object with "
        "'translation' added (and 'score' with --scores, a document's the mean of its sentences').",
    )

    publishing = command("publish", "write the model card and upload the model to the Hub", PUBLISH_EPILOG)
    publishing.add_argument(
        "--model", help="A saved model folder (from `train`); leave it out with --space for a model already published."
    )
    publishing.add_argument("--repo-id", "--repo_id", required=True, help="OWNER/NAME on the Hub.")
    publishing.add_argument("--private", action="store_true", help="Create the repo private.")
    publishing.add_argument("--revision", help="Upload to this branch (created if needed; default: main).")
    publishing.add_argument("--commit-message", "--commit_message", help="Commit message (default: the Hub's).")
    publishing.add_argument("--license", default=DEFAULT_LICENSE, help="License id for the card.")
    publishing.add_argument(
        "--dry-run", "--dry_run", action="store_true", help="Show the card and the files; write and upload nothing."
    )
    publishing.add_argument(
        "--overwrite-card",
        "--overwrite_card",
        action="store_true",
        help="Replace a README.md not made by hf-bahdanau (default: keep it and upload it as it is).",
    )
    publishing.add_argument(
        "--with-ctranslate2",
        "--with_ctranslate2",
        action="store_true",
        help="Also upload the model's CTranslate2 export (float32) in the repo's ctranslate2/ folder.",
    )
    publishing.add_argument(
        "--space",
        metavar="OWNER/NAME",
        help="Also write and upload a Gradio Space that serves `hf-bahdanau demo` for the model --repo-id (app.py, "
        "requirements.txt, its README.md, and a copy of this package); with --dry-run, show those files.",
    )

    demo = command("demo", "serve a web page to try a model: translations, n-best lists, attention", DEMO_EPILOG)
    demo.add_argument("--model", required=True, help="A saved model folder, or the Hub repo id of a published model.")
    demo.add_argument("--port", type=positive_int, default=7860, help="The port on 127.0.0.1.")
    demo.add_argument(
        "--share",
        type=true_or_false,
        default=False,
        metavar="{true,false}",
        help="Also ask Gradio for a public share link (which goes through Gradio's servers).",
    )

    exporting = command("export", "export a Transformer for a faster inference engine (CTranslate2)", EXPORT_EPILOG)
    exporting.add_argument("--model", required=True, help="A saved d2l_transformer folder, or a Hub repo id.")
    exporting.add_argument("--format", choices=("ctranslate2",), default="ctranslate2", help="The engine's format.")
    exporting.add_argument("--output", required=True, help="The folder to write the export to.")
    exporting.add_argument(
        "--quantization", choices=EXPORT_QUANTIZATIONS, default="float32", help="How the weights are stored."
    )
    exporting.add_argument("--overwrite", action="store_true", help="Replace an earlier export in --output.")

    from hf_bahdanau.serving.command import SERVE_EPILOG, SERVE_SUMMARY, add_serve_arguments

    add_serve_arguments(command("serve", SERVE_SUMMARY, SERVE_EPILOG))
    parser.description += f" Commands: {', '.join(commands.choices)}."
    return parser


def _disable_datasets_progress_bars() -> None:
    """Turn off `datasets`' progress bars without importing it (a second of start-up that `translate` never uses):
    through the variable it reads at import, or directly where it is already imported."""
    os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
    if "datasets" in sys.modules:
        sys.modules["datasets"].disable_progress_bars()


def _prepare_libraries() -> None:
    """Register the model types and the pipeline; the libraries' progress bars only on a terminal."""
    import huggingface_hub
    from transformers.utils import logging as transformers_logging

    from hf_bahdanau import register

    register()  # the model types and the pipeline (the command line skips it at import to answer --help fast)
    if not sys.stderr.isatty():
        _disable_datasets_progress_bars()
        huggingface_hub.utils.disable_progress_bars()
        transformers_logging.disable_progress_bar()


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns the exit status (non-zero with a one-line error on bad input)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    args, rest = build_parser().parse_known_args(argv)
    try:
        if args.command == "train":
            train_args = parse_train_args(rest)
            _prepare_libraries()
            from hf_bahdanau.training.run import release_process_group, train

            train(*train_args, command=argv)
            release_process_group()
            return 0
        if args.command == "distill":
            from hf_bahdanau.cli import distill

            distill.run(args, rest, argv, prepare=_prepare_libraries)
            return 0
        if rest:
            raise UsageError(f"unrecognized arguments: {_option_names(rest)}")
        _prepare_libraries()
        from hf_bahdanau.serving.command import run_serve

        commands = {"evaluate": run_evaluate, "export": run_export, "publish": run_publish, "translate": run_translate,
                    "demo": run_demo, "serve": run_serve}  # fmt: skip
        commands[args.command](args)
    except (UsageError, ValueError, OSError) as error:  # the user's input; anything else is a bug: traceback
        logger.error("%s", redact_message(str(error)))  # a message may quote an option's value
        return 1
    except KeyboardInterrupt as interrupt:  # Ctrl-C: training has saved a checkpoint to resume from
        logger.error("%s", str(interrupt) or "interrupted")
        return 130
    return 0
