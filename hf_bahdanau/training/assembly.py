"""The run's tokenizer (saved, given or newly trained) and its model (new of a registered type, or saved), with the
generation settings of its evaluation."""

from __future__ import annotations

import logging
from pathlib import Path

import datasets
import torch
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, PreTrainedTokenizerBase, Seq2SeqTrainingArguments

from hf_bahdanau.data.tokenization import check_tokenizer_location, train_tokenizer
from hf_bahdanau.errors import InputError, as_input_error
from hf_bahdanau.models.pipelines import check_tokenizer_matches, tokenizer_fingerprint
from hf_bahdanau.models.pretrained_model import TranslationPreTrainedModel
from hf_bahdanau.registry import check_saved_model_type, get_model_type
from hf_bahdanau.training.options import ModelArguments, TokenizerArguments

logger = logging.getLogger(__name__)


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
        with as_input_error(ValueError, OSError):  # what transformers refuses in the folder
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
    checkpoint: str | None = None,
) -> TranslationPreTrainedModel:
    """A new model of `model_args.model_type` for `tokenizer`, or the saved one (a resumed `checkpoint` first),
    checked against the tokenizer. A saved model keeps its architecture: model options must match its config."""
    # What transformers and the model's code refuse (a folder's weights, a config value of the options) is input.
    with as_input_error(ValueError, OSError):
        saved = checkpoint or model_args.model_name_or_path
        if saved is not None:
            check_saved_model_type(saved)
            model = AutoModelForSeq2SeqLM.from_pretrained(saved, use_safetensors=True, trust_remote_code=False)
            realign_weights(model)  # a resumed run computes what the uninterrupted one did, to the bit
            overrides = model_args.config_overrides(type(model.config))
            fixed = sorted(name for name, value in overrides.items() if getattr(model.config, name) != value)
            if fixed:
                kept = ", ".join(f"--{name} {getattr(model.config, name)}" for name in fixed)
                raise InputError(f"a saved model keeps its architecture ({kept}); leave out or match these options")
        else:
            config_class, model_class = get_model_type(model_args.model_type)
            config = config_class(
                **model_args.config_overrides(),
                vocab_size=len(tokenizer),
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


def apply_generation_settings(model: TranslationPreTrainedModel, training_args: Seq2SeqTrainingArguments) -> None:
    """Move `--generation_num_beams` / `--generation_max_length` (new tokens) into the model's generation config,
    which evaluation and the saved model then use; without them, the model's defaults hold."""
    if training_args.generation_num_beams:
        model.generation_config.num_beams = training_args.generation_num_beams
    if training_args.generation_max_length:
        model.generation_config.max_new_tokens = training_args.generation_max_length
    training_args.generation_num_beams = training_args.generation_max_length = None
