"""d2l's RNN encoder-decoder with Bahdanau attention as a `transformers` seq2seq model.

`BahdanauModel` is the encoder-decoder (`bahdanau_encoder.py`, and a decoder of `bahdanau_decoder.py`: d2l's, or
the conditional GRU of Nematus with `decoder_type="cgru"`); `BahdanauForConditionalGeneration` adds a linear layer
that maps the RNN outputs to logits, and scheduled sampling in training.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from transformers import GenerationMixin
from transformers import initialization as init
from transformers.modeling_outputs import Seq2SeqModelOutput

# A direct import of every sibling file the modules below import: transformers 5.8 and 5.9 copy only a remote-code
# module's direct relative imports into their modules cache.
from .attention import ScoredAttention  # noqa: F401
from .bahdanau_decoder import BahdanauDecoder, ConditionalGRUDecoder
from .bahdanau_encoder import BahdanauEncoder
from .cache_names import returned_cache, with_cache
from .configuration_bahdanau import BahdanauConfig
from .configuration_translation import TranslationConfig  # noqa: F401
from .input_checks import check_source  # noqa: F401
from .modeling_translation import TranslationForConditionalGeneration, TranslationModel
from .pretrained_model import TranslationPreTrainedModel


class BahdanauPreTrainedModel(TranslationPreTrainedModel):
    config: BahdanauConfig
    config_class = BahdanauConfig
    _is_stateful = True  # the recurrent state cannot be cropped, so no assisted generation

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        """d2l's `init_seq2seq` (Xavier for linear and recurrent weights) with zero biases, N(0, 1) embeddings
        (PyTorch's default, as in d2l) and an LSTM forget-gate bias of 1."""
        if isinstance(module, nn.Linear):
            init.xavier_uniform_(module.weight)
            if module.bias is not None:
                init.zeros_(module.bias)
        elif isinstance(module, nn.RNNBase):
            for name, param in module.named_parameters():
                if name.startswith("weight"):
                    init.xavier_uniform_(param)
                elif not getattr(param, "_is_hf_initialized", False):
                    init.zeros_(param)
                    if isinstance(module, nn.LSTM):  # gates are ordered (input, forget, cell, output)
                        param[module.hidden_size : 2 * module.hidden_size].fill_(0.5)
        elif isinstance(module, nn.Embedding):
            init.normal_(module.weight, mean=0.0, std=1.0)

    @classmethod
    def _supports_default_dynamic_cache(cls) -> bool:
        # The recurrent state is not a key/value cache: `forward` returns a BahdanauDecoderState.
        return False


class BahdanauModel(BahdanauPreTrainedModel, TranslationModel):
    """The bare Bahdanau encoder-decoder: the decoder RNN's outputs for the target tokens, no head."""

    def __init__(self, config: BahdanauConfig, initialize: bool = True) -> None:
        super().__init__(config, initialize)
        self.encoder = BahdanauEncoder(config)
        self.decoder = (ConditionalGRUDecoder if config.decoder_type == "cgru" else BahdanauDecoder)(config)
        self.post_init()


class BahdanauForConditionalGeneration(
    BahdanauPreTrainedModel, TranslationForConditionalGeneration, GenerationMixin
):  # GenerationMixin listed: see can_generate
    """The Bahdanau attention seq2seq: `BahdanauModel` (under `model`) with a language-model head, ready for
    `generate()`."""

    base_model_class = BahdanauModel

    def _decode(self, decoder_input_ids: torch.LongTensor, **inputs: Any) -> tuple[Seq2SeqModelOutput, torch.Tensor]:
        """As the base class's, or with scheduled sampling in training (`teacher_forcing_ratio` < 1)."""
        if self.training and self.config.teacher_forcing_ratio < 1.0:
            return self._decode_with_scheduled_sampling(decoder_input_ids, **inputs)
        return super()._decode(decoder_input_ids, **inputs)

    def _decode_with_scheduled_sampling(
        self, decoder_input_ids: torch.LongTensor, **inputs: Any
    ) -> tuple[Seq2SeqModelOutput, torch.Tensor]:
        """Scheduled sampling: after the first step, each sequence is fed its gold previous token with probability
        `teacher_forcing_ratio`, else the model's own greedy prediction; one base-model call per step."""
        use_cache = inputs.pop("use_cache")
        for name in ("output_attentions", "output_hidden_states"):  # None: the config's
            inputs[name] = getattr(self.config, name) if inputs[name] is None else inputs[name]
        inputs["encoder_outputs"] = self.model.encode(
            inputs.pop("input_ids"),
            inputs["attention_mask"],
            inputs["encoder_outputs"],
            inputs["output_attentions"],
            inputs["output_hidden_states"],
        )  # once for all steps
        steps, logits = [], []
        step_input = decoder_input_ids[:, :1]  # (batch, 1)
        for step in range(decoder_input_ids.shape[1]):
            outputs, step_logits = super()._decode(step_input, use_cache=True, **inputs)
            steps.append(outputs)
            logits.append(step_logits)  # (batch, 1, vocab)
            inputs["cache"] = returned_cache(outputs)
            if step + 1 < decoder_input_ids.shape[1]:
                gold = decoder_input_ids[:, step + 1 : step + 2]
                use_gold = torch.rand(gold.shape, device=gold.device) < self.config.teacher_forcing_ratio
                step_input = torch.where(use_gold, gold, step_logits.argmax(-1))

        def joined(name: str, dim: int) -> tuple[torch.Tensor, ...] | None:
            parts = [getattr(output, name) for output in steps]
            return None if parts[0] is None else tuple(torch.cat(p, dim) for p in zip(*parts, strict=True))

        first = steps[0]
        outputs = with_cache(
            Seq2SeqModelOutput,
            inputs["cache"] if use_cache else None,
            last_hidden_state=torch.cat([output.last_hidden_state for output in steps], dim=1),
            decoder_hidden_states=joined("decoder_hidden_states", 1),
            cross_attentions=joined("cross_attentions", 2),
            encoder_last_hidden_state=first.encoder_last_hidden_state,
            encoder_hidden_states=first.encoder_hidden_states,
            encoder_attentions=first.encoder_attentions,
        )
        return outputs, torch.cat(logits, dim=1)


__all__ = [
    "BahdanauForConditionalGeneration",
    "BahdanauModel",
    "BahdanauPreTrainedModel",
]
