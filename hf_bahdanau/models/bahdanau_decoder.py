"""The Bahdanau model's decoders and their recurrent state.

At each target step of d2l's decoder (`BahdanauDecoder`), the previous top-layer state is the query, attention over
the encoder outputs (padding masked) gives a context, and `[context; embedding]` is the RNN input;
`decoder_type="cgru"` (`ConditionalGRUDecoder`) is the conditional GRU of Nematus, attention between two GRU
transitions. `BahdanauDecoderState` carries the recurrent state between generation steps as `generate`'s cache.

Copied into saved model folders (`trust_remote_code`): torch, transformers and its sibling files only.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers.modeling_outputs import BaseModelOutputWithPastAndCrossAttentions

from .attention import AdditiveAttention, BilinearAttention, DotProductAttention, ScoredAttention
from .bahdanau_encoder import BahdanauEncoderOutput, recurrent_layers
from .cache_names import with_cache
from .configuration_bahdanau import BahdanauConfig

RNNState = torch.Tensor | tuple[torch.Tensor, torch.Tensor]  # a GRU's hidden state, or an LSTM's (hidden, cell)


class BahdanauDecoderState:
    """The decoder's recurrent state, carried between generation steps as `cache`.

    `generate` calls `reorder_cache` after each beam-search step, so the state follows its beams.
    """

    # What `generate` asks of a cache: a recurrent state (as Mamba's), neither static (compiled) nor croppable to
    # an earlier step; `prepare_inputs_for_generation` picks the tokens it has not read from `get_seq_length()`.
    is_compileable = False
    is_linear = (True,)
    is_croppable = False

    def __init__(
        self,
        hidden: torch.Tensor,  # (decoder_layers, batch, hidden)
        cell: torch.Tensor | None,  # (decoder_layers, batch, hidden) for an LSTM
        projected_keys: torch.Tensor,  # (batch, src_len, key_projection), the attention keys projected once
        steps: int = 0,
    ) -> None:
        self.hidden, self.cell, self.projected_keys, self.steps = hidden, cell, projected_keys, steps

    @property
    def rnn_state(self) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        return self.hidden if self.cell is None else (self.hidden, self.cell)

    def get_seq_length(self) -> int:
        """Number of target tokens already consumed."""
        return self.steps

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        """Keep, in place, the rows that beam search chose (`beam_idx` indexes the flattened batch)."""
        self.projected_keys = self.projected_keys.index_select(0, beam_idx.to(self.projected_keys.device))
        self.hidden = self.hidden.index_select(1, beam_idx.to(self.hidden.device))
        if self.cell is not None:
            self.cell = self.cell.index_select(1, beam_idx.to(self.cell.device))

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        """Keep only the decoder rows `indices`."""
        self.projected_keys = self.projected_keys[indices]
        self.hidden = self.hidden[:, indices]
        if self.cell is not None:
            self.cell = self.cell[:, indices]


def kept_at_padding(token: torch.Tensor, new: RNNState, old: RNNState) -> RNNState:
    """The `new` recurrent state `(decoder_layers, batch, hidden)` (and cell) where `token` `(batch,)` is true, the
    `old` one at padding."""
    if isinstance(new, tuple):
        return tuple(kept_at_padding(token, *parts) for parts in zip(new, old, strict=True))
    return torch.where(token[None, :, None], new, old)


def _attention(config: BahdanauConfig) -> ScoredAttention:
    keys, queries = config.encoder_output_size, config.hidden_size
    if config.attention_type == "additive":
        return AdditiveAttention(keys, queries, config.attention_hidden_size, config.dropout)
    if config.attention_type == "general":
        return BilinearAttention(keys, queries, config.dropout)
    return DotProductAttention(config.dropout)


class BahdanauDecoder(nn.Module):
    """d2l's `Seq2SeqAttentionDecoder`: one RNN step per target token, attending with the previous state; the RNN
    (`self.rnn`, an `nn.GRU` / `nn.LSTM`) reads `[context; embedding]`."""

    def __init__(self, config: BahdanauConfig) -> None:
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.embedding_size)
        self.dropout = nn.Dropout(config.embedding_dropout)
        self.attention = _attention(config)
        self.rnn = recurrent_layers(config, config.encoder_output_size + config.embedding_size, config.decoder_layers)

    def initial_state(self, encoder_outputs: BahdanauEncoderOutput) -> BahdanauDecoderState:
        """The state before the first target token; projects the attention keys once for all the steps."""
        cell = encoder_outputs.decoder_initial_cell
        return BahdanauDecoderState(
            hidden=encoder_outputs.decoder_initial_hidden.transpose(0, 1).contiguous(),
            cell=None if cell is None else cell.transpose(0, 1).contiguous(),
            projected_keys=self.attention.project_keys(encoder_outputs.last_hidden_state),
        )

    def forward(
        self,
        input_ids: torch.LongTensor,  # (batch, tgt_len)
        encoder_outputs: BahdanauEncoderOutput,
        encoder_attention_mask: torch.Tensor | None,  # (batch, src_len), bool; None: no padding
        cache: BahdanauDecoderState | None = None,
        use_cache: bool = True,
        output_attentions: bool = False,
        output_hidden_states: bool = False,
        attention_mask: torch.Tensor | None = None,  # (batch, past + tgt_len); None: no padding
        inputs_embeds: torch.Tensor | None = None,  # (batch, tgt_len, embedding), instead of input_ids
    ) -> BaseModelOutputWithPastAndCrossAttentions:
        """RNN outputs `(batch, tgt_len, hidden)`, the new state and, if asked, the embeddings and outputs as
        hidden states and the attention weights `(batch, 1, tgt_len, src_len)` as cross-attentions. A padding token
        of `attention_mask` leaves the state as it was.

        A `cache` that is not a `BahdanauDecoderState` (an empty key/value cache that some transformers releases make
        for every model) counts as none: the state starts from the encoder's.
        """
        if not isinstance(cache, BahdanauDecoderState):
            cache = self.initial_state(encoder_outputs)
        state = cache
        source = encoder_outputs.last_hidden_state  # (batch, src_len, encoder_output_size)
        embeddings = self.dropout(self.embed_tokens(input_ids) if inputs_embeds is None else inputs_embeds)
        batch, length = embeddings.shape[:2]  # embeddings (batch, tgt_len, embedding)
        tokens = None if attention_mask is None else attention_mask[:, -length:].bool()  # (batch, tgt_len)
        rnn_state = state.rnn_state  # (decoder_layers, batch, hidden), and the cell for an LSTM
        outputs, weights = [], []
        for step in range(length):
            output, new_state, step_weights = self._step(
                embeddings[:, step], rnn_state, source, encoder_attention_mask, state.projected_keys
            )  # output (batch, 1, hidden), step_weights (batch, 1, src_len)
            rnn_state = new_state if tokens is None else kept_at_padding(tokens[:, step], new_state, rnn_state)
            outputs.append(output)
            if output_attentions:
                weights.append(step_weights.reshape(batch, 1, -1))
        output = self.dropout(torch.cat(outputs, dim=1))  # (batch, tgt_len, hidden)
        hidden, cell = (rnn_state, None) if state.cell is None else rnn_state
        return with_cache(
            BaseModelOutputWithPastAndCrossAttentions,
            BahdanauDecoderState(hidden, cell, state.projected_keys, state.steps + length),
            last_hidden_state=output,
            hidden_states=(embeddings, output) if output_hidden_states else None,
            cross_attentions=(torch.cat(weights, dim=1).unsqueeze(1),) if output_attentions else None,
        )

    def _attend(
        self,
        query: torch.Tensor,  # (batch, hidden)
        source: torch.Tensor,  # (batch, src_len, encoder_output_size)
        mask: torch.Tensor | None,  # (batch, src_len)
        projected_keys: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The context `(batch, encoder_output_size)` of each query and the weights `(batch, 1, src_len)`."""
        context, weights = self.attention(
            query.unsqueeze(1), source, source, mask, projected_keys=projected_keys, return_weights=True
        )  # (batch, 1, encoder_output_size), (batch, 1, src_len)
        return context.squeeze(1), weights

    def _step(
        self,
        embedding: torch.Tensor,  # (batch, embedding)
        rnn_state: torch.Tensor | tuple[torch.Tensor, torch.Tensor],  # (decoder_layers, batch, hidden) [, cell]
        source: torch.Tensor,
        mask: torch.Tensor | None,
        projected_keys: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor | tuple[torch.Tensor, torch.Tensor], torch.Tensor]:
        """One target token: the previous top-layer state attends, and the RNN reads `[context; embedding]`.
        Returns the output `(batch, 1, hidden)`, the new state and the attention weights."""
        top = (rnn_state if isinstance(rnn_state, torch.Tensor) else rnn_state[0])[-1]  # (batch, hidden)
        context, weights = self._attend(top, source, mask, projected_keys)
        rnn_input = torch.cat([context, embedding], dim=-1)  # (batch, encoder_output_size + embedding)
        output, rnn_state = self.rnn(rnn_input.unsqueeze(1), rnn_state)  # output (batch, 1, hidden)
        return output, rnn_state, weights


class ConditionalGRUDecoder(BahdanauDecoder):
    """The conditional GRU decoder of Nematus (Sennrich et al. 2017) and LIUM's nmtpy (`decoder_type="cgru"`):
    attention between two GRU transitions. Per target token: `s' = GRU1(embedding, s)` (`self.rnn`, all
    `decoder_layers` layers), the new top state `s'` is the query, `c = attention(s', source)`, and the top state
    becomes `GRU2(c, s')` (`self.rnn2`), which is the output. d2l's decoder attends with the previous state instead
    and reads `[context; embedding]` in one GRU."""

    def __init__(self, config: BahdanauConfig) -> None:
        super().__init__(config)
        self.rnn = recurrent_layers(config, config.embedding_size, config.decoder_layers)
        self.rnn2 = recurrent_layers(config, config.encoder_output_size, 1)

    def _step(
        self,
        embedding: torch.Tensor,  # (batch, embedding)
        rnn_state: torch.Tensor,  # (decoder_layers, batch, hidden)
        source: torch.Tensor,
        mask: torch.Tensor | None,
        projected_keys: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        _, first = self.rnn(embedding.unsqueeze(1), rnn_state)  # (decoder_layers, batch, hidden): s'
        context, weights = self._attend(first[-1], source, mask, projected_keys)
        output, top = self.rnn2(context.unsqueeze(1), first[-1:].contiguous())  # (batch, 1, hidden), (1, batch, hidden)
        return output, torch.cat([first[:-1], top], dim=0), weights


__all__ = ["BahdanauDecoder", "BahdanauDecoderState", "ConditionalGRUDecoder"]
