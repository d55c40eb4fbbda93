"""`TranslationPreTrainedModel`, the base of every translation model class (with or without a head): loading with
clear errors, saving, tied embeddings, resizing, the generation defaults of a new model.

`from_pretrained` turns a checkpoint that does not fit its config (or is corrupt) into a ValueError naming the
problem, and quantizes on request (`quantize="int8"`, from the hf_bahdanau package). A checkpoint with flat keys
(`encoder.*`, `decoder.*`, `lm_head.*`) also loads: transformers' loading adds the `base_model_prefix` ("model.") to a
checkpoint key that exists only under it, and a state dict loaded with `load_state_dict` (e.g. the Trainer's resume)
is renamed by `rename_unprefixed_keys`. Copied into saved model folders (`trust_remote_code`): torch, safetensors
and transformers only.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from typing import Any

import torch
from safetensors import SafetensorError
from torch import nn
from transformers import PreTrainedModel
from transformers.utils import logging as transformers_logging

from .configuration_translation import TranslationConfig

# The one place for a new model's generation settings (saved in its generation_config.json, overridable per call).
GENERATION_DEFAULTS = {"num_beams": 5, "max_new_tokens": 128}


def check_loaded_weights(
    path: str | os.PathLike, loading_info: dict[str, Any], model: nn.Module, strict: bool | None
) -> None:
    """Raise a one-line ValueError for weights that do not fit: with `strict=True`, any missing or unexpected weight;
    with `strict=None`, a checkpoint that shares (almost) nothing with the model, i.e. has weights the model lacks
    and fills less than half of the model's (another model type or architecture); `strict=False` never."""
    missing, unexpected = loading_info.get("missing_keys") or (), loading_info.get("unexpected_keys") or ()
    if strict is False or not (missing or unexpected):
        return
    if strict is None and not (unexpected and len(missing) > len(model.state_dict()) / 2):
        return
    problems = []
    for kind in ("missing", "unexpected"):
        keys = sorted(loading_info.get(f"{kind}_keys") or ())
        if keys:
            shown = ", ".join(keys[:3]) + (", ..." if len(keys) > 3 else "")
            problems.append(f"{len(keys)} {kind} ({shown})")
    if problems:
        raise ValueError(
            f"the weights in {path} do not fit the model its config describes: {'; '.join(problems)} (a config of "
            "another model type or another architecture?); pass strict=False to load it anyway, newly initialised"
        )


def quantizer(quantize: str) -> Callable[[nn.Module], nn.Module]:
    """The function that quantizes a loaded model in place (e.g. `quantize="int8"`), from the `hf_bahdanau`
    package's `quantization` module: int8 is a feature of the package, not part of a saved folder's code."""
    name = "hf_bahdanau.decoding.quantization"
    try:
        return importlib.import_module(name).quantizer(quantize)
    except ModuleNotFoundError as error:  # the package is missing (a remote-code folder alone); else a real error
        if not error.name or not (name == error.name or name.startswith(error.name + ".")):
            raise
    raise ValueError(
        f"quantize={quantize!r} needs the hf_bahdanau package (its quantization module is not part of a saved "
        "folder's code): install it, or load the model without quantize="
    )


def resized_embedding(
    old: nn.Embedding, num_tokens: int, mean_resizing: bool, initialise: Callable[[nn.Module], None]
) -> nn.Embedding:
    """`old` with `num_tokens` rows, its first ones kept; the rows it gains are the mean of its rows (`mean_resizing`,
    as transformers starts the decoder's), else `initialise`d as the model's embeddings are."""
    new = nn.Embedding(num_tokens, old.embedding_dim, old.padding_idx, device=old.weight.device, dtype=old.weight.dtype)
    kept = min(num_tokens, old.num_embeddings)
    with torch.no_grad():
        if mean_resizing:
            new.weight[kept:] = old.weight.mean(dim=0)
        else:
            initialise(new)
        new.weight[:kept] = old.weight[:kept]
    return new


class TranslationPreTrainedModel(PreTrainedModel):
    """Base of the translation models (encoder-decoder over one joint vocabulary, with or without `lm_head`)."""

    config: TranslationConfig
    config_class = TranslationConfig
    base_model_prefix = "model"
    main_input_name = "input_ids"
    supports_gradient_checkpointing = False
    quantization: str | None = None  # "int8" after `hf_bahdanau.decoding.quantization.quantize_for_cpu`

    def post_init(self) -> None:
        """Declare the tied weights, initialise, and give a new generating model the translation generation defaults."""
        self._tied_weights_keys = self._tied_embeddings()
        super().post_init()
        if not self.can_generate():
            return
        defaults = dict(GENERATION_DEFAULTS)
        table = getattr(self.config, "max_position_embeddings", None)
        if table is not None:  # a Transformer's translations are no longer than its position table
            defaults["max_new_tokens"] = min(defaults["max_new_tokens"], table)
        self.generation_config.update(**defaults)

    def _tied_embeddings(self) -> dict[str, str]:
        """`_tied_weights_keys` of the encoder-decoder: `{tied weight: the decoder embedding it shares}` (transformers
        ties them only when `config.tie_word_embeddings`)."""
        if self.config.tie_encoder_decoder_embeddings:
            return {"encoder.embed_tokens.weight": "decoder.embed_tokens.weight"}
        return {}

    def tie_weights(self, *args: Any, **kwargs: Any) -> None:
        """transformers' tying, then the tied embeddings (and `lm_head`) made one parameter by hand, the one that holds
        loaded weights: releases differ in how they tie a nested base model's embeddings (some leave one of them
        on the meta device)."""
        super().tie_weights(*args, **kwargs)
        if not self.config.tie_word_embeddings:
            return
        base = getattr(self, self.base_model_prefix, self)
        tied = [base.decoder.embed_tokens, getattr(self, "lm_head", None)]
        if self.config.tie_encoder_decoder_embeddings:
            tied.append(base.encoder.embed_tokens)
        tied = [module for module in tied if module is not None]
        loaded = next((module.weight for module in tied if not module.weight.is_meta), None)
        for module in tied if loaded is not None else ():
            module.weight = loaded

    def _load_from_state_dict(self, state_dict: dict[str, Any], prefix: str, *args: Any, **kwargs: Any) -> None:
        """`nn.Module`'s, after `rename_unprefixed_keys` (a state dict saved before the base-model split)."""
        rename_unprefixed_keys(self, state_dict, prefix)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    @classmethod
    def from_pretrained(
        cls, pretrained_model_name_or_path: str | os.PathLike, *args: Any, **kwargs: Any
    ) -> TranslationPreTrainedModel:
        """`PreTrainedModel.from_pretrained`, with a ValueError naming the problem for a checkpoint that does
        not fit its config (e.g. another vocabulary size) or that is corrupt, and without a "Loading weights"
        progress bar (loading these small models is no long work).

        `quantize="int8"` returns the model ready for CPU inference with int8 linear and recurrent layers
        (`hf_bahdanau.decoding.quantization.quantize_for_cpu`; needs the hf_bahdanau package, also for a remote-code
        folder).

        As transformers' models, a checkpoint that lacks some of the model's weights (e.g. a base model's, loaded with
        a head) loads what matches, initialises the rest and warns (transformers' load report lists them;
        `output_loading_info=True` returns them too); a checkpoint that shares (almost) nothing with the model (e.g.
        a folder whose config names another model type) is a ValueError naming the weights: such a model would
        translate garbage. `strict=True` (the command line's translating commands) refuses any missing or unexpected
        weight, `strict=False` none. Tied weights are not missing.
        """
        strict = kwargs.pop("strict", None)
        output_loading_info = kwargs.pop("output_loading_info", False)
        quantize = kwargs.pop("quantize", None)
        quantize_model = None if quantize is None else quantizer(quantize)  # checks the name before loading
        was_enabled = transformers_logging.is_progress_bar_enabled()
        transformers_logging.disable_progress_bar()
        try:
            model, loading_info = super().from_pretrained(
                pretrained_model_name_or_path, *args, output_loading_info=True, **kwargs
            )
        except SafetensorError as error:
            raise ValueError(
                f"the checkpoint in {pretrained_model_name_or_path} is corrupt or truncated ({error})"
            ) from error
        except RuntimeError as error:
            if "mismatched_sizes" not in str(error):
                raise
            raise ValueError(
                f"the checkpoint in {pretrained_model_name_or_path} does not match the config: its weight shapes "
                "differ (the load report above lists them; usually vocab_size or a hidden size). Load it with its "
                "own config, or pass ignore_mismatched_sizes=True to re-initialise the mismatched weights."
            ) from error
        finally:
            if was_enabled:
                transformers_logging.enable_progress_bar()
        check_loaded_weights(pretrained_model_name_or_path, loading_info, model, strict)
        model = model if quantize_model is None else quantize_model(model)
        return (model, loading_info) if output_loading_info else model

    def save_pretrained(self, save_directory: str | os.PathLike, *args: Any, **kwargs: Any) -> None:
        """`PreTrainedModel.save_pretrained`; refused for a quantized model (folders hold fp32 weights only)."""
        if self.quantization is not None:
            raise ValueError(
                f"this model was quantized to {self.quantization} for inference and cannot be saved: save the fp32 "
                "model and pass quantize= when loading it"
            )
        super().save_pretrained(save_directory, *args, **kwargs)

    def resize_token_embeddings(
        self, new_num_tokens: int | None = None, pad_to_multiple_of: int | None = None, mean_resizing: bool = True
    ) -> nn.Embedding:
        """Resize the decoder (and untied encoder) embeddings and the output layer to a new vocabulary size."""
        embeddings = super().resize_token_embeddings(new_num_tokens, pad_to_multiple_of, mean_resizing)
        encoder = self.get_encoder()
        if not self.config.tie_encoder_decoder_embeddings:  # the base class only resizes the decoder's
            encoder.embed_tokens = resized_embedding(
                encoder.embed_tokens, embeddings.num_embeddings, mean_resizing, self._init_weights
            )
        return embeddings


def rename_unprefixed_keys(model: TranslationPreTrainedModel, state_dict: dict[str, Any], prefix: str = "") -> None:
    """Rename in place the keys of a head model's state dict saved before the base-model split (`encoder.*`,
    `decoder.*`) to today's (`model.encoder.*`, ...), for `load_state_dict` (`from_pretrained` adds the prefix itself).
    """
    base = getattr(model, model.base_model_prefix, None)
    if base is None or base is model:  # a base model: its keys never had a prefix
        return
    for key in [key for key in state_dict if key.startswith(prefix)]:
        name = key[len(prefix) :]
        if name.split(".", 1)[0] in ("encoder", "decoder"):
            state_dict[f"{prefix}{model.base_model_prefix}.{name}"] = state_dict.pop(key)


__all__ = [
    "GENERATION_DEFAULTS",
    "TranslationPreTrainedModel",
    "check_loaded_weights",
    "quantizer",
    "rename_unprefixed_keys",
]
