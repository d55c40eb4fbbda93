"""The training run: checks -> output folder (locked) -> corpus and tokenizer -> model -> trainer -> train -> save.

Its options live in `options`, its folder (lock, checkpoint manifests, staging, swap) in `run_folder`, the tokenizer
and model in `assembly`, the Trainer in `trainer`.

The flow: `load_parallel_corpus` -> `train_tokenizer` (or a saved one) -> `tokenize_corpus` -> a model of any
registered type made from `ModelArguments` (each option defaults to its config's default) -> `Seq2SeqTrainer` with
`DataCollatorForSeq2Seq`, sacreBLEU evaluation with generation, best-checkpoint keeping and early stopping ->
a `save_pretrained` folder with tokenizer, generation config, remote code and the translation pipeline.
Several GPUs need no change: run the same command under `accelerate launch`.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import datasets
import torch
from safetensors import SafetensorError
from transformers import (
    EarlyStoppingCallback,
    PreTrainedTokenizerBase,
    Seq2SeqTrainer,
    Seq2SeqTrainingArguments,
    set_seed,
)

from hf_bahdanau.data.cache import named_corpus_path
from hf_bahdanau.data.corpora import load_parallel_corpus
from hf_bahdanau.data.readers import check_local_source
from hf_bahdanau.data.run_settings import corpus_id
from hf_bahdanau.data.streaming import (
    LengthBucketedBatches,
    StreamStateCallback,
    resume_stream,
    stream_train_pairs,
    tokenized_stream,
)
from hf_bahdanau.data.tokenization import DEFAULT_TRAIN_SAMPLES, BpeDropoutEncoder, bpe_dropout_view
from hf_bahdanau.data.tokenized import tokenize_corpus
from hf_bahdanau.errors import InputError
from hf_bahdanau.models.pipelines import save_for_pipeline
from hf_bahdanau.publishing import upload
from hf_bahdanau.registry import check_saved_model_type, get_model_type
from hf_bahdanau.training.assembly import apply_generation_settings, build_model, load_or_train_tokenizer
from hf_bahdanau.training.averaging import average_last_checkpoints, check_averaging
from hf_bahdanau.training.callbacks import InterruptToCheckpoint
from hf_bahdanau.training.options import (
    DataArguments,
    ModelArguments,
    RunArguments,
    TokenizerArguments,
    check_objective,
    check_position_lengths,
    check_streaming_arguments,
    check_tokenizer_arguments,
    check_training_arguments,
    new_model_table,
    stop_grouping_by_length,
)
from hf_bahdanau.training.run_folder import (
    CheckpointManifest,
    check_output_dir,
    check_resume_steps,
    choose_work_dir,
    locked_output_dir,
    replace_folder,
    write_failure,
    write_run_files,
)
from hf_bahdanau.training.trainer import build_trainer
from hf_bahdanau.visualization import has_loss, plot_training_curves

logger = logging.getLogger(__name__)


def _data_settings(data_args: DataArguments) -> dict[str, Any]:
    """What `evaluate` needs to read the corpus as training did (and `translate`, the longest source it trained on)."""
    names = ("src_lang", "tgt_lang", "test_split", "d2l_normalize", "max_source_length")
    settings = {name: getattr(data_args, name) for name in names}
    return {"data": corpus_id(data_args.data), "data_path": named_corpus_path(data_args.data), **settings}


def _corpus_reading(data_args: DataArguments) -> dict[str, Any]:
    """How the run reads its corpus, as `load_parallel_corpus` and `stream_train_pairs` take it."""
    return dict(
        source=data_args.data,
        src_lang=data_args.src_lang,
        tgt_lang=data_args.tgt_lang,
        test_split=data_args.test_split,
        normalize=data_args.d2l_normalize,
    )


def prepare_data(
    data_args: DataArguments,
    tokenizer_args: TokenizerArguments,
    model_name_or_path: str | None,
    output_dir: Path,
    resume: bool,
    train_pairs: datasets.Dataset | None = None,
) -> tuple[datasets.DatasetDict, PreTrainedTokenizerBase]:
    """The corpus (its train split `train_pairs` where given; cut to the sample limits) and the run's tokenizer. With
    --streaming, the corpus's "train" is the start of the train stream, which a new tokenizer trains on (the first
    --tokenizer_train_samples pairs)."""
    splits = ("validation",) if data_args.streaming else None
    corpus = load_parallel_corpus(**_corpus_reading(data_args), splits=splits)
    if train_pairs is not None:
        corpus["train"] = train_pairs
    if data_args.streaming:
        stream = stream_train_pairs(**_corpus_reading(data_args))
        head = stream.take(tokenizer_args.tokenizer_train_samples or DEFAULT_TRAIN_SAMPLES)
        corpus["train"] = (text for row in head for text in (row["src"], row["tgt"]))
    if "validation" not in corpus:
        raise InputError(f"{data_args.data} has no validation split to evaluate on")
    for split, limit in (("train", data_args.max_train_samples), ("validation", data_args.max_eval_samples)):
        if limit is not None and isinstance(corpus[split], datasets.Dataset):
            corpus[split] = corpus[split].select(range(min(limit, len(corpus[split]))))
    logger.info(
        "corpus: %s", {split: len(rows) for split, rows in corpus.items() if isinstance(rows, datasets.Dataset)}
    )
    return corpus, load_or_train_tokenizer(tokenizer_args, model_name_or_path, corpus, output_dir, resume)


def check_reached_end(trainer: Seq2SeqTrainer, work_dir: Path) -> None:
    """Fail, before anything is saved, when training stopped short of its last step other than by early stopping
    (the Trainer ends a run whose data ran out with a warning only)."""
    state = trainer.state
    stopped_early = any(
        isinstance(callback, EarlyStoppingCallback)
        and callback.early_stopping_patience_counter >= callback.early_stopping_patience
        for callback in trainer.callback_handler.callbacks
    )
    if state.global_step < state.max_steps and not stopped_early:
        raise InputError(
            f"training stopped at step {state.global_step} of {state.max_steps}: its train data ran out; nothing was "
            f"saved (the checkpoints in {work_dir} are kept)"
        )


def save_run(
    trainer: Seq2SeqTrainer,
    tokenizer: PreTrainedTokenizerBase,
    output_dir: Path,
    push: upload.HubPush | None = None,
    command: Sequence[str] | None = None,
) -> None:
    """Save the final model with its tokenizer, pipeline code, trainer state and training curves in the run's folder,
    put it in the place of the run it replaces, record the `hf-bahdanau` arguments `command`, and publish the folder
    when asked (main process)."""
    # Seq2SeqTrainer's evaluation writes its legacy defaults (max_length=20) into the generation config; keep only
    # our length limit, so that generate does not warn about both on every call with the saved model.
    if trainer.model.generation_config.max_new_tokens is not None:
        trainer.model.generation_config.max_length = None
    if trainer.is_world_process_zero():
        work_dir = Path(trainer.args.output_dir)
        try:
            save_for_pipeline(trainer.model, tokenizer, work_dir)
            trainer.save_state()
            if has_loss(trainer.state.log_history):
                plot_training_curves(trainer.state.log_history, path=work_dir / "training_curves.png")
            else:
                logger.info("no loss was logged (--logging_steps above the steps run): no training_curves.png")
        except (OSError, SafetensorError) as error:
            kept = f"its checkpoints{'' if work_dir == output_dir else f' and the run in {output_dir}'} are intact"
            raise write_failure(work_dir, error, kept) from error
        if work_dir != output_dir:
            replace_folder(output_dir, work_dir)
        logger.info("saved the model, tokenizer and training curves in %s", output_dir)
        upload.finish_training(output_dir, push, command)  # records the command; publishes if asked


def release_process_group() -> None:
    """End the process group that a `torchrun` launch of the Trainer opened: left to the interpreter's exit, its
    threads can abort a finished process ("terminate called without an active exception", exit status -6)."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


def check_options(
    model_args: ModelArguments,
    tokenizer_args: TokenizerArguments,
    data_args: DataArguments,
    training_args: Seq2SeqTrainingArguments,
    run_args: RunArguments,
) -> None:
    """Check every option of a run before anything is read or written (a one-line error for the first wrong one)."""
    get_model_type(model_args.model_type)  # an unknown type fails before anything is read
    if model_args.model_name_or_path:  # a saved model of a type we have: no code from its folder runs
        saved = check_saved_model_type(model_args.model_name_or_path)
        model_args.config_overrides(saved.config_class)  # options of another model type fail before any reading
    elif not run_args.resume:  # (a resumed run's type is its checkpoint's: checked once that is found)
        model_args.config_overrides()
    if not data_args.data or not data_args.src_lang or not data_args.tgt_lang:
        raise InputError("training needs --data, --src-lang and --tgt-lang")
    if data_args.src_lang == data_args.tgt_lang:
        raise InputError(f"--src-lang and --tgt-lang are both {data_args.src_lang!r}: choose two languages")
    check_local_source(data_args.data)  # a mistyped corpus path fails before the output folder is locked
    check_training_arguments(training_args)
    check_objective(run_args, training_args)
    check_streaming_arguments(data_args, training_args)
    check_averaging(run_args.average_checkpoints, training_args)
    trains_tokenizer = not (run_args.resume or tokenizer_args.tokenizer_name_or_path or model_args.model_name_or_path)
    check_tokenizer_arguments(tokenizer_args, data_args, trains_tokenizer)
    if not run_args.resume and model_args.model_name_or_path is None:  # else known once the model is loaded
        check_position_lengths(new_model_table(model_args), data_args, training_args)


def train(
    model_args: ModelArguments,
    tokenizer_args: TokenizerArguments,
    data_args: DataArguments,
    training_args: Seq2SeqTrainingArguments,
    run_args: RunArguments,
    train_pairs: datasets.Dataset | None = None,
    command: Sequence[str] | None = None,
) -> Seq2SeqTrainer:
    """Run the whole training job: checks -> output folder (locked) -> corpus and tokenizer -> model -> trainer ->
    train -> save. `train_pairs` (translation format) replace the corpus's train split (`distill`'s teacher
    translations); its other splits stay. `command`: the `hf-bahdanau` arguments of the run (`train ...`), recorded
    for its card; None when `train` is called from Python.

    Every option is checked and the Trainer built before any folder is written; a run that replaces an old one
    (--overwrite) trains into a staging folder that takes the old one's place only when the new model is saved. With
    several processes (`accelerate launch`, `torchrun`) the main process checks the output folder and makes the
    tokenizer first; the others then load the corpus and read the tokenizer it saved (a shared file system).
    """
    check_options(model_args, tokenizer_args, data_args, training_args, run_args)
    given = Path(training_args.output_dir)
    # The folder itself, symlinks followed once here: the lock, the staging folder and the swap at the end act on
    # it, and a link to it keeps pointing at it (now the new run).
    output_dir = given.resolve()
    is_main = training_args.process_index == 0
    with locked_output_dir(given) if is_main else contextlib.nullcontext():
        arguments = (model_args, tokenizer_args, data_args, training_args, run_args)
        return _train_in(output_dir, arguments, train_pairs, command)


def _train_in(
    output_dir: Path,
    arguments: tuple[ModelArguments, TokenizerArguments, DataArguments, Seq2SeqTrainingArguments, RunArguments],
    train_pairs: datasets.Dataset | None = None,
    command: Sequence[str] | None = None,
) -> Seq2SeqTrainer:
    """`train` once the options are checked and (main process) the output folder is locked."""
    model_args, tokenizer_args, data_args, training_args, run_args = arguments
    push = upload.take_push_from_trainer(training_args)  # our card and file selection, not the Trainer's; the token
    is_main = training_args.process_index == 0

    with training_args.main_process_first(local=False, desc="output folder, corpus and tokenizer"):
        inputs = (model_args.model_name_or_path, tokenizer_args.tokenizer_name_or_path, data_args.data)
        checkpoint = None
        if is_main or run_args.resume:  # the others find what the main process found
            checkpoint = check_output_dir(output_dir, run_args.resume, run_args.overwrite, inputs)
        if checkpoint is not None:
            check_resume_steps(checkpoint, training_args.max_steps)
        work_dir = choose_work_dir(output_dir, checkpoint, is_main)
        corpus, tokenizer = prepare_data(
            data_args,
            tokenizer_args,
            model_args.model_name_or_path,
            work_dir,
            run_args.resume or not is_main,
            train_pairs,
        )
        set_seed(training_args.seed)  # the seed decides the initial weights too
        model = build_model(model_args, tokenizer, data_args.src_lang, data_args.tgt_lang, checkpoint)
        check_position_lengths(getattr(model.config, "max_position_embeddings", None), data_args, training_args)
        if data_args.streaming:
            corpus = datasets.DatasetDict({"validation": corpus["validation"]})
        tokenized, _ = tokenize_corpus(
            corpus,
            tokenizer,
            data_args.src_lang,
            data_args.tgt_lang,
            max_source_length=data_args.max_source_length,
            max_target_length=data_args.max_target_length,
            num_proc=data_args.num_proc,
        )
        if data_args.streaming:
            tokenized["train"] = _train_stream(data_args, training_args, tokenizer)
            stop_grouping_by_length(training_args)
        elif tokenizer_args.bpe_dropout:  # the train pairs re-encoded with dropout each read; the tokenizer as is
            lengths = (data_args.max_source_length, data_args.max_target_length)
            languages = (data_args.src_lang, data_args.tgt_lang)
            dropout = tokenizer_args.bpe_dropout
            encoder = BpeDropoutEncoder(tokenizer, dropout, *languages, *lengths)
            tokenized["train"] = bpe_dropout_view(tokenized["train"], corpus["train"], encoder)
        apply_generation_settings(model, training_args)
        training_args.output_dir = str(work_dir)
        trainer = build_trainer(model, tokenizer, tokenized, training_args, run_args)
        if data_args.streaming:
            _follow_stream(trainer, tokenized["train"], checkpoint, training_args.process_index)
        if is_main:
            write_run_files(work_dir, tokenizer, _data_settings(data_args), resuming=checkpoint is not None)
    logger.info("model: %s, %s parameters", model.config.model_type, f"{model.num_parameters():,}")
    if checkpoint is not None:
        logger.info("resuming from %s", checkpoint)
    if work_dir != output_dir and checkpoint is None:
        logger.info("training into %s; it replaces %s when the model is saved", work_dir, output_dir)
    interrupt = next(
        callback for callback in trainer.callback_handler.callbacks if isinstance(callback, InterruptToCheckpoint)
    )
    with interrupt.catching_sigint():
        trainer.train(resume_from_checkpoint=checkpoint)
    if interrupt.interrupted and trainer.state.global_step < trainer.state.max_steps:
        raise KeyboardInterrupt(
            f"interrupted at step {trainer.state.global_step}: checkpoint saved in {work_dir}; continue with --resume"
        )
    check_reached_end(trainer, work_dir)
    if run_args.average_checkpoints:
        average_last_checkpoints(trainer, run_args.average_checkpoints)
    save_run(trainer, tokenizer, output_dir, push, command)
    if is_main and run_args.quality_estimator:
        fit_quality_estimator(output_dir, corpus["validation"], data_args)
    return trainer


def fit_quality_estimator(output_dir: Path, validation: datasets.Dataset, data_args: DataArguments) -> None:
    """Fit the saved model's quality estimators on the validation pairs (`decoding.calibration`); where its
    translations give nothing to fit on (too few, every word alike), it gets none, with a warning."""
    from hf_bahdanau.decoding.calibration import FEWEST, calibrate
    from hf_bahdanau.decoding.translator import Translator

    if len(validation) < FEWEST:
        logger.warning("no quality estimator: %d validation pairs are too few (at least %d)", len(validation), FEWEST)
        return
    pairs = validation["translation"]
    sources = [pair[data_args.src_lang] for pair in pairs]
    references = [pair[data_args.tgt_lang] for pair in pairs]
    data = {"data": Path(str(data_args.data)).name, "split": "validation"}
    try:
        estimator = calibrate(Translator.from_folder(output_dir), output_dir, sources, references, data)
    except ValueError as error:
        logger.warning("no quality estimator: %s", error)
        return
    found = estimator.fitted["figures"]
    logger.info("quality estimator fitted on %d validation sentences: Pearson r %.3f (Bergamot's %.3f), word MCC "
                "%.3f (Bergamot's %.3f)", found["sentences"], found["pearson"], found["bergamot_pearson"],
                found["mcc"], found["bergamot_mcc"])  # fmt: skip


def _train_stream(
    data_args: DataArguments, training_args: Seq2SeqTrainingArguments, tokenizer: PreTrainedTokenizerBase
) -> LengthBucketedBatches:
    """This process's part of the train stream, tokenized on the fly and batched by length."""
    rank, world_size = training_args.process_index, training_args.world_size
    pairs = stream_train_pairs(**_corpus_reading(data_args), rank=rank, world_size=world_size)
    features = tokenized_stream(
        pairs,
        tokenizer,
        data_args.src_lang,
        data_args.tgt_lang,
        data_args.max_source_length,
        data_args.max_target_length,
    )
    seed = training_args.data_seed if training_args.data_seed is not None else training_args.seed
    batch_size, buffer_size = training_args.per_device_train_batch_size, data_args.bucket_buffer_size
    return LengthBucketedBatches(features, batch_size, buffer_size, seed, source=data_args.data)


def _follow_stream(trainer: Seq2SeqTrainer, batches: LengthBucketedBatches, checkpoint: str | None, rank: int) -> None:
    """Store the stream's position in every checkpoint (before its manifest) and continue it from `checkpoint`'s;
    the Trainer's own skipping of consumed batches is off (it would read them again)."""
    callbacks = trainer.callback_handler.callbacks
    manifest = next(i for i, callback in enumerate(callbacks) if isinstance(callback, CheckpointManifest))
    callbacks.insert(manifest, StreamStateCallback(batches, rank))
    trainer.args.ignore_data_skip = True
    if checkpoint is not None:
        resume_stream(batches, checkpoint, rank)
