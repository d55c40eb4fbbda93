"""d2l's RNN encoder-decoder with Bahdanau attention as a `transformers` seq2seq model.

Encoder: embedding -> (bi)GRU/LSTM over the unpadded tokens -> outputs (the attention keys and values) and the
decoder's initial state (through a learned bridge when bidirectional). Decoder, at each step: the previous
top-layer state is the query, attention over the encoder outputs (padding masked) gives a context, and
`[context; embedding]` is the RNN input (`decoder_type="cgru"`: the conditional GRU of Nematus, attention between two
GRU transitions). `BahdanauModel` is the encoder-decoder; `BahdanauForConditionalGeneration`
adds a linear layer that maps the RNN outputs to logits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from transformers import GenerationMixin
from transformers import initialization as init
from transformers.modeling_outputs import BaseModelOutputWithPastAndCrossAttentions, ModelOutput, Seq2SeqModelOutput

from .attention import AdditiveAttention, BilinearAttention, DotProductAttention, ScoredAttention
from .configuration_bahdanau import BahdanauConfig

# A direct import of every sibling file the modules below import: transformers 5.8 and 5.9 copy only a remote-code
# module's direct relative imports into their modules cache.
from .configuration_translation import TranslationConfig  # noqa: F401
from .modeling_translation import (
    TranslationForConditionalGeneration,
    TranslationModel,
    TranslationPreTrainedModel,
    check_ids,
    check_source,
    returned_cache,
    with_cache,
)


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


def _rnn(config: BahdanauConfig, input_size: int, num_layers: int, bidirectional: bool = False) -> nn.RNNBase:
    rnn_class = nn.GRU if config.rnn_type == "gru" else nn.LSTM
    return rnn_class(
        input_size,
        config.hidden_size,
        num_layers,
        batch_first=True,
        dropout=config.dropout if num_layers > 1 else 0.0,
        bidirectional=bidirectional,
    )


def _attention(config: BahdanauConfig) -> ScoredAttention:
    keys, queries = config.encoder_output_size, config.hidden_size
    if config.attention_type == "additive":
        return AdditiveAttention(keys, queries, config.attention_hidden_size, config.dropout)
    if config.attention_type == "general":
        return BilinearAttention(keys, queries, config.dropout)
    return DotProductAttention(config.dropout)


class BahdanauEncoder(nn.Module):
    """Embedding and (bi)RNN; padding on either side is skipped, as if the sentence were alone."""

    main_input_name = "input_ids"
    output_class = BahdanauEncoderOutput

    def __init__(self, config: BahdanauConfig) -> None:
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.embedding_size)
        self.dropout = nn.Dropout(config.embedding_dropout)
        self.rnn = _rnn(config, config.embedding_size, config.encoder_layers, config.bidirectional_encoder)
        self.bridge = None
        if config.bidirectional_encoder:
            parts = 2 if config.rnn_type == "lstm" else 1  # an LSTM's state is [hidden; cell]
            self.bridge = nn.Linear(config.encoder_output_size * parts, config.hidden_size * parts)

    def _run_rnn(
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
        input_ids: torch.LongTensor,
        attention_mask: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
    ) -> BahdanauEncoderOutput:
        """`input_ids` `(batch, src_len)`, `attention_mask` `(batch, src_len)` (1 = token, 0 = padding)."""
        mask = check_source(input_ids, attention_mask, self.config.vocab_size)
        embeddings = self.dropout(self.embed_tokens(input_ids))  # (batch, src_len, embedding)
        outputs, final = self._run_rnn(
            embeddings, None if attention_mask is None else mask
        )  # (batch, src_len, encoder_output_size)
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


class BahdanauDecoder(nn.Module):
    """d2l's `Seq2SeqAttentionDecoder`: one RNN step per target token, attending with the previous state; the RNN
    (`self.rnn`, an `nn.GRU` / `nn.LSTM`) reads `[context; embedding]`."""

    def __init__(self, config: BahdanauConfig) -> None:
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.embedding_size)
        self.dropout = nn.Dropout(config.embedding_dropout)
        self.attention = _attention(config)
        self.rnn = _rnn(config, config.encoder_output_size + config.embedding_size, config.decoder_layers)

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
    ) -> BaseModelOutputWithPastAndCrossAttentions:
        """RNN outputs `(batch, tgt_len, hidden)`, the new state and, if asked, the embeddings and outputs as
        hidden states and the attention weights `(batch, 1, tgt_len, src_len)` as cross-attentions.

        A `cache` that is not a `BahdanauDecoderState` (an empty key/value cache that some transformers releases make
        for every model) counts as none: the state starts from the encoder's.
        """
        if not isinstance(cache, BahdanauDecoderState):
            cache = self.initial_state(encoder_outputs)
        state, (batch, length) = cache, input_ids.shape
        source = encoder_outputs.last_hidden_state  # (batch, src_len, encoder_output_size)
        embeddings = self.dropout(self.embed_tokens(input_ids))  # (batch, tgt_len, embedding)
        rnn_state = state.rnn_state  # (decoder_layers, batch, hidden), and the cell for an LSTM
        outputs, weights = [], []
        for step in range(length):
            output, rnn_state, step_weights = self._step(
                embeddings[:, step], rnn_state, source, encoder_attention_mask, state.projected_keys
            )  # output (batch, 1, hidden), step_weights (batch, 1, src_len)
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
        self.rnn = _rnn(config, config.embedding_size, config.decoder_layers)
        self.rnn2 = _rnn(config, config.encoder_output_size, 1)

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
        check_ids("decoder_input_ids", decoder_input_ids, self.config.vocab_size)  # each step sees one column
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
    "BahdanauDecoderState",
    "ConditionalGRUDecoder",
    "BahdanauEncoderOutput",
    "BahdanauForConditionalGeneration",
    "BahdanauModel",
    "BahdanauPreTrainedModel",
]
