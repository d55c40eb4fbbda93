"""The Bahdanau model's encoder: embedding -> (bi)GRU/LSTM over the unpadded tokens -> the outputs (the attention's
keys and values) and the decoder's initial state (through a learned bridge when bidirectional); and the recurrent
layers a config names, which the decoders use too.

Copied into saved model folders (`trust_remote_code`): torch, transformers and its sibling files only.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from transformers.modeling_outputs import ModelOutput

from .configuration_bahdanau import BahdanauConfig
from .input_checks import check_source


@dataclass
class BahdanauEncoderOutput(ModelOutput):
    """Encoder outputs; every tensor is batch-first so that `generate` can expand it for beams.

    Args:
        last_hidden_state: `(batch, src_len, encoder_output_size)`, zeros at padding positions.
        decoder_initial_hidden: `(batch, decoder_layers, hidden)`, the decoder's initial hidden state.
        decoder_initial_cell: `(batch, decoder_layers, hidden)`, the initial LSTM cell (None for a GRU).
        hidden_states: with `output_hidden_states`, the embeddings and the outputs.
        attentions: always None (the encoder has no attention); kept for the `transformers` interface.
    """

    last_hidden_state: torch.Tensor | None = None
    decoder_initial_hidden: torch.Tensor | None = None
    decoder_initial_cell: torch.Tensor | None = None
    hidden_states: tuple[torch.Tensor, ...] | None = None
    attentions: tuple[torch.Tensor, ...] | None = None


def recurrent_layers(
    config: BahdanauConfig, input_size: int, num_layers: int, bidirectional: bool = False
) -> nn.RNNBase:
    """The `nn.GRU` or `nn.LSTM` (`config.rnn_type`) of `config.hidden_size`, batch first, with the config's dropout
    between layers."""
    rnn_class = nn.GRU if config.rnn_type == "gru" else nn.LSTM
    return rnn_class(
        input_size,
        config.hidden_size,
        num_layers,
        batch_first=True,
        dropout=config.dropout if num_layers > 1 else 0.0,
        bidirectional=bidirectional,
    )


class BahdanauEncoder(nn.Module):
    """Embedding and (bi)RNN; padding on either side is skipped, as if the sentence were alone."""

    main_input_name = "input_ids"
    output_class = BahdanauEncoderOutput

    def __init__(self, config: BahdanauConfig) -> None:
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.embedding_size)
        self.dropout = nn.Dropout(config.embedding_dropout)
        self.rnn = recurrent_layers(config, config.embedding_size, config.encoder_layers, config.bidirectional_encoder)
        self.bridge = None
        if config.bidirectional_encoder:
            parts = 2 if config.rnn_type == "lstm" else 1  # an LSTM's state is [hidden; cell]
            self.bridge = nn.Linear(config.encoder_output_size * parts, config.hidden_size * parts)

    def _runrecurrent_layers(
        self, embeddings: torch.Tensor, attention_mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor | tuple[torch.Tensor, torch.Tensor]]:
        """RNN over the valid tokens only: outputs `(batch, src_len, out)` (zeros at padding) and final state."""
        if attention_mask is None or bool(attention_mask.all()):  # None: no padding (no value read, as compile needs)
            return self.rnn(embeddings)
        # Move the valid tokens of each row to the front (any padding side), pack, and move them back.
        order = torch.argsort((~attention_mask).to(torch.int8), dim=1, stable=True)  # (batch, src_len)
        gather_index = order.unsqueeze(-1).expand_as(embeddings)
        packed = nn.utils.rnn.pack_padded_sequence(
            embeddings.gather(1, gather_index),
            attention_mask.sum(1).cpu(),
            batch_first=True,
            enforce_sorted=False,
        )
        packed_out, state = self.rnn(packed)
        left_aligned, _ = nn.utils.rnn.pad_packed_sequence(
            packed_out, batch_first=True, total_length=embeddings.shape[1]
        )
        index = order.unsqueeze(-1).expand_as(left_aligned)
        return torch.zeros_like(left_aligned).scatter(1, index, left_aligned), state

    def _decoder_initial_state(self, final: torch.Tensor) -> torch.Tensor:
        """Final RNN state `(encoder_layers * directions, batch, hidden)` -> `(batch, decoder_layers, width)`."""
        directions = 2 if self.config.bidirectional_encoder else 1
        layers, batch = self.config.encoder_layers, final.shape[1]
        # (layers, directions, batch, hidden) -> (batch, layers, directions * hidden)
        state = final.reshape(layers, directions, batch, -1).permute(2, 0, 1, 3).reshape(batch, layers, -1)
        if layers != self.config.decoder_layers:
            state = state[:, -1:].expand(-1, self.config.decoder_layers, -1)
        return state

    def forward(
        self,
        input_ids: torch.LongTensor | None,
        attention_mask: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        inputs_embeds: torch.Tensor | None = None,
    ) -> BahdanauEncoderOutput:
        """`input_ids` `(batch, src_len)` (or their embeddings `inputs_embeds` `(batch, src_len, embedding)`),
        `attention_mask` `(batch, src_len)` (1 = token, 0 = padding)."""
        mask = check_source(input_ids.shape if inputs_embeds is None else inputs_embeds.shape[:2], attention_mask)
        if inputs_embeds is None:
            inputs_embeds = self.embed_tokens(input_ids)
        embeddings = self.dropout(inputs_embeds)  # (batch, src_len, embedding)
        outputs, final = self._runrecurrent_layers(embeddings, mask)  # (batch, src_len, encoder_output_size)
        hidden, cell = final if isinstance(final, tuple) else (final, None)
        hidden = self._decoder_initial_state(hidden)
        if cell is not None:
            cell = self._decoder_initial_state(cell)
        if self.bridge is not None:
            bridged = torch.tanh(self.bridge(hidden if cell is None else torch.cat([hidden, cell], -1)))
            hidden, cell = bridged.chunk(2, dim=-1) if cell is not None else (bridged, None)
        return BahdanauEncoderOutput(
            last_hidden_state=outputs,
            decoder_initial_hidden=hidden,
            decoder_initial_cell=cell,
            hidden_states=(embeddings, outputs) if output_hidden_states else None,
        )


__all__ = ["BahdanauEncoder", "BahdanauEncoderOutput", "recurrent_layers"]
