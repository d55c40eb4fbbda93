"""Checkpoint averaging (fairseq's `scripts/average_checkpoints.py`): the element-wise mean of the weights of the last
N checkpoints, which `train --average_checkpoints N` makes the final model.

Floating-point tensors are averaged in float64 and cast back to their dtype; integer tensors (counters such as
BatchNorm's `num_batches_tracked`) get fairseq's floor of the mean; boolean ones must agree. Weights that share memory
(tied embeddings) in the first state dict share it in the result.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import torch
from safetensors.torch import load_file
from transformers import Trainer, TrainingArguments

from hf_bahdanau.errors import InputError, InputNotFoundError
from hf_bahdanau.models.pretrained_model import TranslationPreTrainedModel
from hf_bahdanau.training.run_folder import is_complete_checkpoint, numbered_checkpoints

logger = logging.getLogger(__name__)

_WEIGHTS = "model.safetensors"
_WEIGHTS_INDEX = "model.safetensors.index.json"


def read_weights(path: str | Path) -> dict[str, torch.Tensor]:
    """The tensors of a safetensors file, or of a checkpoint or model folder (`model.safetensors`, or the shards its
    index names)."""
    path = Path(path)
    if path.is_file():
        return load_file(path)
    if (path / _WEIGHTS).is_file():
        return load_file(path / _WEIGHTS)
    if (path / _WEIGHTS_INDEX).is_file():
        shards = json.loads((path / _WEIGHTS_INDEX).read_text(encoding="utf-8"))["weight_map"].values()
        return {name: tensor for shard in sorted(set(shards)) for name, tensor in load_file(path / shard).items()}
    raise InputNotFoundError(f"{path} holds no safetensors weights ({_WEIGHTS} or {_WEIGHTS_INDEX})")


def average_state_dicts(state_dicts: Sequence[Mapping[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """The element-wise mean of `state_dicts`, which must have the same names, shapes and dtypes."""
    if not state_dicts:
        raise InputError("nothing to average: no state dicts given")
    first = state_dicts[0]
    for index, other in enumerate(state_dicts[1:], start=1):
        if set(other) != set(first):
            differ = sorted(set(other) ^ set(first))
            raise InputError(f"state dict {index} has other weights than the first: {', '.join(differ[:5])}")
        for name, tensor in first.items():
            if other[name].shape != tensor.shape or other[name].dtype != tensor.dtype:
                raise InputError(
                    f"weight {name} differs in state dict {index}: {tuple(other[name].shape)} {other[name].dtype} "
                    f"against {tuple(tensor.shape)} {tensor.dtype}"
                )
    averaged: dict[str, torch.Tensor] = {}
    done: dict[tuple[int, int, tuple[int, ...]], torch.Tensor] = {}  # tied weights of the first: averaged once
    for name, tensor in first.items():
        key = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape))
        if key in done:
            averaged[name] = done[key]
            continue
        tensors = [state_dict[name].detach().cpu() for state_dict in state_dicts]
        if tensor.is_floating_point() or tensor.is_complex():
            kind = torch.complex128 if tensor.is_complex() else torch.float64
            mean = torch.stack([t.to(kind) for t in tensors]).mean(dim=0).to(tensor.dtype)
        elif tensor.dtype == torch.bool:
            if any(not torch.equal(t, tensors[0]) for t in tensors[1:]):
                raise InputError(f"boolean weight {name} differs between the state dicts: it cannot be averaged")
            mean = tensors[0].clone()
        else:  # fairseq: integer tensors get the floor of the mean
            mean = torch.div(torch.stack([t.to(torch.int64) for t in tensors]).sum(dim=0), len(tensors),
                             rounding_mode="floor").to(tensor.dtype)  # fmt: skip
        averaged[name] = done[key] = mean
    return averaged


def rename_unprefixed_keys(model: TranslationPreTrainedModel, state_dict: dict[str, torch.Tensor]) -> None:
    """Rename in place the keys of a head model's state dict saved before the base-model split (`encoder.*`,
    `decoder.*`) to today's (`model.encoder.*`, ...); `from_pretrained` adds the prefix itself."""
    base = getattr(model, model.base_model_prefix, None)
    if base is None or base is model:  # a base model: its keys never had a prefix
        return
    for key in [key for key in state_dict if key.split(".", 1)[0] in ("encoder", "decoder")]:
        state_dict[f"{model.base_model_prefix}.{key}"] = state_dict.pop(key)


def average_checkpoints(
    paths: Sequence[str | Path], model: TranslationPreTrainedModel | None = None
) -> dict[str, torch.Tensor]:
    """The mean of the model weights in `paths` (checkpoint or model folders, or safetensors files), as fairseq's
    `average_checkpoints`: load it with `model.load_state_dict(averaged, strict=False)` (tied weights, stored once,
    are not in the files) or `AutoModelForSeq2SeqLM.from_pretrained(folder, state_dict=averaged)`. With `model`
    (a model with a head), keys saved before the base-model split (`encoder.*`) are first renamed to its
    (`model.encoder.*`), so the old and new checkpoints of one run average together."""
    if not paths:
        raise InputError("nothing to average: no checkpoints given")
    state_dicts = [read_weights(path) for path in paths]
    if model is not None:
        for state_dict in state_dicts:
            rename_unprefixed_keys(model, state_dict)
    return average_state_dicts(state_dicts)


def last_checkpoints(output_dir: str | Path, count: int) -> list[Path]:
    """The `count` complete checkpoints of `output_dir` (as `--resume` judges them) with the highest steps, oldest
    first."""
    return [folder for folder in numbered_checkpoints(Path(output_dir)) if is_complete_checkpoint(folder)][-count:]


def planned_checkpoints(training_args: TrainingArguments) -> int | None:
    """How many checkpoints a new run of `--max_steps` saves every `--save_steps` (the last step saved too), or None
    where that is not known before training (epochs, a save ratio)."""
    steps, every = training_args.max_steps, training_args.save_steps
    if training_args.save_strategy != "steps" or steps <= 0 or every < 1:
        return None
    return math.ceil(steps / int(every))


def check_averaging(count: int, training_args: TrainingArguments) -> None:
    """Check `train --average_checkpoints N` before any work, and keep enough checkpoints for it: `--save_total_limit`
    is raised to N (N + 1 with --load_best_model_at_end, whose best checkpoint is kept besides the last ones)."""
    if count < 0:
        raise InputError(f"--average_checkpoints must be 0 (off) or a number of checkpoints, got {count}")
    if count == 0:
        return
    if training_args.save_strategy == "no":
        raise InputError(f"--average_checkpoints {count} needs checkpoints: --save_strategy is 'no'")
    saves = planned_checkpoints(training_args)
    if saves is not None and saves < count:
        raise InputError(
            f"--average_checkpoints {count}: the run saves only {saves} checkpoint(s); save more often (--save_steps) "
            "or average fewer"
        )
    needed = count + int(bool(training_args.load_best_model_at_end))
    limit = training_args.save_total_limit
    if limit is not None and 0 < limit < needed:
        logger.info(
            "--average_checkpoints %d: keeping %d checkpoints (--save_total_limit was %d)", count, needed, limit
        )
        training_args.save_total_limit = needed


def average_last_checkpoints(trainer: Trainer, count: int) -> list[Path]:
    """Load the mean of the last `count` checkpoints of the trainer's output folder into its model (which `train`
    then saves as the final model); returns the checkpoints averaged. Fewer than `count` is an InputError."""
    checkpoints = last_checkpoints(trainer.args.output_dir, count)
    if len(checkpoints) < count:
        raise InputError(
            f"--average_checkpoints {count}: only {len(checkpoints)} checkpoint(s) in {trainer.args.output_dir}; save "
            f"more often (--save_steps) or average fewer"
        )
    model = trainer.model
    averaged = average_checkpoints(checkpoints, model)
    result = model.load_state_dict(averaged, strict=False)
    tensors = model.state_dict(keep_vars=True)
    loaded = {id(tensors[name]) for name in averaged if name in tensors}
    missing = sorted(name for name in result.missing_keys if id(tensors[name]) not in loaded)  # tied: stored once
    if missing or result.unexpected_keys:
        raise InputError(
            f"the averaged checkpoints do not fit the model: missing {missing}, unexpected {result.unexpected_keys}"
        )
    model.tie_weights()
    logger.info("averaged the weights of %s", ", ".join(folder.name for folder in checkpoints))
    return checkpoints


__all__ = [
    "average_checkpoints",
    "average_last_checkpoints",
    "average_state_dicts",
    "check_averaging",
    "last_checkpoints",
    "read_weights",
]
