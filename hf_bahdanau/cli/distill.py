"""`hf-bahdanau distill`: sequence-level knowledge distillation, parsed and called.

The teacher translates the train split (`distillation.teacher_translations`, cached), then a student trains on
those translations through `train` with the teacher's tokenizer and languages, and `distillation.json` in the
student's folder names the teacher, the data, the settings and the teacher's scores for the card. Every `train`
option (and `--config`) is taken too.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .arguments import UsageError, positive_int
from .train import parse_train_args, split_config

DISTILL_EPILOG = """\
Every option of `hf-bahdanau train` is taken too (hf-bahdanau train --help), --config included; the corpus and
languages default to the teacher's, and the tokenizer is the teacher's.

examples:
  hf-bahdanau distill --teacher runs/multi30k-transformer-de-en --output-dir runs/distill-6-1 \\
    --config scripts/multi30k/distill-transformer-6-1-de-en.yaml
  hf-bahdanau distill --teacher runs/tf-de-en --output-dir runs/student --model_type transformer --d_model 128 \\
    --mix-references
"""


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Add `distill` and its own options to the command line's subparsers."""
    summary = "train a small student on a teacher's translations (sequence-level knowledge distillation)"
    parser = commands.add_parser(
        "distill",
        help=summary,
        description=summary,
        epilog=DISTILL_EPILOG,
        add_help=False,
        allow_abbrev=False,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--teacher", help="The teacher's model folder (from `train`).")
    parser.add_argument(
        "--distill-beams", "--distill_beams", type=positive_int, default=5, help="The teacher's beams (default 5)."
    )
    parser.add_argument(
        "--distill-engine",
        "--distill_engine",
        choices=("auto", "torch", "ctranslate2"),
        default="auto",
        help="What runs the teacher (auto: CTranslate2 for a Transformer when it is installed, else torch).",
    )
    parser.add_argument(
        "--distill-max-new-tokens",
        "--distill_max_new_tokens",
        type=positive_int,
        help="The teacher's longest translation, in tokens (default: its generation config's).",
    )
    parser.add_argument(
        "--distill-batch-size", "--distill_batch_size", type=positive_int, default=32, help="Teacher sentences a batch."
    )
    parser.add_argument(
        "--mix-references",
        "--mix_references",
        action="store_true",
        help="Train on the teacher's translations and the original references (each source twice).",
    )
    parser.add_argument(
        "--distillation-cache",
        "--distillation_cache",
        help="Where the teacher's translations are cached (default: $HF_BAHDANAU_CACHE/distillation).",
    )
    parser.set_defaults(distill_parser=parser)


def _teacher_config(teacher: Path) -> dict[str, Any]:
    from hf_bahdanau.json_files import read_json
    from hf_bahdanau.publishing.model_folder import check_model_folder

    return read_json(check_model_folder(teacher) / "config.json")


def adopt_teacher(teacher: Path, model_args: Any, tokenizer_args: Any, data_args: Any) -> None:
    """Give the student the teacher's corpus (unless --data), languages and tokenizer; a one-line InputError when
    the student's languages or tokenizer differ from the teacher's."""
    from transformers import AutoConfig, AutoTokenizer

    from hf_bahdanau.data.run_settings import read_data_settings
    from hf_bahdanau.errors import InputError, as_input_error
    from hf_bahdanau.models.pipelines import tokenizer_fingerprint

    config, settings = _teacher_config(teacher), read_data_settings(teacher)
    languages = (config.get("source_language") or settings.get("src_lang"), config.get("target_language") or
                 settings.get("tgt_lang"))  # fmt: skip
    if not data_args.data:
        data_args.data = settings.get("data")
        for name in ("test_split", "d2l_normalize"):
            setattr(data_args, name, settings.get(name, getattr(data_args, name)))
    student = (data_args.src_lang or languages[0], data_args.tgt_lang or languages[1])
    if None in languages:
        raise InputError(f"the teacher {teacher} records no languages: it was not trained by `hf-bahdanau train`")
    if student != languages:
        raise InputError(f"the student's languages {'-'.join(student)} differ from the teacher's {'-'.join(languages)}")
    data_args.src_lang, data_args.tgt_lang = languages
    given, student_folder = tokenizer_args.tokenizer_name_or_path, model_args.model_name_or_path
    with as_input_error(ValueError, OSError):  # what transformers refuses in the teacher's or student's folder
        teacher_tokens = tokenizer_fingerprint(AutoTokenizer.from_pretrained(teacher, trust_remote_code=False))
        given_tokens = given and tokenizer_fingerprint(AutoTokenizer.from_pretrained(given, trust_remote_code=False))
        saved = student_folder and AutoConfig.from_pretrained(student_folder, trust_remote_code=False)
    if given and given_tokens != teacher_tokens:
        raise InputError(f"the student's tokenizer {given} is not the teacher's: leave out --tokenizer_name_or_path")
    if saved:
        if getattr(saved, "tokenizer_fingerprint", None) != teacher_tokens:
            raise InputError(f"the student {student_folder} has another tokenizer than the teacher's")
        if (saved.source_language, saved.target_language) != languages:
            raise InputError(f"the student {student_folder} translates other languages than the teacher")
    tokenizer_args.tokenizer_name_or_path = str(teacher)


def distillation_record(teacher: Path, info: dict[str, Any], train_pairs: int, mix_references: bool) -> dict:
    """What `distillation.json` holds: the teacher, the data and its costs, the decoding, the teacher's scores."""
    from hf_bahdanau.publishing.card import count_parameters
    from hf_bahdanau.publishing.evaluations import dataset_label, read_evaluations

    config = _teacher_config(teacher)
    return {
        "teacher": {
            "name": teacher.resolve().name,
            "model_type": config["model_type"],
            "parameters": count_parameters(teacher),
            "fingerprint": info["teacher_fingerprint"],
        },
        "data": {
            "corpus": dataset_label(info["corpus"]),
            "pairs": info["pairs"],
            "train_pairs": train_pairs,
            "mix_references": mix_references,
            "key": info["key"],
            "disk_bytes": info["disk_bytes"],
            "teacher_seconds": info["teacher_seconds"],
        },
        "decoding": {name: info[name] for name in ("engine", "num_beams", "max_new_tokens", "batch_size")},
        "teacher_scores": read_evaluations(teacher),
    }


def run(
    args: argparse.Namespace, rest: list[str], command: Sequence[str], prepare: Callable[[], None] = lambda: None
) -> None:
    """Check everything, translate (or reuse) the teacher's data, train the student, record the distillation.
    `command`: the `hf-bahdanau distill ...` arguments, recorded for the student's card; `prepare`: what readies the
    libraries once the options are parsed (the command line's registration)."""
    if {"-h", "--help"} & set(rest):
        args.distill_parser.print_help()
        raise SystemExit(0)
    if not args.teacher:
        raise UsageError("distill needs --teacher (the teacher's model folder)")
    from hf_bahdanau.data.corpora import load_parallel_corpus
    from hf_bahdanau.data.run_settings import corpus_id
    from hf_bahdanau.publishing.card import DISTILLATION_FILE
    from hf_bahdanau.training.distillation import Decoding, default_engine, student_pairs, teacher_translations
    from hf_bahdanau.training.run import check_options, release_process_group, train
    from hf_bahdanau.training.run_folder import check_output_dir, locked_output_dir

    teacher = Path(args.teacher)
    model_args, tokenizer_args, data_args, training_args, run_args = train_args = parse_train_args(rest)
    if training_args.process_index == 0:  # a folder train cannot lock fails before the teacher (train locks there)
        with locked_output_dir(Path(training_args.output_dir)):
            pass
    prepare()
    adopt_teacher(teacher, model_args, tokenizer_args, data_args)
    if data_args.streaming:
        raise UsageError("distill does not stream: the teacher translates the whole train split")
    if training_args.push_to_hub:
        raise UsageError("distill does not push: publish the student with `hf-bahdanau publish --model DIR`")
    check_options(*train_args)
    output_dir = Path(training_args.output_dir).resolve()
    inputs = (str(teacher), data_args.data, split_config(rest)[0])
    check_output_dir(output_dir, run_args.resume, run_args.overwrite, inputs)
    train_split = load_parallel_corpus(
        data_args.data, data_args.src_lang, data_args.tgt_lang, test_split=data_args.test_split,
        normalize=data_args.d2l_normalize, splits=("train",), max_pairs=data_args.max_train_samples,
    )["train"]  # fmt: skip
    engine = default_engine(teacher) if args.distill_engine == "auto" else args.distill_engine
    decoding = Decoding(engine, args.distill_beams, args.distill_max_new_tokens, args.distill_batch_size)
    try:
        translations = teacher_translations(
            teacher, train_split, data_args.src_lang, data_args.tgt_lang, decoding, args.distillation_cache,
            corpus=corpus_id(data_args.data),
        )  # fmt: skip
    except KeyboardInterrupt:
        raise KeyboardInterrupt("interrupted while the teacher translated: the same command resumes") from None
    pairs = student_pairs(translations.dataset, data_args.src_lang, data_args.tgt_lang, args.mix_references)
    data_args.max_train_samples = None  # the teacher translated only those; the references mixed in stay
    trainer = train(*train_args, train_pairs=pairs, command=command)
    if trainer.is_world_process_zero():
        record = distillation_record(teacher, translations.info, len(pairs), args.mix_references)
        (output_dir / DISTILLATION_FILE).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
        sys.stderr.write(f"student saved in {output_dir}; the distillation is recorded in {DISTILLATION_FILE}\n")
    release_process_group()
