"""`TranslationPreTrainedModel`, the base of every translation model class (with or without a head): saving, resizing,
and the generation defaults of a new model.

Loading, tying and initialisation are `PreTrainedModel`'s, through its hooks: each model class declares its tied
weights (`tied_embeddings`, set as `_tied_weights_keys` before `post_init()`, honoured when
`config.tie_word_embeddings`) and initialises in `_init_weights`. Copied into saved model folders
(`trust_remote_code`): torch and transformers only.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from transformers import PreTrainedModel

from .configuration_translation import TranslationConfig

# The one place for a new model's generation settings (saved in its generation_config.json, overridable per call).
GENERATION_DEFAULTS = {"num_beams": 5, "max_new_tokens": 128}


def generation_defaults(config: TranslationConfig) -> dict[str, Any]:
    """`GENERATION_DEFAULTS` for a model of `config`: a Transformer's translations are no longer than its position
    table."""
    defaults = dict(GENERATION_DEFAULTS)
    table = getattr(config, "max_position_embeddings", None)
    if table is not None:
        defaults["max_new_tokens"] = min(defaults["max_new_tokens"], table)
    return defaults


def tied_embeddings(config: TranslationConfig, prefix: str = "") -> dict[str, str]:
    """The encoder-decoder's `_tied_weights_keys` under `prefix`: `{tied weight: the decoder embedding it shares}`
    (transformers ties them only when `config.tie_word_embeddings`)."""
    if not config.tie_encoder_decoder_embeddings:
        return {}
    return {f"{prefix}encoder.embed_tokens.weight": f"{prefix}decoder.embed_tokens.weight"}


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
        head = self.get_output_embeddings()
        if head is not None and head.bias is not None and head.bias.shape[0] != embeddings.num_embeddings:
            # a tied head's weight is resized with the embedding (its source); its bias gains zeros or loses rows
            head.bias.data = nn.functional.pad(head.bias.data, (0, embeddings.num_embeddings - head.bias.shape[0]))
            head.out_features = embeddings.num_embeddings
        return embeddings


__all__ = ["GENERATION_DEFAULTS", "TranslationPreTrainedModel", "generation_defaults", "tied_embeddings"]
