"""`TranslationTrainer`, the run's `Seq2SeqTrainer`: a seeded length-grouped sampler, streamed batches, checkpoints
that name a failed write; and `build_trainer`, which makes it with the run's collator, metrics and callbacks."""

from __future__ import annotations

import logging
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import datasets
import pyarrow.compute as pc
import torch
from safetensors import SafetensorError
from transformers import (
    DataCollatorForSeq2Seq,
    EarlyStoppingCallback,
    PreTrainedTokenizerBase,
    PrinterCallback,
    ProgressCallback,
    Seq2SeqTrainer,
    Seq2SeqTrainingArguments,
    TrainerCallback,
)
from transformers.trainer_pt_utils import LengthGroupedSampler
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from hf_bahdanau.data.streaming import LengthBucketedBatches, stream_dataloader
from hf_bahdanau.data.tokenization import BpeDropoutEncoder
from hf_bahdanau.errors import InputError
from hf_bahdanau.metrics import make_compute_metrics
from hf_bahdanau.models.pretrained_model import TranslationPreTrainedModel
from hf_bahdanau.training.callbacks import InterruptToCheckpoint, LogEntryLogger, ProgressBar, TrainingStartLogger
from hf_bahdanau.training.options import RunArguments
from hf_bahdanau.training.run_folder import CheckpointManifest, write_failure

logger = logging.getLogger(__name__)


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
        raise InputError(
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
