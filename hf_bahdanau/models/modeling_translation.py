"""What both translation models share, split as transformers' `MarianModel` / `MarianMTModel`:

- `TranslationModel`: the bare encoder-decoder (no head). A model type's subclass sets `encoder` (called as
  `encoder(input_ids, attention_mask, output_attentions=, output_hidden_states=)`, returning a batch-first
  `ModelOutput`) and `decoder` (called as `decoder(decoder_input_ids, encoder_outputs, source_mask, cache, **options)`,
  see `TranslationModel.forward`); it returns a `Seq2SeqModelOutput`;
- `TranslationForConditionalGeneration`: the base model under `model` (`base_model_prefix`) and an `lm_head`, with
  labels -> decoder inputs, the loss and `generate()`.

Both derive from `TranslationPreTrainedModel` (`pretrained_model.py`: saving, resizing, generation defaults).

The cache contract, on every transformers 5 release: `forward` (of both classes) takes the decoder state returned
by the previous call as `past_key_values=` or as `cache=` (`generate` passes it as `cache` from transformers 5.24
on and as `past_key_values` before; code of its own, such as a beam search, may use either; where the release names
it `cache`, the old name warns of its deprecation, as transformers' own models do), and returns it in the
output's cache field, which transformers names `cache` from 5.24 on and `past_key_values` before: read it with
`returned_cache(outputs)` (`cache_names.py`, the one place that bridges the two names).

This file is copied into saved model folders (`trust_remote_code`), so it imports nothing but torch, transformers
and its sibling files.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F
from transformers import GenerationMixin, PreTrainedModel
from transformers.modeling_outputs import ModelOutput, Seq2SeqLMOutput, Seq2SeqModelOutput

from .cache_names import given_cache, returned_cache, with_cache
from .configuration_translation import TranslationConfig
from .pretrained_model import TranslationPreTrainedModel, generation_defaults, tied_embeddings

# What `generate` hands `prepare_inputs_for_generation` that is not for `forward` (`cache_position`: up to 5.23;
# `forward` counts positions from the cache).
GENERATION_ONLY_KWARGS = ("labels", "inputs_embeds", "decoder_inputs_embeds", "is_first_iteration", "cache_position")


def writes_code(model: PreTrainedModel) -> bool:
    """Whether `save_pretrained` copies the model's code into the folder (its class registered for an auto class):
    `is_remote_code()` from transformers 5.3 on; 5.0-5.2 lack it, and there the classes count as registered, as
    importing the package registers them, and so does transformers when it loads a folder's code."""
    is_remote_code = getattr(model, "is_remote_code", None)
    return is_remote_code() if is_remote_code is not None else True


def shift_tokens_right(labels: torch.Tensor, pad_token_id: int, decoder_start_token_id: int) -> torch.Tensor:
    """Decoder inputs from labels: prepend the start token, drop the last label, replace -100 by padding."""
    shifted = labels.new_full(labels.shape, pad_token_id)
    shifted[:, 1:] = labels[:, :-1]
    shifted[:, 0] = decoder_start_token_id
    return shifted.masked_fill(shifted == -100, pad_token_id)


def token_cross_entropy(
    logits: torch.Tensor,  # (batch, tgt_len, vocab)
    labels: torch.Tensor,  # (batch, tgt_len), -100 = ignored
    num_items_in_batch: int | torch.Tensor | None = None,
) -> torch.Tensor:
    """The cross-entropy of the logits (in fp32) summed over labelled tokens, divided by their count or by
    `num_items_in_batch`; a batch with no labelled token gives 0 with zero gradients (not NaN)."""
    flat_labels = labels.to(logits.device).reshape(-1)  # (tokens,)
    loss = F.cross_entropy(logits.flatten(0, 1).float(), flat_labels, ignore_index=-100, reduction="sum")
    count = (flat_labels != -100).sum().clamp(min=1) if num_items_in_batch is None else num_items_in_batch
    return loss / count


class TranslationModel(TranslationPreTrainedModel):
    """The bare encoder-decoder, as transformers' `MarianModel`: `forward` returns the decoder's last hidden states
    with the encoder's outputs (no head, no loss). A model type's subclass sets `encoder` and `decoder`."""

    _keys_to_ignore_on_load_unexpected = [r"^lm_head\."]  # a head model's folder loads as its base model

    encoder: nn.Module
    decoder: nn.Module

    def __init__(self, config: TranslationConfig, initialize: bool = True) -> None:
        """`initialize=False` leaves the weights as torch made them: the model with a head that holds this one
        initialises them with its own, module by module, so that a seed draws the same weights as a flat model."""
        super().__init__(config)
        self._initialize = initialize
        self._tied_weights_keys = tied_embeddings(config)

    def share_embeddings(self) -> None:
        """With `tie_encoder_decoder_embeddings`, the encoder embeds with the decoder's embedding module (as Marian's
        `shared`), so that loading the decoder's loads both. A subclass calls it once `encoder` and `decoder` are set.
        """
        if self.config.tie_encoder_decoder_embeddings:
            self.encoder.embed_tokens = self.decoder.embed_tokens

    def init_weights(self) -> None:
        """transformers' (initialise and tie), unless `initialize=False`."""
        if self._initialize:
            super().init_weights()

    def get_encoder(self, modality: str | None = None) -> nn.Module:
        return self.encoder

    def get_decoder(self) -> nn.Module:
        return self.decoder

    def get_input_embeddings(self) -> nn.Embedding:
        return self.decoder.embed_tokens

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.decoder.embed_tokens = value
        if self.config.tie_encoder_decoder_embeddings:
            self.encoder.embed_tokens = value

    def encode(
        self,
        input_ids: torch.LongTensor | None,
        attention_mask: torch.Tensor | None,
        encoder_outputs: ModelOutput | tuple | None = None,
        output_attentions: bool = False,
        output_hidden_states: bool = False,
        inputs_embeds: torch.Tensor | None = None,
    ) -> ModelOutput:
        """The encoder's outputs for `input_ids` `(batch, src_len)` (or their embeddings `inputs_embeds`, as the
        encoder's `embed_tokens` gives them: `(batch, src_len, embedding)`), or `encoder_outputs` as given (a tuple as
        the encoder's output class)."""
        if encoder_outputs is None:
            if (input_ids is None) == (inputs_embeds is None):
                raise ValueError("pass input_ids or inputs_embeds (one of them), or encoder_outputs")
            return self.encoder(
                input_ids,
                attention_mask,
                output_attentions=output_attentions,
                output_hidden_states=output_hidden_states,
                inputs_embeds=inputs_embeds,
            )
        if not isinstance(encoder_outputs, ModelOutput):
            return self.encoder.output_class(*encoder_outputs)
        return encoder_outputs

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: ModelOutput | tuple | None = None,
        past_key_values: Any = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        cache: Any = None,
    ) -> Seq2SeqModelOutput | tuple:
        """The decoder's last hidden states `(batch, tgt_len, hidden)` for `decoder_input_ids` `(batch, tgt_len)`
        (or their embeddings `decoder_inputs_embeds`) attending to the source `input_ids` `(batch, src_len)` (or
        `inputs_embeds`, or its `encoder_outputs`), with the encoder's outputs. `attention_mask` `(batch, src_len)` and
        `decoder_attention_mask` `(batch, past + tgt_len)` are 1 for a token and 0 for padding; a decoder step does
        not read its padding (left padding leaves a sentence as it is alone).

        With the state returned by the previous call (`past_key_values=` or `cache=`, see the module's docstring)
        only the new decoder tokens are read. Any other argument is a TypeError.
        """
        cache = given_cache(past_key_values, cache)
        output_attentions = output_attentions if output_attentions is not None else self.config.output_attentions
        output_hidden_states = (
            output_hidden_states if output_hidden_states is not None else self.config.output_hidden_states
        )
        return_dict = return_dict if return_dict is not None else self.config.return_dict
        use_cache = use_cache if use_cache is not None else self.config.use_cache
        if (decoder_input_ids is None) == (decoder_inputs_embeds is None):
            raise ValueError("pass decoder_input_ids or decoder_inputs_embeds (one of them)")
        encoder_outputs = self.encode(
            input_ids, attention_mask, encoder_outputs, output_attentions, output_hidden_states, inputs_embeds
        )
        source_mask = attention_mask.bool() if attention_mask is not None else None  # None: no padding
        decoder_outputs = self.decoder(
            decoder_input_ids,
            encoder_outputs,
            source_mask,
            cache,
            use_cache=use_cache,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            attention_mask=decoder_attention_mask,
            inputs_embeds=decoder_inputs_embeds,
        )
        output = with_cache(
            Seq2SeqModelOutput,
            returned_cache(decoder_outputs) if use_cache else None,
            last_hidden_state=decoder_outputs.last_hidden_state,
            decoder_hidden_states=decoder_outputs.hidden_states,
            decoder_attentions=decoder_outputs.attentions,
            cross_attentions=decoder_outputs.cross_attentions,
            encoder_last_hidden_state=encoder_outputs.last_hidden_state,
            encoder_hidden_states=encoder_outputs.hidden_states,
            encoder_attentions=encoder_outputs.attentions,
        )
        return output if return_dict else output.to_tuple()


class TranslationForConditionalGeneration(TranslationPreTrainedModel, GenerationMixin):
    """The base model (`base_model_class`, under `model`) and an `lm_head` over the vocabulary, as transformers'
    `MarianMTModel`: logits, the loss from `labels`, and `generate()`."""

    base_model_class: type[TranslationModel]
    accepts_loss_kwargs = True  # the Trainer's num_items_in_batch (a named argument of forward)

    def __init__(self, config: TranslationConfig) -> None:
        super().__init__(config)
        self.model = self.base_model_class(config, initialize=False)  # initialised below, with lm_head
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size)
        prefix = f"{self.base_model_prefix}."
        # The decoder's embedding is declared tied to `lm_head` (and saved, the head not): transformers ties a weight
        # absent from a folder to the one it holds, in either direction, on every 5.x release.
        self._tied_weights_keys = {f"{prefix}decoder.embed_tokens.weight": "lm_head.weight"}
        self._tied_weights_keys.update(tied_embeddings(config, prefix))
        # Tied weights are saved once, as the decoder's embedding: a state dict without the others is complete.
        saved_once = ["lm_head.weight", *tied_embeddings(config, prefix)]
        self._keys_to_ignore_on_save = saved_once if config.tie_word_embeddings else None
        self.post_init()
        if self.generation_config is not None:  # a new model's; a saved folder's generation_config.json replaces it
            self.generation_config.update(**generation_defaults(config))

    def init_weights(self) -> None:
        """transformers' (initialise and tie); a tied embedding keeps the values it was drawn with (the tie's source
        is `lm_head`, which transformers would copy onto it)."""
        drawn = self.get_input_embeddings().weight  # initialised in place
        super().init_weights()
        if self.lm_head.weight is not drawn and self.lm_head.weight is self.get_input_embeddings().weight:
            with torch.no_grad():
                self.lm_head.weight.copy_(drawn)

    def save_pretrained(self, save_directory: str | os.PathLike, *args: Any, **kwargs: Any) -> None:
        """`TranslationPreTrainedModel.save_pretrained`; a folder with remote code (`register_for_auto_class`) maps
        `AutoModel` to the base model too, in its config's `auto_map` (the file is the one copied for this class)."""
        if writes_code(self):
            base = self.base_model_class
            self.config.auto_map = {
                **(getattr(self.config, "auto_map", None) or {}),
                "AutoModel": f"{base.__module__.rsplit('.', 1)[-1]}.{base.__name__}",
            }
        super().save_pretrained(save_directory, *args, **kwargs)

    def get_encoder(self, modality: str | None = None) -> nn.Module:
        return self.model.get_encoder()

    def get_decoder(self) -> nn.Module:
        return self.model.get_decoder()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.model.get_input_embeddings()

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.model.set_input_embeddings(value)

    def get_output_embeddings(self) -> nn.Linear:
        return self.lm_head

    def set_output_embeddings(self, new_embeddings: nn.Linear) -> None:
        self.lm_head = new_embeddings

    def prepare_decoder_input_ids_from_labels(self, labels: torch.Tensor) -> torch.Tensor:
        return shift_tokens_right(labels, self.config.pad_token_id, self.config.decoder_start_token_id)

    def prepare_inputs_for_generation(
        self,
        input_ids: torch.LongTensor,
        past_key_values: Any = None,
        cache: Any = None,
        next_sequence_length: int | None = None,
        **kwargs: Any,
    ) -> dict[str, Any]:
        """One generation step's `forward` arguments: the tokens the decoder state has not read yet (also when
        `generate` continues from a returned state with the whole sequence so far) and the model kwargs; the state
        goes back under the name `generate` gave it. Lean on purpose: `GenerationMixin`'s version inspects `forward`'s
        signature and looks up the device at every step (~0.4 ms, some 5% of a greedy step at batch 64)."""
        state = given_cache(past_key_values, cache)
        if next_sequence_length is None and state is not None:
            seen = state.get_seq_length()
            if 0 < seen < input_ids.shape[1]:
                next_sequence_length = input_ids.shape[1] - seen
        if next_sequence_length is not None:
            input_ids = input_ids[:, -next_sequence_length:]
        inputs = {name: value for name, value in kwargs.items() if name not in GENERATION_ONLY_KWARGS}
        return {**inputs, "decoder_input_ids": input_ids, "cache" if cache is not None else "past_key_values": state}

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: ModelOutput | tuple | None = None,
        past_key_values: Any = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        num_items_in_batch: int | torch.Tensor | None = None,
        cache: Any = None,
    ) -> Seq2SeqLMOutput | tuple:
        """Logits `(batch, tgt_len, vocab)`; `loss` when `labels` `(batch, tgt_len)` are given (-100 ignored): the
        token cross-entropy, the mean over labelled tokens, or the sum divided by `num_items_in_batch` (the Trainer's
        count over accumulated batches). Without decoder inputs, they are the labels shifted right.

        The other arguments are the base model's (`TranslationModel.forward`; the decoder state under either name).
        """
        return_dict = return_dict if return_dict is not None else self.config.return_dict
        if labels is not None:
            if self.training and self.quantization is not None:  # its int8 layers have no gradients
                raise ValueError(
                    f"this model was quantized to {self.quantization} for inference and cannot be trained: train "
                    "the fp32 model (loaded without quantize=) and quantize it when loading it to translate"
                )
            use_cache = False
            if decoder_input_ids is None and decoder_inputs_embeds is None:
                decoder_input_ids = self.prepare_decoder_input_ids_from_labels(labels)
        outputs = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            decoder_input_ids=decoder_input_ids,
            decoder_attention_mask=decoder_attention_mask,
            encoder_outputs=encoder_outputs,
            cache=given_cache(past_key_values, cache),
            inputs_embeds=inputs_embeds,
            decoder_inputs_embeds=decoder_inputs_embeds,
            use_cache=use_cache,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            return_dict=True,
        )
        logits = self.lm_head(outputs.last_hidden_state)  # (batch, tgt_len, vocab)
        output = with_cache(
            Seq2SeqLMOutput,
            returned_cache(outputs),
            loss=None if labels is None else token_cross_entropy(logits, labels, num_items_in_batch),
            logits=logits,
            decoder_hidden_states=outputs.decoder_hidden_states,
            decoder_attentions=outputs.decoder_attentions,
            cross_attentions=outputs.cross_attentions,
            encoder_last_hidden_state=outputs.encoder_last_hidden_state,
            encoder_hidden_states=outputs.encoder_hidden_states,
            encoder_attentions=outputs.encoder_attentions,
        )
        return output if return_dict else output.to_tuple()


__all__ = [
    "TranslationForConditionalGeneration",
    "TranslationModel",
    "shift_tokens_right",
    "token_cross_entropy",
]
