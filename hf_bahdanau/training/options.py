"""The `train` command's options: dataclasses for `HfArgumentParser`, the Trainer defaults, and their checks.

`ModelArguments` is built from the model configurations' docstrings: one optional option per architecture field of
any registered model type, its help the field's first sentence, its default its config's. The checks raise a
one-line InputError for settings that would fail mid-run, before any file is read or written.
"""

from __future__ import annotations

import importlib.util
import re
import sys
import typing
from dataclasses import dataclass, field, fields, make_dataclass
from typing import Any

import torch
from transformers import Seq2SeqTrainingArguments, Trainer, TrainingArguments

from hf_bahdanau.data.tokenization import MODELS as TOKENIZER_MODELS
from hf_bahdanau.data.tokenization import check_bpe_dropout
from hf_bahdanau.errors import InputError
from hf_bahdanau.models.configuration_translation import NOT_ARCHITECTURE, TranslationConfig
from hf_bahdanau.registry import MODEL_TYPE_NAMES, get_model_type


@dataclass
class TokenizerArguments:
    """The tokenizer: a saved one, or a new one trained on the corpus."""

    tokenizer_name_or_path: str | None = field(
        default=None, metadata={"help": "A saved tokenizer (folder or Hub id) to use instead of training one."}
    )
    tokenizer_type: str = field(default="bpe", metadata={"help": "Tokenizer to train: bpe, unigram or word (d2l)."})
    vocab_size: int = field(default=8000, metadata={"help": "Joint vocabulary size of a trained tokenizer."})
    min_freq: int = field(default=2, metadata={"help": "Minimum frequency of a BPE merge or a word."})
    tokenizer_train_samples: int | None = field(
        default=None,
        metadata={
            "help": "Train the tokenizer on a seeded sample of this many training pairs (default: all of a corpus up "
            "to 1,000,000 pairs, a sample of 1,000,000 above)."
        },
    )
    bpe_dropout: float = field(
        default=0.0,
        metadata={
            "help": "BPE-dropout while training (tokenizers' BPE(dropout=...)): each merge skipped with this "
            "probability, the train pairs segmented anew each epoch; the saved tokenizer has none (0: off)."
        },
    )


# Config fields that are not model options: those that are not architecture, and the tokenizer's vocabulary size.
_NOT_MODEL_OPTIONS = {*NOT_ARCHITECTURE, "vocab_size"}


def _documented_fields(config_class: type) -> dict[str, str]:
    """`{field: first sentence of its description}` from the `Args:` sections of a config class and its bases (ours,
    not `PretrainedConfig`'s)."""
    helps: dict[str, str] = {}
    for cls in reversed([cls for cls in config_class.__mro__ if issubclass(cls, TranslationConfig)]):
        doc = (cls.__dict__.get("__doc__") or "").split("Args:")[-1]
        for names, text in re.findall(r"^ {8}(\w[\w, ]*) \(`.*?\):\n((?: {12}.*\n?)+)", doc, re.MULTILINE):
            sentence = " ".join(text.split()).split(". ")[0].rstrip(".")
            helps.update({name.strip(): sentence for name in names.split(",")})
    return helps


def _option_type(annotation: Any) -> type:
    """The one type an option parses to: float for `float | int`, the type itself otherwise."""
    if isinstance(annotation, str):  # postponed annotations of builtin types, e.g. "float | int"
        annotation = eval(annotation, {"__builtins__": __builtins__})
    kinds = [kind for kind in typing.get_args(annotation) or (annotation,) if kind is not type(None)]
    return float if float in kinds else kinds[0]


def _model_option_fields() -> list[tuple[str, Any, Any]]:
    """One optional option per architecture field of any registered model type; help says which types have it."""
    options: dict[str, dict[str, Any]] = {}
    for name, (config_class, _) in MODEL_TYPE_NAMES_AND_CLASSES.items():
        helps, defaults = _documented_fields(config_class), config_class()
        for field_name, config_field in config_class.config_fields().items():
            if field_name in _NOT_MODEL_OPTIONS or field_name not in helps:
                continue
            kind = _option_type(config_field.annotation)
            option = options.setdefault(field_name, {"type": kind, "help": helps[field_name]})
            option.setdefault("defaults", []).append(f"{name} {getattr(defaults, field_name)}")
    return [
        (
            name,
            option["type"] | None,
            field(default=None, metadata={"help": f"{option['help']} (default: {', '.join(option['defaults'])})"}),
        )
        for name, option in options.items()
    ]


MODEL_TYPE_NAMES_AND_CLASSES = {name: get_model_type(name) for name in MODEL_TYPE_NAMES}


def _config_overrides(self: Any, config_class: type[TranslationConfig] | None = None) -> dict[str, Any]:
    """The model options given (not None), checked to belong to `config_class` (a saved model's; default:
    `model_type`'s): a one-line InputError names the options of another model type, and that type."""
    saved = config_class is not None
    config_class = config_class or get_model_type(self.model_type).config_class
    given = {f.name: getattr(self, f.name) for f in fields(self)[2:] if getattr(self, f.name) is not None}
    foreign = sorted(set(given) - set(config_class.config_fields()))
    if foreign:
        owners = [
            name
            for name, (other, _) in MODEL_TYPE_NAMES_AND_CLASSES.items()
            if set(foreign) <= set(other.config_fields())
        ]
        short = {model_type: name for name, model_type in MODEL_TYPE_NAMES.items()}.get(config_class.model_type)
        one = len(foreign) == 1
        hint = f"leave {'it' if one else 'them'} out"
        if owners and not saved:
            hint += f" or pass --model_type {owners[0]}"
        raise InputError(
            f"{', '.join(f'--{name}' for name in foreign)} {'is an option' if one else 'are options'} of "
            f"{' and '.join(owners) + ' models' if owners else 'other model types'}, not of "
            f"{'the saved' if saved else 'a'} {short or config_class.model_type} model: {hint}"
        )
    return given


ModelArguments = make_dataclass(
    "ModelArguments",
    [
        ("model_type", str, field(default="bahdanau", metadata={"help": f"One of {', '.join(MODEL_TYPE_NAMES)}."})),
        ("model_name_or_path", str | None, field(default=None, metadata={"help": "Continue from a saved model."})),
        *_model_option_fields(),
    ],
    namespace={
        "__doc__": "The model: its type and the options of a new one (default: its config's), or a saved model.",
        "config_overrides": _config_overrides,
    },
)


@dataclass
class DataArguments:
    """The corpus and how it is cut."""

    data: str | None = field(
        default=None, metadata={"help": "A corpus name (multi30k, tatoeba-fra-eng), folder, file or Hub dataset."}
    )
    src_lang: str | None = field(default=None, metadata={"help": "Source language code, e.g. de."})
    tgt_lang: str | None = field(default=None, metadata={"help": "Target language code, e.g. en."})
    test_split: str = field(default="test_2016_flickr", metadata={"help": "Which file of a folder is the test set."})
    d2l_normalize: bool = field(default=False, metadata={"help": "d2l's normalisation (lowercase, split punctuation)."})
    max_train_samples: int | None = field(default=None, metadata={"help": "Use only the first N training pairs."})
    max_eval_samples: int | None = field(default=500, metadata={"help": "Validation pairs used during training."})
    max_source_length: int = field(default=64, metadata={"help": "Longer sources are cut (keeping </s>)."})
    max_target_length: int = field(default=64, metadata={"help": "Longer targets are cut (keeping </s>)."})
    num_proc: int | None = field(default=None, metadata={"help": "Processes that tokenize the corpus."})
    streaming: bool = field(
        default=False,
        metadata={
            "help": "Stream the train files of a corpus folder from disk, tokenized on the fly and batched by length "
            "(needs --max_steps); resume continues the stream where it stopped."
        },
    )
    bucket_buffer_size: int = field(
        default=10000, metadata={"help": "With --streaming: pairs read, sorted by length and batched at a time."}
    )


@dataclass
class RunArguments:
    """The run's own options beside the Trainer's: its objective and how it relates to earlier runs."""

    unlikelihood: float = field(
        default=0.0,
        metadata={
            "help": "Weight of the token-level unlikelihood loss (Welleck et al., 2020) added in training: at each "
            "target position, -log(1 - p) of every earlier target token but the right one, which trains the decoder "
            "against repeating itself (0: off)."
        },
    )
    teacher_forcing_ratio: float = field(
        default=1.0,
        metadata={
            "help": "The probability of feeding the decoder the gold previous token in training; below 1, its own "
            "greedy prediction otherwise (scheduled sampling, one decoder step at a time, one process)."
        },
    )

    resume: bool = field(default=False, metadata={"help": "Continue from the last checkpoint in output_dir."})
    overwrite: bool = field(default=False, metadata={"help": "Replace an existing, non-empty output_dir."})
    early_stopping_patience: int = field(
        default=5, metadata={"help": "Stop after this many evaluations without a better BLEU (0: never)."}
    )
    average_checkpoints: int = field(
        default=0,
        metadata={
            "help": "Save the mean of the weights of the last N checkpoints as the final model (fairseq's checkpoint "
            "averaging; 0: off); keeps at least N checkpoints."
        },
    )
    quality_estimator: bool = field(
        default=True,
        metadata={
            "help": "At the end, fit the model's quality estimators on the validation split, as `hf-bahdanau "
            "calibrate` does (quality_estimator.json; --no_quality_estimator: skip it)."
        },
    )


# The Trainer's setting for length-grouped batches: `train_sampling_strategy="group_by_length"` from transformers 5.2
# on, `group_by_length=True` on 5.0 and 5.1.
LENGTH_GROUPED: dict[str, Any] = (
    {"train_sampling_strategy": "group_by_length"}
    if "train_sampling_strategy" in {item.name for item in fields(TrainingArguments)}
    else {"group_by_length": True}
)


def groups_by_length(args: TrainingArguments) -> bool:
    """Whether `args` ask for length-grouped batches (`LENGTH_GROUPED`, the installed release's setting)."""
    return all(getattr(args, name) == value for name, value in LENGTH_GROUPED.items())


def stop_grouping_by_length(args: TrainingArguments) -> None:
    """Turn the Trainer's length-grouped sampler off, for a stream that is batched by length as it is read (which
    transformers 5.0 and 5.1 refuse to combine with the sampler; later releases ignore the sampler there)."""
    defaults = {item.name: item.default for item in fields(TrainingArguments)}
    for name in LENGTH_GROUPED:
        setattr(args, name, defaults[name])


TRAINING_DEFAULTS = dict(
    per_device_train_batch_size=64,
    per_device_eval_batch_size=64,
    learning_rate=2e-3,
    lr_scheduler_type="linear",
    warmup_steps=200,
    max_grad_norm=1.0,
    num_train_epochs=10,
    eval_strategy="steps",
    eval_steps=500,
    save_strategy="steps",
    save_steps=500,
    save_total_limit=2,
    logging_steps=50,
    load_best_model_at_end=True,
    metric_for_best_model="bleu",
    greater_is_better=True,
    predict_with_generate=True,
    **LENGTH_GROUPED,
    dataloader_pin_memory=torch.cuda.is_available(),
    report_to="none",
    trackio_space_id=None,  # trackio's local store, as from transformers 5.6 on (up to 5.5 the default is a Hub Space)
    disable_tqdm=not sys.stderr.isatty(),  # a progress bar on a terminal; in a log file, one line per log entry
)


# What `make_compute_metrics` reports besides the loss: the names --metric_for_best_model may take.
METRIC_NAMES = ("loss", "bleu", "chrf", "gen_len")
# The --report_to trackers tested here, and the package each needs (the Trainer fails on a missing one with a trace).
REPORT_PACKAGES = {"tensorboard": "tensorboard", "trackio": "trackio"}


def check_training_arguments(training_args: Seq2SeqTrainingArguments) -> None:
    """Raise a one-line InputError for settings the Trainer accepts but fails on mid-run (or misreads)."""
    if training_args.max_steps == 0 or training_args.max_steps < -1:
        raise InputError(
            f"--max_steps must be positive (or -1: --num_train_epochs decides), got {training_args.max_steps}"
        )
    if training_args.learning_rate < 0:
        raise InputError(f"--learning_rate must not be negative, got {training_args.learning_rate}")
    for name in ("per_device_train_batch_size", "per_device_eval_batch_size", "gradient_accumulation_steps"):
        if getattr(training_args, name) < 1:
            raise InputError(f"--{name} must be a positive integer, got {getattr(training_args, name)}")
    for tracker in training_args.report_to or ():
        package = REPORT_PACKAGES.get(tracker)
        if package is not None and importlib.util.find_spec(package) is None:
            raise InputError(f"--report_to {tracker} needs the {package} package: pip install {package}")
    metric = training_args.metric_for_best_model
    if metric is not None and metric.removeprefix("eval_") not in METRIC_NAMES:
        raise InputError(f"--metric_for_best_model {metric!r} is not reported; choose one of {', '.join(METRIC_NAMES)}")
    try:
        Trainer.get_optimizer_cls_and_kwargs(training_args)
    except (ImportError, ValueError) as error:
        optim = getattr(training_args.optim, "value", training_args.optim)
        raise InputError(f"--optim {optim}: {str(error).splitlines()[0]}") from None


def check_objective(run_args: RunArguments, training_args: TrainingArguments) -> None:
    """Raise a one-line InputError for an objective the run cannot train with."""
    if not 0.0 <= training_args.label_smoothing_factor < 1.0:
        raise InputError(f"--label_smoothing_factor must be in [0, 1), got {training_args.label_smoothing_factor}")
    if run_args.unlikelihood < 0:
        raise InputError(f"--unlikelihood must be 0 or more, got {run_args.unlikelihood}")
    if not 0.0 <= run_args.teacher_forcing_ratio <= 1.0:
        raise InputError(f"--teacher_forcing_ratio must be in [0, 1], got {run_args.teacher_forcing_ratio}")
    if run_args.teacher_forcing_ratio < 1 and training_args.world_size > 1:
        raise InputError(
            "--teacher_forcing_ratio below 1 (scheduled sampling) trains in one process: run it without accelerate "
            "launch or torchrun, or leave the ratio at 1"
        )


def check_streaming_arguments(data_args: DataArguments, training_args: TrainingArguments) -> None:
    """Raise a one-line InputError for --streaming without what it needs (a stream has no length to count epochs in)."""
    if not data_args.streaming:
        return
    if training_args.max_steps <= 0:
        raise InputError("--streaming needs --max_steps: a stream has no length, so --num_train_epochs cannot end it")
    if data_args.bucket_buffer_size < training_args.per_device_train_batch_size:
        raise InputError(
            f"--bucket_buffer_size {data_args.bucket_buffer_size} must hold at least one batch "
            f"(--per_device_train_batch_size {training_args.per_device_train_batch_size})"
        )
    if data_args.max_train_samples is not None:
        raise InputError("--max_train_samples does not apply to --streaming: --max_steps ends the run")


def check_tokenizer_arguments(tokenizer_args: TokenizerArguments, data_args: DataArguments, trains: bool) -> None:
    """Raise a one-line InputError for --bpe_dropout outside [0, 1) or with --streaming and, when the run trains its
    tokenizer (`trains`: no saved tokenizer, model or run to continue), for an unknown --tokenizer_type or
    --bpe_dropout with one that is not BPE: before the corpus is read and the tokenizer trained."""
    check_bpe_dropout(tokenizer_args.bpe_dropout, data_args.streaming)
    if not trains:  # a saved tokenizer's type is known once it is loaded (`with_bpe_dropout` checks it then)
        return
    kind = tokenizer_args.tokenizer_type
    if kind not in TOKENIZER_MODELS:
        raise InputError(f"--tokenizer_type {kind!r} is not one of {', '.join(TOKENIZER_MODELS)}")
    if tokenizer_args.bpe_dropout and kind != "bpe":
        raise InputError(f"--bpe_dropout needs a BPE tokenizer (--tokenizer_type bpe), not --tokenizer_type {kind}")


def check_position_lengths(table: int | None, data_args: DataArguments, training_args: TrainingArguments) -> None:
    """Raise a one-line InputError when a length option exceeds the model's position table (a Transformer's
    `max_position_embeddings`; None: no table): training would fail on its first long batch, evaluation at its first
    translation."""
    lengths = {
        "max_source_length": data_args.max_source_length,
        "max_target_length": data_args.max_target_length,
        "generation_max_length": getattr(training_args, "generation_max_length", None),
    }
    for option, value in lengths.items():
        if table is not None and value is not None and value > table:
            raise InputError(
                f"--{option} {value} is more than the model's position table holds (max_position_embeddings "
                f"{table}): pass at most {table}, or a larger --max_position_embeddings"
            )


def new_model_table(model_args: ModelArguments) -> int | None:
    """The position table a new model of `model_args` gets (None for a model type without one)."""
    if model_args.max_position_embeddings is not None:
        return model_args.max_position_embeddings
    default = get_model_type(model_args.model_type).config_class.config_fields().get("max_position_embeddings")
    return None if default is None else default.default


__all__ = [
    "DataArguments",
    "LENGTH_GROUPED",
    "METRIC_NAMES",
    "ModelArguments",
    "RunArguments",
    "TRAINING_DEFAULTS",
    "TokenizerArguments",
    "check_objective",
    "check_position_lengths",
    "check_streaming_arguments",
    "check_tokenizer_arguments",
    "check_training_arguments",
    "groups_by_length",
    "stop_grouping_by_length",
    "new_model_table",
]
