"""d2l's RNN encoder-decoder with Bahdanau attention as a `transformers` seq2seq model.

`BahdanauModel` is the encoder-decoder (`bahdanau_encoder.py`, and a decoder of `bahdanau_decoder.py`: d2l's, or
the conditional GRU of Nematus with `decoder_type="cgru"`); `BahdanauForConditionalGeneration` adds a linear layer
that maps the RNN outputs to logits.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import GenerationMixin
from transformers import initialization as init

# A direct import of every sibling file the modules below import: transformers 5.8 and 5.9 copy only a remote-code
# module's direct relative imports into their modules cache.
from .attention import ScoredAttention  # noqa: F401
from .bahdanau_decoder import BahdanauDecoder, ConditionalGRUDecoder
from .bahdanau_encoder import BahdanauEncoder
from .cache_names import with_cache  # noqa: F401
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


class BahdanauModel(BahdanauPreTrainedModel, TranslationModel):
    """The bare Bahdanau encoder-decoder: the decoder RNN's outputs for the target tokens, no head."""

    def __init__(self, config: BahdanauConfig, initialize: bool = True) -> None:
        super().__init__(config, initialize)
        self.encoder = BahdanauEncoder(config)
        self.decoder = (ConditionalGRUDecoder if config.decoder_type == "cgru" else BahdanauDecoder)(config)
        self.share_embeddings()
        self.post_init()


class BahdanauForConditionalGeneration(
    BahdanauPreTrainedModel, TranslationForConditionalGeneration, GenerationMixin
):  # GenerationMixin listed: see can_generate
    """The Bahdanau attention seq2seq: `BahdanauModel` (under `model`) with a language-model head, ready for
    `generate()`."""

    base_model_class = BahdanauModel


__all__ = [
    "BahdanauForConditionalGeneration",
    "BahdanauModel",
    "BahdanauPreTrainedModel",
]
