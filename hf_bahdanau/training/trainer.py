"""`TranslationTrainer`, the run's `Seq2SeqTrainer` on its public API: a seeded length-grouped sampler, streamed
batches, checkpoints that name a failed write; and `build_trainer`, which makes it with the run's collator, metrics
and callbacks."""

from __future__ import annotations

import logging
import re
import shutil
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import datasets
import pyarrow.compute as pc
import torch
from safetensors import SafetensorError
from torch.utils.data import DataLoader
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
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, seed_worker

from hf_bahdanau.data.streaming import LengthBucketedBatches, stream_dataloader
from hf_bahdanau.errors import InputError
from hf_bahdanau.metrics import make_compute_metrics
from hf_bahdanau.models.pretrained_model import TranslationPreTrainedModel
from hf_bahdanau.training.callbacks import InterruptToCheckpoint, LogEntryLogger, ProgressBar, TrainingStartLogger
from hf_bahdanau.training.objective import TrainingObjective, scheduled_sampling_outputs
from hf_bahdanau.training.options import RunArguments, groups_by_length
from hf_bahdanau.training.run_folder import CheckpointManifest, is_complete_checkpoint, write_failure

logger = logging.getLogger(__name__)


def arrow_lengths(dataset: datasets.Dataset, column: str) -> list[int]:
    """The length of each row's list in `column`, read from Arrow (no row decoded into Python), in the dataset's row
    order (after `select`/`shuffle`)."""
    return pc.list_value_length(dataset.with_format("arrow")[column]).to_pylist()


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


def is_write_failure(error: Exception) -> bool:
    """Whether `error` is a file that could not be written: an OSError, safetensors' error, or torch's zip writer's
    RuntimeError (how torch reports a full disk)."""
    return not isinstance(error, RuntimeError) or bool(re.search(r"inline_container|write", str(error)))


class TranslationTrainer(Seq2SeqTrainer):
    """`Seq2SeqTrainer` with a seeded length-grouped sampler (the lengths read from Arrow), streamed batches, a
    checkpoint whose write failed removed and named, and an evaluation that keeps `max_new_tokens` the only length
    limit (it sets the legacy `max_length=20` after each batch, so that every later batch warns about both).

    Its datasets hold the model's inputs only (or, for BPE-dropout, a view whose transform gives them): build it
    with `remove_unused_columns=False`, as `build_trainer` does."""

    def train(self, *args: Any, **kwargs: Any) -> Any:
        """The Trainer's; a checkpoint that cannot be written (a full disk) is removed, to free its space, and the
        error names it."""
        try:
            return super().train(*args, **kwargs)
        except (OSError, RuntimeError, SafetensorError) as error:
            folder = Path(self.args.output_dir) / f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
            if not is_write_failure(error) or not folder.is_dir() or is_complete_checkpoint(folder):
                raise  # not a checkpoint cut off while being written
            if self.args.should_save:
                shutil.rmtree(folder, ignore_errors=True)
            kept = "the earlier checkpoints, and any run it replaces, are intact"
            raise write_failure(folder, error, kept) from error

    def get_train_dataloader(self) -> DataLoader:
        """The Trainer's, but for a corpus grouped by length (`SeededLengthGroupedSampler`, lengths from Arrow: the
        Trainer's way decodes every row, minutes for millions) and a streamed corpus (`LengthBucketedBatches`,
        already this process's part of the stream: one bucketed batch an item, which accelerate must not split
        again)."""
        dataset, args = self.train_dataset, self.args
        if isinstance(dataset, LengthBucketedBatches):
            return stream_dataloader(dataset, self.data_collator)
        if not (
            groups_by_length(args) and isinstance(dataset, datasets.Dataset) and "input_ids" in dataset.column_names
        ):
            return super().get_train_dataloader()
        seed = args.data_seed if args.data_seed is not None else args.seed
        sampler = SeededLengthGroupedSampler(
            args.train_batch_size * args.gradient_accumulation_steps, arrow_lengths(dataset, "input_ids"), seed
        )
        workers = args.dataloader_num_workers
        loader = DataLoader(
            dataset,
            batch_size=args.train_batch_size,
            sampler=sampler,
            collate_fn=self.data_collator,
            drop_last=args.dataloader_drop_last,
            num_workers=workers,
            pin_memory=args.dataloader_pin_memory,
            persistent_workers=args.dataloader_persistent_workers,
            prefetch_factor=args.dataloader_prefetch_factor if workers else None,
            worker_init_fn=partial(seed_worker, num_workers=workers, rank=args.process_index),
        )
        return self.accelerator.prepare(loader)

    def compute_loss(
        self,
        model: torch.nn.Module,
        inputs: dict[str, Any],
        return_outputs: bool = False,
        num_items_in_batch: torch.Tensor | int | None = None,
    ) -> torch.Tensor | tuple[torch.Tensor, Any]:
        """The Trainer's (its `compute_loss_func` a `TrainingObjective`), or in training with a teacher-forcing
        ratio below 1 the objective of `scheduled_sampling_outputs` (one process: `check_objective`)."""
        objective = self.compute_loss_func
        if not (model.training and isinstance(objective, TrainingObjective) and objective.teacher_forcing_ratio < 1):
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        inputs = dict(inputs)
        labels = inputs.pop("labels")
        outputs = scheduled_sampling_outputs(model, inputs, objective.teacher_forcing_ratio)
        loss = objective(outputs, labels, num_items_in_batch)
        return (loss, outputs) if return_outputs else loss

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
    """A `Seq2SeqTrainer` with length-padded batches, the run's objective (`--label_smoothing_factor`,
    `--unlikelihood`, `--teacher_forcing_ratio`), sacreBLEU evaluation, early stopping on BLEU, checkpoints that show
    whether they are complete, and a checkpoint on Ctrl-C."""
    if getattr(model, "quantization", None) is not None:
        raise InputError(
            f"the model was quantized to {model.quantization} for inference and cannot be trained: train the fp32 "
            "model and pass --quantize (or quantize=) when translating"
        )
    if training_args.ddp_find_unused_parameters is None:  # every parameter of both model types takes part
        training_args.ddp_find_unused_parameters = False
    training_args.remove_unused_columns = False  # the datasets hold model inputs only (BPE-dropout: its text too)
    objective = TrainingObjective(
        training_args.label_smoothing_factor, run_args.unlikelihood, run_args.teacher_forcing_ratio
    )
    callbacks: list[TrainerCallback] = [
        objective,  # recorded in trainer_state.json
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
        compute_loss_func=objective,
    )
    if trainer.pop_callback(PrinterCallback) is None and trainer.pop_callback(ProgressCallback) is not None:
        trainer.add_callback(ProgressBar)
    return trainer
