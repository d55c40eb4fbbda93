"""The ONNX graphs of a d2l RNN encoder-decoder (`onnx_export` writes them): the encoder, with the attention keys
projected once, and one decoder step that takes and returns the recurrent state, batch first. Both are the model's
own encoder and decoder, traced.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from hf_bahdanau.models.bahdanau_decoder import BahdanauDecoderState
from hf_bahdanau.models.cache_names import returned_cache

from .onnx_tracing import SOURCE_AXES, EncoderOutput, quantized, sample_source, traced


class RNNEncoderGraph(nn.Module):
    """`input_ids`, `attention_mask` -> `encoder_hidden_states` `(batch, src_len, encoder_output_size)`,
    `projected_keys` `(batch, src_len, key_size)`, the decoder's initial `hidden` (and an LSTM's `cell`) `(batch,
    decoder_layers, hidden)`."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, ...]:
        encoded = self.model.get_encoder()(input_ids, attention_mask)
        projected = self.model.get_decoder().attention.project_keys(encoded.last_hidden_state)
        cell = () if encoded.decoder_initial_cell is None else (encoded.decoder_initial_cell,)
        return (encoded.last_hidden_state, projected, encoded.decoder_initial_hidden, *cell)


class RNNDecoderGraph(nn.Module):
    """One decoder step: `(input_ids (batch, 1), encoder_hidden_states, projected_keys, encoder_attention_mask,
    hidden [, cell])` -> `(logits (batch, 1, vocab), new_hidden [, new_cell])`, states `(batch, layers, hidden)`."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(
        self,
        input_ids: torch.Tensor,
        encoder_hidden_states: torch.Tensor,
        projected_keys: torch.Tensor,
        encoder_attention_mask: torch.Tensor,
        hidden: torch.Tensor,
        cell: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, ...]:
        state = BahdanauDecoderState(
            hidden.transpose(0, 1), None if cell is None else cell.transpose(0, 1), projected_keys
        )  # (layers, batch, hidden)
        decoded = self.model.get_decoder()(
            input_ids, EncoderOutput(encoder_hidden_states), encoder_attention_mask.bool(), state
        )
        new = returned_cache(decoded)
        cell = () if new.cell is None else (new.cell.transpose(0, 1),)
        return (self.model.lm_head(decoded.last_hidden_state), new.hidden.transpose(0, 1), *cell)


@contextlib.contextmanager
def _exportable_stable_argsort() -> Iterator[None]:
    """Within the block, `torch.argsort(..., stable=True)` (the RNN encoder's, which moves each row's tokens to its
    front) sorts keys made unique by their position instead: the same order, through ONNX's TopK (the exporter has
    no stable sort)."""
    argsort = torch.argsort

    def unique_keys_argsort(
        keys: torch.Tensor, dim: int = -1, descending: bool = False, stable: bool = False
    ) -> torch.Tensor:
        if not stable or keys.dim() != 2 or dim not in (1, -1):
            return argsort(keys, dim=dim, descending=descending, stable=stable)
        length = keys.shape[1]
        position = torch.arange(length, device=keys.device, dtype=torch.float32)  # (src_len,)
        ranked = keys.to(torch.float32) * length + (length - 1 - position if descending else position)
        return argsort(ranked, dim=1, descending=descending)  # (batch, src_len), ties broken by position

    torch.argsort = unique_keys_argsort
    try:
        yield
    finally:
        torch.argsort = argsort


def rnn_graphs(model: nn.Module) -> dict[str, tuple[Any, Any]]:
    """The encoder and the decoder step of a d2l RNN encoder-decoder, each in float32 and int8."""
    config = model.config
    lstm = config.rnn_type == "lstm"
    input_ids, attention_mask = sample_source(config.vocab_size)
    states = ["hidden", "cell"] if lstm else ["hidden"]
    batch, source = {0: "batch_size"}, SOURCE_AXES
    encoder_outputs = ["encoder_hidden_states", "projected_keys", *states]
    with _exportable_stable_argsort():
        encoder = traced(RNNEncoderGraph(model), (input_ids, attention_mask), ["input_ids", "attention_mask"],
                         encoder_outputs, {"input_ids": source, "attention_mask": source,
                                           **{name: source for name in encoder_outputs[:2]},
                                           **{name: batch for name in states}})  # fmt: skip
    with torch.no_grad():
        encoded = RNNEncoderGraph(model)(input_ids, attention_mask)
    inputs = ["input_ids", "encoder_hidden_states", "projected_keys", "encoder_attention_mask", *states]
    outputs = ["logits", *(f"new_{name}" for name in states)]
    axes = {"input_ids": batch, "encoder_hidden_states": source, "projected_keys": source,
            "encoder_attention_mask": source, **{name: batch for name in [*states, *outputs]}}  # fmt: skip
    args = (input_ids[:, :1], encoded[0], encoded[1], attention_mask, *encoded[2:])
    decoder = traced(RNNDecoderGraph(model), args, inputs, outputs, axes)
    return {"encoder_model": (encoder, quantized(encoder)), "decoder_model": (decoder, quantized(decoder))}


__all__ = ["RNNDecoderGraph", "RNNEncoderGraph", "rnn_graphs"]
