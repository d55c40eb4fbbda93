"""d2l's RNN encoder-decoder with Bahdanau attention as a `transformers` seq2seq model.

Encoder: embedding -> (bi)GRU/LSTM over the unpadded tokens -> outputs (the attention keys and values) and the
decoder's initial state (through a learned bridge when bidirectional). Decoder, at each step: the previous
top-layer state is the query, attention over the encoder outputs (padding masked) gives a context, and
`[context; embedding]` is the RNN input; a linear layer maps the RNN outputs to logits.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from transformers import GenerationMixin
from transformers import initialization as init
from transformers.modeling_outputs import BaseModelOutputWithPastAndCrossAttentions, ModelOutput

from .attention import AdditiveAttention, BilinearAttention, DotProductAttention, ScoredAttention
from .configuration_bahdanau import BahdanauConfig
from .linear import called_as_is, linear
from .modeling_translation import TranslationPreTrainedModel, check_beams_keep_their_source, check_source


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
        projected_keys: torch.Tensor,  # (batch / repeats, src_len, key_projection), once per source: see below
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
        """Keep, in place, the recurrent rows that beam search chose (`beam_idx` indexes the flattened batch).

        The projected keys (and the encoder outputs, which `generate` keeps as they are) hold the source of each
        row, or one copy for the consecutive rows of a sentence's beams; beam search moves rows only among the beams
        of one sentence, so the keys stay as they are. With one copy per sentence, a reorder across sentences is
        refused.
        """
        repeats = self.hidden.shape[1] // self.projected_keys.shape[0]
        if repeats > 1:
            check_beams_keep_their_source(beam_idx, repeats)
        self.hidden = self.hidden.index_select(1, beam_idx.to(self.hidden.device))
        if self.cell is not None:
            self.cell = self.cell.index_select(1, beam_idx.to(self.cell.device))


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
        if bool(attention_mask.all()):
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
        outputs, final = self._run_rnn(embeddings, mask)  # (batch, src_len, encoder_output_size)
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


class TokenGateTable:
    """Every token's share of the decoder RNN's first-layer input gates, `W_e e + b_ih` for each embedding `e`:
    `(vocab, gates)`, so that decoding looks a token's gates up instead of multiplying its embedding at every step.

    The table costs as much as `vocab` rows of those products, so it is made only once the decoder has read as
    many rows under the same weights (paid back within twice the products' cost), and made again when they change
    (their storage or version counter moves, as `load_state_dict`, `.to()` or a plain optimizer step makes it
    move). torch's fused optimizers keep the counter: the decoder forgets the table whenever a forward builds a
    graph on its weights (which any optimizer step needs first). `.data` writes keep it too: they are seen when the
    decoder next switches between training and evaluation, which also forgets the table.
    """

    def __init__(self) -> None:
        self.weights_key: tuple[tuple[int, int], ...] | None = None
        self.rows_read = 0
        self.table: torch.Tensor | None = None  # (vocab, gates)

    def __call__(
        self, input_ids: torch.LongTensor, embedding: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor
    ) -> torch.Tensor | None:
        """The gates of `input_ids` `(..., gates)`, or None while the table would not yet pay (or for weights made
        under `torch.inference_mode`, which keep no version counter)."""
        if embedding.is_inference() or weight.is_inference() or bias.is_inference():
            return None
        key = tuple((tensor.data_ptr(), tensor._version) for tensor in (embedding, weight, bias))
        if key != self.weights_key:
            self.weights_key, self.rows_read, self.table = key, 0, None
        table = self.table
        if table is None and self.rows_read >= embedding.shape[0]:
            with torch.autocast(embedding.device.type, enabled=False):  # in the weights' dtype, whatever the call's
                table = self.table = nn.functional.linear(embedding, weight, bias)
        self.rows_read += input_ids.numel()
        return None if table is None else nn.functional.embedding(input_ids, table)


class BahdanauDecoder(nn.Module):
    """d2l's `Seq2SeqAttentionDecoder`: one RNN step per target token, attending with the previous state.

    On CPU the RNN runs a cell per layer and step (`torch.gru_cell` / `torch.lstm_cell` on `self.rnn`'s weights,
    the same maths as `self.rnn`), its first layer's input gates split as `W_c context + (W_e embedding + b_ih)`:
    the embeddings' share takes one product for all steps, or a table lookup when decoding (`TokenGateTable`).
    Elsewhere (CUDA's fused cells take one bias per gate, not per row), and for an RNN that is not a plain
    `nn.GRU` / `nn.LSTM` called as it is (int8 from `quantize_for_cpu`, hooks, offloading), `self.rnn` is called
    on `[context; embedding]`.
    """

    def __init__(self, config: BahdanauConfig) -> None:
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.embedding_size)
        self.dropout = nn.Dropout(config.embedding_dropout)
        self.attention = _attention(config)
        self.rnn = _rnn(config, config.encoder_output_size + config.embedding_size, config.decoder_layers)
        self.token_gate_table = TokenGateTable()

    def train(self, mode: bool = True) -> BahdanauDecoder:
        """Sets the mode and forgets the token gate table (see `TokenGateTable`)."""
        self.token_gate_table = TokenGateTable()
        return super().train(mode)

    def initial_state(self, encoder_outputs: BahdanauEncoderOutput, source_repeats: int = 1) -> BahdanauDecoderState:
        """The state before the first target token; projects the attention keys once per source (one copy for
        the `source_repeats` rows that repeat it)."""
        cell = encoder_outputs.decoder_initial_cell
        return BahdanauDecoderState(
            hidden=encoder_outputs.decoder_initial_hidden.transpose(0, 1).contiguous(),
            cell=None if cell is None else cell.transpose(0, 1).contiguous(),
            projected_keys=self.attention.project_keys(encoder_outputs.last_hidden_state[::source_repeats]),
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
        source_repeats: int = 1,
    ) -> BaseModelOutputWithPastAndCrossAttentions:
        """RNN outputs `(batch, tgt_len, hidden)`, the new state and, if asked, the embeddings and outputs as
        hidden states and the attention weights `(batch, 1, tgt_len, src_len)` as cross-attentions.

        `source_repeats`: each source row is repeated this many times in a row (by `generate`, for the beams or
        returned sequences of a sentence); their queries attend to one copy, as several queries of one sentence.
        Read when the state is made (no `cache`); later steps take it from the state.
        """
        if cache is None:
            cache = self.initial_state(encoder_outputs, source_repeats)
        state, (batch, length), sources = cache, input_ids.shape, cache.projected_keys.shape[0]
        if batch % sources:
            raise ValueError(
                f"{batch} decoder rows do not fit a state made for {sources} sources: each source serves the same "
                "number of consecutive rows"
            )
        repeats = batch // sources  # as when the state was made
        source = encoder_outputs.last_hidden_state[::repeats]  # (batch / repeats, src_len, encoder_output_size)
        if encoder_attention_mask is not None:
            encoder_attention_mask = encoder_attention_mask[::repeats]
        embeddings = self.dropout(self.embed_tokens(input_ids))  # (batch, tgt_len, embedding)
        token_gates = context_weight = None
        if self._runs_cells(embeddings):
            token_gates = self._token_gates(input_ids, embeddings)
            # sliced once per call, so that the steps' gradients meet before the slice's backward
            context_weight = self.rnn.weight_ih_l0[:, : self.config.encoder_output_size]  # (gates, encoder_output)
        hidden = list(state.hidden.unbind(0))  # per layer (batch, hidden)
        cell = None if state.cell is None else list(state.cell.unbind(0))
        outputs, weights = [], []
        for step in range(length):
            context = self.attention(
                hidden[-1].view(batch // repeats, repeats, -1),  # the previous top-layer states, by source
                source,
                source,
                encoder_attention_mask,
                projected_keys=state.projected_keys,
            ).view(batch, -1)  # (batch, encoder_output_size)
            if token_gates is None:
                self._module_step(torch.cat([context, embeddings[:, step]], dim=-1), hidden, cell)
            else:
                self._cell_step(context, context_weight, token_gates[step], hidden, cell)
            outputs.append(hidden[-1])
            if output_attentions:
                weights.append(self.attention.attention_weights.view(batch, 1, -1))
        output = self.dropout(torch.stack(outputs, dim=1))  # (batch, tgt_len, hidden)
        return BaseModelOutputWithPastAndCrossAttentions(
            last_hidden_state=output,
            cache=BahdanauDecoderState(
                torch.stack(hidden),
                None if cell is None else torch.stack(cell),
                state.projected_keys,
                state.steps + length,
            ),
            hidden_states=(embeddings, output) if output_hidden_states else None,
            cross_attentions=(torch.cat(weights, dim=1).unsqueeze(1),) if output_attentions else None,
        )

    def _runs_cells(self, embeddings: torch.Tensor) -> bool:
        """Whether the RNN runs as cells on its weights (see the class's text)."""
        rnn_class = type(self.rnn)
        return rnn_class in (nn.GRU, nn.LSTM) and called_as_is(self.rnn, rnn_class) and embeddings.is_cpu

    def _token_gates(self, input_ids: torch.LongTensor, embeddings: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Per step `(batch, gates)`: the embeddings' share of the first layer's input gates, looked up when
        decoding with embeddings read as they are (`TokenGateTable`)."""
        weight = self.rnn.weight_ih_l0[:, self.config.encoder_output_size :]  # (gates, embedding)
        gates = None
        embed = self.embed_tokens
        if torch.is_grad_enabled() and any(t.requires_grad for t in (weight, self.rnn.bias_ih_l0, embed.weight)):
            self.token_gate_table = TokenGateTable()  # an optimizer step may follow, unseen by the version counter
        elif not self.training and called_as_is(embed, nn.Embedding) and embed.max_norm is None:
            gates = self.token_gate_table(input_ids, embed.weight, weight, self.rnn.bias_ih_l0)
        if gates is None:
            gates = nn.functional.linear(embeddings, weight, self.rnn.bias_ih_l0)  # (batch, tgt_len, gates)
        return gates.unbind(1)

    def _cell_step(
        self,
        context: torch.Tensor,  # (batch, encoder_output_size)
        context_weight: torch.Tensor,  # (gates, encoder_output_size)
        token_gates: torch.Tensor,  # (batch, gates)
        hidden: list[torch.Tensor],  # per layer (batch, hidden), updated in place
        cell: list[torch.Tensor] | None,  # per layer (batch, hidden) for an LSTM, updated in place
    ) -> None:
        """One step of every layer; the first layer's input gates are `context_weight context + token_gates`."""
        rnn = self.rnn
        inputs, weight_ih, bias_ih = context, context_weight, token_gates
        for layer in range(rnn.num_layers):
            if layer:  # as nn.GRU / nn.LSTM: dropout on the outputs that feed the next layer
                inputs = nn.functional.dropout(hidden[layer - 1], rnn.dropout, rnn.training)
                weight_ih, bias_ih = getattr(rnn, f"weight_ih_l{layer}"), getattr(rnn, f"bias_ih_l{layer}")
            recurrent = getattr(rnn, f"weight_hh_l{layer}"), getattr(rnn, f"bias_hh_l{layer}")
            if cell is None:
                hidden[layer] = torch.gru_cell(inputs, hidden[layer], weight_ih, recurrent[0], bias_ih, recurrent[1])
            else:
                state = (hidden[layer], cell[layer])
                hidden[layer], cell[layer] = torch.lstm_cell(
                    inputs, state, weight_ih, recurrent[0], bias_ih, recurrent[1]
                )

    def _module_step(self, inputs: torch.Tensor, hidden: list[torch.Tensor], cell: list[torch.Tensor] | None) -> None:
        """One step of `self.rnn` as a module on `inputs` `(batch, input)`, updating the per-layer states."""
        state = torch.stack(hidden) if cell is None else (torch.stack(hidden), torch.stack(cell))
        _, state = self.rnn(inputs.unsqueeze(1), state)
        hidden[:] = (state if cell is None else state[0]).unbind(0)
        if cell is not None:
            cell[:] = state[1].unbind(0)


class BahdanauPreTrainedModel(TranslationPreTrainedModel):
    config: BahdanauConfig
    config_class = BahdanauConfig
    base_model_prefix = "bahdanau"
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


class BahdanauForConditionalGeneration(BahdanauPreTrainedModel, GenerationMixin):  # listed: see can_generate
    """The Bahdanau attention seq2seq with a language-model head, ready for `generate()`."""

    def __init__(self, config: BahdanauConfig) -> None:
        super().__init__(config)
        self.encoder = BahdanauEncoder(config)
        self.decoder = BahdanauDecoder(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size)
        self.post_init()

    def _decode(
        self,
        decoder_input_ids: torch.LongTensor,  # (batch, tgt_len)
        encoder_outputs: BahdanauEncoderOutput,
        source_mask: torch.Tensor | None,  # (batch, src_len), bool; None: no padding
        cache: BahdanauDecoderState | None,
        with_logits: bool = True,
        **options: bool,
    ) -> tuple[BaseModelOutputWithPastAndCrossAttentions, torch.Tensor | None]:
        """As the base class's; scheduled sampling reads each step's logits, so it returns them in any case."""
        if self.training and self.config.teacher_forcing_ratio < 1.0:
            return self._decode_with_scheduled_sampling(
                decoder_input_ids, encoder_outputs, source_mask, cache, **options
            )
        return super()._decode(decoder_input_ids, encoder_outputs, source_mask, cache, with_logits, **options)

    def _decode_with_scheduled_sampling(
        self,
        decoder_input_ids: torch.LongTensor,  # (batch, tgt_len)
        encoder_outputs: BahdanauEncoderOutput,
        source_mask: torch.Tensor | None,  # (batch, src_len); None: no padding
        state: BahdanauDecoderState | None,
        **options: bool,
    ) -> tuple[BaseModelOutputWithPastAndCrossAttentions, torch.Tensor]:
        """Scheduled sampling: after the first step, each sequence is fed its gold previous token with probability
        `teacher_forcing_ratio`, else the model's own greedy prediction."""
        steps, logits = [], []
        step_input = decoder_input_ids[:, :1]  # (batch, 1)
        for step in range(decoder_input_ids.shape[1]):
            steps.append(self.decoder(step_input, encoder_outputs, source_mask, state, **options))
            state = steps[-1].cache
            logits.append(linear(self.lm_head, steps[-1].last_hidden_state))  # (batch, 1, vocab)
            if step + 1 < decoder_input_ids.shape[1]:
                gold = decoder_input_ids[:, step + 1 : step + 2]
                use_gold = torch.rand(gold.shape, device=gold.device) < self.config.teacher_forcing_ratio
                step_input = torch.where(use_gold, gold, logits[-1].argmax(-1))

        def joined(name: str, dim: int) -> tuple[torch.Tensor, ...] | None:
            parts = [getattr(output, name) for output in steps]
            return None if parts[0] is None else tuple(torch.cat(p, dim) for p in zip(*parts, strict=True))

        outputs = BaseModelOutputWithPastAndCrossAttentions(
            last_hidden_state=torch.cat([output.last_hidden_state for output in steps], dim=1),
            cache=state,
            hidden_states=joined("hidden_states", 1),
            cross_attentions=joined("cross_attentions", 2),
        )
        return outputs, torch.cat(logits, dim=1)


__all__ = [
    "BahdanauDecoderState",
    "BahdanauEncoderOutput",
    "BahdanauForConditionalGeneration",
    "BahdanauPreTrainedModel",
]
