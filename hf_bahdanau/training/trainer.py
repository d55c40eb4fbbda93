"""Training with `Seq2SeqTrainer`: tokenizer and model assembly, callbacks, the Trainer subclass, the run itself.

Its options live in `options`, its folder (lock, checkpoint manifests, staging, swap) in `run_folder`.

The flow: `load_parallel_corpus` -> `train_tokenizer` (or a saved one) -> `tokenize_corpus` -> a model of any
registered type made from `ModelArguments` (each option defaults to its config's default) -> `Seq2SeqTrainer` with
`DataCollatorForSeq2Seq`, sacreBLEU evaluation with generation, best-checkpoint keeping and early stopping ->
a `save_pretrained` folder with tokenizer, generation config, remote code and the translation pipeline.
Several GPUs need no change: run the same command under `accelerate launch`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import datasets
import pyarrow.compute as pc
import torch
from safetensors import SafetensorError
from transformers import (
    AutoModelForSeq2SeqLM,
    AutoTokenizer,
    DataCollatorForSeq2Seq,
    EarlyStoppingCallback,
    PreTrainedTokenizerBase,
    PrinterCallback,
    ProgressCallback,
    Seq2SeqTrainer,
    Seq2SeqTrainingArguments,
    TrainerCallback,
    TrainerControl,
    TrainerState,
    TrainingArguments,
    set_seed,
)
from transformers.trainer_pt_utils import LengthGroupedSampler
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from hf_bahdanau.data.cache import named_corpus_path
from hf_bahdanau.data.corpora import load_parallel_corpus
from hf_bahdanau.data.readers import check_local_source
from hf_bahdanau.data.run_settings import corpus_id
from hf_bahdanau.data.streaming import (
    LengthBucketedBatches,
    StreamStateCallback,
    resume_stream,
    stream_dataloader,
    stream_train_pairs,
    tokenized_stream,
)
from hf_bahdanau.data.tokenization import (
    DEFAULT_TRAIN_SAMPLES,
    BpeDropoutEncoder,
    bpe_dropout_view,
    check_tokenizer_location,
    train_tokenizer,
)
from hf_bahdanau.data.tokenized import tokenize_corpus
from hf_bahdanau.metrics import make_compute_metrics
from hf_bahdanau.models.modeling_translation import TranslationPreTrainedModel
from hf_bahdanau.models.pipelines import check_tokenizer_matches, save_for_pipeline, tokenizer_fingerprint
from hf_bahdanau.publishing import hub
from hf_bahdanau.registry import check_saved_model_type, get_model_type
from hf_bahdanau.training.averaging import average_last_checkpoints, check_averaging
from hf_bahdanau.training.options import (
    DataArguments,
    ModelArguments,
    RunArguments,
    TokenizerArguments,
    check_position_lengths,
    check_streaming_arguments,
    check_tokenizer_arguments,
    check_training_arguments,
    new_model_table,
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
from hf_bahdanau.visualization import plot_training_curves

logger = logging.getLogger(__name__)


class TrainingStartLogger(TrainerCallback):
    """Logs the step training starts from (non-zero when resuming)."""

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        logger.info("training starts at step %d of %d", state.global_step, state.max_steps)


class InterruptToCheckpoint(TrainerCallback):
    """Ctrl-C (SIGINT) while training: finish the step, save a checkpoint and stop; a second Ctrl-C stops at once."""

    def __init__(self) -> None:
        self.interrupted = False

    @contextlib.contextmanager
    def catching_sigint(self) -> Iterator[None]:
        def handler(signum: int, frame: Any) -> None:
            self.interrupted = True
            signal.signal(signal.SIGINT, signal.default_int_handler)

        previous = signal.signal(signal.SIGINT, handler)
        try:
            yield
        finally:
            signal.signal(signal.SIGINT, previous)

    def on_step_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any) -> None:
        if self.interrupted:
            control.should_save = control.should_training_stop = True


class LogEntryLogger(TrainerCallback):
    """Logs each Trainer log entry (loss, learning rate, evaluation scores) through `logging`, as numbers; replaces
    the Trainer's own printing, which shows them as strings."""

    def on_log(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        logs: dict[str, float] | None = None,
        **kwargs: Any,
    ) -> None:
        if state.is_world_process_zero and logs:
            shown = {name: float(f"{value:.4g}") if isinstance(value, float) else value for name, value in logs.items()}
            shown.pop("total_flos", None)
            logger.info("step %d: %s", state.global_step, json.dumps(shown))


class ProgressBar(ProgressCallback):
    """The Trainer's progress bar, without its string copy of the log entries (`LogEntryLogger` logs them)."""

    def on_log(self, *args: Any, **kwargs: Any) -> None:
        pass


def _data_settings(data_args: DataArguments) -> dict[str, Any]:
    """What `evaluate` needs to read the corpus as training did (and `translate`, the longest source it trained on)."""
    names = ("src_lang", "tgt_lang", "test_split", "d2l_normalize", "max_source_length")
    settings = {name: getattr(data_args, name) for name in names}
    return {"data": corpus_id(data_args.data), "data_path": named_corpus_path(data_args.data), **settings}


def load_or_train_tokenizer(
    tokenizer_args: TokenizerArguments,
    model_name_or_path: str | None,
    corpus: datasets.DatasetDict,
    output_dir: str | Path,
    resume: bool,
) -> PreTrainedTokenizerBase:
    """The run's tokenizer: the one saved in `output_dir` when resuming, the given one (or the saved model's), or a
    new one."""
    source = str(output_dir) if resume else tokenizer_args.tokenizer_name_or_path or model_name_or_path
    if source is not None:
        option = "--tokenizer_name_or_path" if tokenizer_args.tokenizer_name_or_path else "--model_name_or_path"
        check_tokenizer_location(source, "the run's folder" if resume else option)
        return AutoTokenizer.from_pretrained(source, trust_remote_code=False)  # never a folder's own code
    logger.info("training a %s tokenizer of %d tokens", tokenizer_args.tokenizer_type, tokenizer_args.vocab_size)
    return train_tokenizer(
        corpus["train"],
        tokenizer_args.vocab_size,
        model=tokenizer_args.tokenizer_type,
        min_freq=tokenizer_args.min_freq,
        max_samples=tokenizer_args.tokenizer_train_samples,
    )


def realign_weights(model: torch.nn.Module) -> None:
    """Move CPU parameters and buffers that do not start on a 64-byte boundary (where `from_pretrained` leaves them:
    safetensors data sits at the header's offset) into fresh memory, which is aligned. CPU math libraries round
    differently on misaligned operands, so without it a resumed run's gradients are 1 ulp away from those of the run
    it continues (with dropout, final weights ~1e-7 apart)."""
    with torch.no_grad():
        for tensor in (*model.parameters(), *model.buffers()):
            if tensor.device.type == "cpu" and tensor.data_ptr() % 64:
                tensor.data = tensor.data.clone()


def build_model(
    model_args: ModelArguments,
    tokenizer: PreTrainedTokenizerBase,
    src_lang: str,
    tgt_lang: str,
    label_smoothing: float = 0.0,
    checkpoint: str | None = None,
) -> TranslationPreTrainedModel:
    """A new model of `model_args.model_type` for `tokenizer`, or the saved one (a resumed `checkpoint` first),
    checked against the tokenizer.

    A saved model keeps its architecture: model options must match its config, but for its `run_options` (e.g. the
    RNN's teacher forcing ratio), which may change; the run's label smoothing applies to it."""
    saved = checkpoint or model_args.model_name_or_path
    if saved is not None:
        check_saved_model_type(saved)
        model = AutoModelForSeq2SeqLM.from_pretrained(saved, use_safetensors=True, trust_remote_code=False)
        realign_weights(model)  # a resumed run computes what the uninterrupted one did, to the bit
        overrides = model_args.config_overrides(type(model.config))
        fixed = sorted(
            name
            for name, value in overrides.items()
            if name not in model.config.run_options and getattr(model.config, name) != value
        )
        if fixed:
            kept = ", ".join(f"--{name} {getattr(model.config, name)}" for name in fixed)
            raise ValueError(f"a saved model keeps its architecture ({kept}); leave out or match these options")
        for name, value in {**overrides, "label_smoothing": label_smoothing}.items():
            setattr(model.config, name, value)
        model.config.check()
    else:
        config_class, model_class = get_model_type(model_args.model_type)
        config = config_class(
            **model_args.config_overrides(),
            vocab_size=len(tokenizer),
            label_smoothing=label_smoothing,
            source_language=src_lang,
            target_language=tgt_lang,
            pad_token_id=tokenizer.pad_token_id,
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id,
            decoder_start_token_id=tokenizer.bos_token_id,
        )
        model = model_class(config)
    check_tokenizer_matches(model.config, tokenizer)
    model.config.tokenizer_fingerprint = tokenizer_fingerprint(tokenizer)  # saved with it: see check_tokenizer_matches
    return model


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
        raise ValueError(f"{data_args.data} has no validation split to evaluate on")
    for split, limit in (("train", data_args.max_train_samples), ("validation", data_args.max_eval_samples)):
        if limit is not None and isinstance(corpus[split], datasets.Dataset):
            corpus[split] = corpus[split].select(range(min(limit, len(corpus[split]))))
    logger.info(
        "corpus: %s", {split: len(rows) for split, rows in corpus.items() if isinstance(rows, datasets.Dataset)}
    )
    return corpus, load_or_train_tokenizer(tokenizer_args, model_name_or_path, corpus, output_dir, resume)


def apply_generation_settings(model: TranslationPreTrainedModel, training_args: Seq2SeqTrainingArguments) -> None:
    """Move `--generation_num_beams` / `--generation_max_length` (new tokens) into the model's generation config,
    which evaluation and the saved model then use; without them, the model's defaults hold."""
    if training_args.generation_num_beams:
        model.generation_config.num_beams = training_args.generation_num_beams
    if training_args.generation_max_length:
        model.generation_config.max_new_tokens = training_args.generation_max_length
    training_args.generation_num_beams = training_args.generation_max_length = None


def arrow_lengths(dataset: datasets.Dataset, column: str) -> list[int]:
    """The length of each row's list in `column`, read from the Arrow offsets (no row decoded), in the dataset's row
    order (its indices mapping, after `select`/`shuffle`, applied)."""
    lengths = pc.list_value_length(dataset.data.column(column))
    if dataset._indices is not None:  # `datasets` keeps a selection as an indices table beside the data
        lengths = lengths.take(dataset._indices.column(0))
    return lengths.to_pylist()


class SeededLengthGroupedSampler(LengthGroupedSampler):
    """`LengthGroupedSampler` whose order of an epoch comes from `seed + epoch` alone (transformers' draws from the
    global generator), so that a resumed run sees the batches an uninterrupted run sees."""

    def __init__(self, batch_size: int, lengths: list[int], seed: int) -> None:
        super().__init__(batch_size, lengths=lengths)
        self.seed, self.epoch = seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[int]:
        self.generator = torch.Generator().manual_seed(self.seed + self.epoch)
        return super().__iter__()


class TranslationTrainer(Seq2SeqTrainer):
    """`Seq2SeqTrainer` with a seeded length-grouped sampler, whose evaluation keeps `max_new_tokens` the only length
    limit (it sets the legacy `max_length=20` after each batch, so that every later batch warns about both)."""

    def _save_checkpoint(self, model: torch.nn.Module, trial: Any) -> None:
        """The Trainer's; a checkpoint that cannot be written (a full disk) is removed, to free its space, and the
        error names it (torch reports a full disk as a RuntimeError of its zip writer)."""
        folder = Path(self._get_output_dir(trial=trial)) / f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
        try:
            super()._save_checkpoint(model, trial)
        except (OSError, RuntimeError, SafetensorError) as error:
            if isinstance(error, RuntimeError) and not re.search(r"inline_container|write", str(error)):
                raise  # not a failed write
            if self.args.should_save:
                shutil.rmtree(folder, ignore_errors=True)
            kept = "the earlier checkpoints, and any run it replaces, are intact"
            raise write_failure(folder, error, kept) from error

    def get_train_dataloader(self) -> torch.utils.data.DataLoader:
        """The Trainer's, or for a streamed corpus (`LengthBucketedBatches`, already this process's part of the
        stream) one bucketed batch an item, which accelerate must not split again."""
        if isinstance(self.train_dataset, LengthBucketedBatches):
            return stream_dataloader(self.train_dataset, self.data_collator)
        return super().get_train_dataloader()

    def _get_train_sampler(self, train_dataset: datasets.Dataset | None = None) -> torch.utils.data.Sampler | None:
        dataset = train_dataset if train_dataset is not None else self.train_dataset
        if (
            self.args.train_sampling_strategy == "group_by_length"
            and isinstance(dataset, datasets.Dataset)
            and "input_ids" in dataset.column_names
            and self.args.length_column_name not in dataset.column_names
        ):  # the lengths from Arrow's list offsets: the Trainer's way decodes every row (minutes for millions)
            batch_size = self.args.train_batch_size * self.args.gradient_accumulation_steps
            seed = self.args.data_seed if self.args.data_seed is not None else self.args.seed
            return SeededLengthGroupedSampler(batch_size, arrow_lengths(dataset, "input_ids"), seed)
        sampler = super()._get_train_sampler(train_dataset)
        if type(sampler) is LengthGroupedSampler:
            seed = self.args.data_seed if self.args.data_seed is not None else self.args.seed
            return SeededLengthGroupedSampler(sampler.batch_size, sampler.lengths, seed)
        return sampler

    def _remove_unused_columns(self, dataset: datasets.Dataset, description: str | None = None) -> datasets.Dataset:
        """The Trainer's, except for the BPE-dropout view, whose transform reads the text column the Trainer would
        remove and gives the model inputs only."""
        if isinstance(dataset.format["format_kwargs"].get("transform"), BpeDropoutEncoder):
            return dataset
        return super()._remove_unused_columns(dataset, description)

    def _issue_warnings_after_load(self, load_result: Any) -> None:
        """The Trainer's warnings after loading the best checkpoint, less the tied weights that a checkpoint stores
        once (as the embedding they share): `lm_head.weight` is not missing, it is loaded with the embedding."""
        tied = set(self.model._tied_weights_keys or ()) if self.model.config.tie_word_embeddings else set()
        missing = [key for key in load_result.missing_keys if key not in tied]
        super()._issue_warnings_after_load(load_result._replace(missing_keys=missing))

    def prediction_step(self, *args: Any, **kwargs: Any) -> tuple:
        try:
            return super().prediction_step(*args, **kwargs)
        finally:
            if self.model.generation_config.max_new_tokens is not None:
                self.model.generation_config.max_length = None


def build_trainer(
    model: TranslationPreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    tokenized: datasets.DatasetDict,
    training_args: Seq2SeqTrainingArguments,
    run_args: RunArguments,
) -> Seq2SeqTrainer:
    """A `Seq2SeqTrainer` with length-padded batches, sacreBLEU evaluation, early stopping on BLEU, checkpoints that
    show whether they are complete, and a checkpoint on Ctrl-C."""
    if getattr(model, "quantization", None) is not None:
        raise ValueError(
            f"the model was quantized to {model.quantization} for inference and cannot be trained: train the fp32 "
            "model and pass --quantize (or quantize=) when translating"
        )
    if training_args.ddp_find_unused_parameters is None:  # every parameter of both model types takes part
        training_args.ddp_find_unused_parameters = False
    callbacks: list[TrainerCallback] = [
        TrainingStartLogger(),
        LogEntryLogger(),
        CheckpointManifest(),
        InterruptToCheckpoint(),
    ]
    if run_args.early_stopping_patience > 0 and training_args.load_best_model_at_end:
        callbacks.append(EarlyStoppingCallback(early_stopping_patience=run_args.early_stopping_patience))
    trainer = TranslationTrainer(
        model=model,
        args=training_args,
        train_dataset=tokenized["train"],
        eval_dataset=tokenized["validation"],
        data_collator=DataCollatorForSeq2Seq(tokenizer, model=model, label_pad_token_id=-100),
        processing_class=tokenizer,
        compute_metrics=make_compute_metrics(tokenizer),
        callbacks=callbacks,
    )
    if trainer.pop_callback(PrinterCallback) is None and trainer.pop_callback(ProgressCallback) is not None:
        trainer.add_callback(ProgressBar)
    return trainer


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
        raise ValueError(
            f"training stopped at step {state.global_step} of {state.max_steps}: its train data ran out; nothing was "
            f"saved (the checkpoints in {work_dir} are kept)"
        )


def save_run(
    trainer: Seq2SeqTrainer, tokenizer: PreTrainedTokenizerBase, output_dir: Path, push: hub.HubPush | None = None
) -> None:
    """Save the final model with its tokenizer, pipeline code, trainer state and training curves in the run's folder,
    put it in the place of the run it replaces, record the command, and publish the folder when asked (main
    process)."""
    # Seq2SeqTrainer's evaluation writes its legacy defaults (max_length=20) into the generation config; keep only
    # our length limit, so that generate does not warn about both on every call with the saved model.
    if trainer.model.generation_config.max_new_tokens is not None:
        trainer.model.generation_config.max_length = None
    if trainer.is_world_process_zero():
        work_dir = Path(trainer.args.output_dir)
        try:
            save_for_pipeline(trainer.model, tokenizer, work_dir)
            trainer.save_state()
            plot_training_curves(trainer.state.log_history, path=work_dir / "training_curves.png")
        except (OSError, SafetensorError) as error:
            kept = f"its checkpoints{'' if work_dir == output_dir else f' and the run in {output_dir}'} are intact"
            raise write_failure(work_dir, error, kept) from error
        if work_dir != output_dir:
            replace_folder(output_dir, work_dir)
        logger.info("saved the model, tokenizer and training curves in %s", output_dir)
        hub.finish_training(output_dir, push)  # records the command; publishes if asked


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
        raise ValueError("training needs --data, --src-lang and --tgt-lang")
    if data_args.src_lang == data_args.tgt_lang:
        raise ValueError(f"--src-lang and --tgt-lang are both {data_args.src_lang!r}: choose two languages")
    check_local_source(data_args.data)  # a mistyped corpus path fails before the output folder is locked
    check_training_arguments(training_args)
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
) -> Seq2SeqTrainer:
    """Run the whole training job: checks -> output folder (locked) -> corpus and tokenizer -> model -> trainer ->
    train -> save. `train_pairs` (translation format) replace the corpus's train split (`distill`'s teacher
    translations); its other splits stay.

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
        return _train_in(output_dir, (model_args, tokenizer_args, data_args, training_args, run_args), train_pairs)


def _train_in(
    output_dir: Path,
    arguments: tuple[ModelArguments, TokenizerArguments, DataArguments, Seq2SeqTrainingArguments, RunArguments],
    train_pairs: datasets.Dataset | None = None,
) -> Seq2SeqTrainer:
    """`train` once the options are checked and (main process) the output folder is locked."""
    model_args, tokenizer_args, data_args, training_args, run_args = arguments
    # The model computes label smoothing itself (so it also honours num_items_in_batch).
    label_smoothing, training_args.label_smoothing_factor = training_args.label_smoothing_factor, 0.0
    push = hub.take_push_from_trainer(training_args)  # our card and file selection, not the Trainer's; the token
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
        model = build_model(model_args, tokenizer, data_args.src_lang, data_args.tgt_lang, label_smoothing, checkpoint)
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
    save_run(trainer, tokenizer, output_dir, push)
    return trainer


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


__all__ = [
    "build_model",
    "check_options",
    "check_tokenizer_matches",
    "train",
]
