"""d2l's RNN encoder-decoder with Bahdanau attention as a `transformers` seq2seq model.

Encoder: embedding -> (bi)GRU/LSTM over the unpadded tokens -> outputs (the attention keys and values) and the
decoder's initial state (through a learned bridge when bidirectional). Decoder, at each step: the previous
top-layer state is the query, attention over the encoder outputs (padding masked) gives a context, and
`[context; embedding]` is the RNN input; a linear layer maps the RNN outputs to logits.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch
from safetensors import SafetensorError
from torch import nn
from transformers import GenerationMixin, PreTrainedModel
from transformers import initialization as init
from transformers.modeling_outputs import ModelOutput, Seq2SeqLMOutput

from .attention import AdditiveAttention, BilinearAttention, DotProductAttention, ScoredAttention
from .configuration_bahdanau import BahdanauConfig


def shift_tokens_right(labels: torch.Tensor, pad_token_id: int, decoder_start_token_id: int) -> torch.Tensor:
    """Decoder inputs from labels: prepend the start token, drop the last label, replace -100 by padding."""
    shifted = labels.new_full(labels.shape, pad_token_id)
    shifted[:, 1:] = labels[:, :-1]
    shifted[:, 0] = decoder_start_token_id
    return shifted.masked_fill(shifted == -100, pad_token_id)


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
    """The decoder's recurrent state, carried between generation steps as `past_key_values`.

    `generate` calls `reorder_cache` after each beam-search step, so the state follows its beams.
    """

    def __init__(
        self,
        hidden: torch.Tensor,  # (decoder_layers, batch, hidden)
        cell: torch.Tensor | None,  # (decoder_layers, batch, hidden) for an LSTM
        projected_keys: torch.Tensor,  # (batch, src_len, key_projection), computed once per source
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

        Beam search only moves rows among the beams of one sentence, whose projected keys are identical copies,
        so the keys stay where they are (copying them at every step cost ~7% of beam-search time).
        """
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
        mask = _check_source(input_ids, attention_mask, self.config.vocab_size)
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


def _check_source(input_ids: torch.Tensor, attention_mask: torch.Tensor | None, vocab_size: int) -> torch.Tensor:
    """Validate the source batch; return the mask as booleans `(batch, src_len)`."""
    if input_ids.dim() != 2 or input_ids.numel() == 0:
        raise ValueError(f"input_ids must be a non-empty (batch, src_len) tensor, got shape {tuple(input_ids.shape)}")
    _check_ids("input_ids", input_ids, vocab_size)
    if attention_mask is None:
        return torch.ones_like(input_ids, dtype=torch.bool)
    if attention_mask.shape != input_ids.shape:
        raise ValueError(
            f"attention_mask has shape {tuple(attention_mask.shape)} but input_ids has shape {tuple(input_ids.shape)}"
        )
    mask = attention_mask.bool()
    empty = (~mask.any(1)).nonzero().flatten()
    if empty.numel():
        raise ValueError(f"source sequence(s) {empty.tolist()} have no token: attention_mask is all zeros there")
    return mask


def _check_ids(name: str, ids: torch.Tensor, vocab_size: int) -> None:
    if not ids.numel():
        return
    low, high = (int(value) for value in torch.aminmax(ids))  # one device sync
    if low < 0 or high >= vocab_size:
        raise ValueError(
            f"{name} holds ids in [{low}, {high}], outside the vocabulary [0, {vocab_size}): "
            "does the tokenizer match the model's config?"
        )


class BahdanauDecoder(nn.Module):
    """d2l's `Seq2SeqAttentionDecoder`: one RNN step per target token, attending with the previous state."""

    def __init__(self, config: BahdanauConfig) -> None:
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.embedding_size)
        self.dropout = nn.Dropout(config.embedding_dropout)
        self.attention = _attention(config)
        self.rnn = _rnn(config, config.encoder_output_size + config.embedding_size, config.decoder_layers)

    def initial_state(self, encoder_outputs: BahdanauEncoderOutput) -> BahdanauDecoderState:
        """The state before the first target token; projects the attention keys once per source."""
        cell = encoder_outputs.decoder_initial_cell
        return BahdanauDecoderState(
            hidden=encoder_outputs.decoder_initial_hidden.transpose(0, 1).contiguous(),
            cell=None if cell is None else cell.transpose(0, 1).contiguous(),
            projected_keys=self.attention.project_keys(encoder_outputs.last_hidden_state),
        )

    def forward(
        self,
        input_ids: torch.LongTensor,  # (batch, tgt_len)
        encoder_hidden_states: torch.Tensor,  # (batch, src_len, encoder_output_size)
        encoder_attention_mask: torch.Tensor,  # (batch, src_len), bool
        state: BahdanauDecoderState,
        output_attentions: bool = False,
    ) -> tuple[torch.Tensor, BahdanauDecoderState, torch.Tensor | None]:
        """RNN outputs `(batch, tgt_len, hidden)`, the new state and, if asked, weights `(batch, tgt_len, src_len)`."""
        embeddings = self.dropout(self.embed_tokens(input_ids))  # (batch, tgt_len, embedding)
        rnn_state = state.rnn_state
        outputs, weights = [], []
        for step in range(input_ids.shape[1]):
            top_hidden = (rnn_state if state.cell is None else rnn_state[0])[-1]  # (batch, hidden)
            context = self.attention(
                top_hidden.unsqueeze(1),
                encoder_hidden_states,
                encoder_hidden_states,
                encoder_attention_mask,
                projected_keys=state.projected_keys,
            )  # (batch, 1, encoder_output_size)
            rnn_input = torch.cat([context, embeddings[:, step : step + 1]], dim=-1)
            output, rnn_state = self.rnn(rnn_input, rnn_state)  # (batch, 1, hidden)
            outputs.append(output)
            if output_attentions:
                weights.append(self.attention.attention_weights)
        hidden, cell = rnn_state if state.cell is not None else (rnn_state, None)
        new_state = BahdanauDecoderState(hidden, cell, state.projected_keys, state.steps + input_ids.shape[1])
        attention = torch.cat(weights, dim=1) if output_attentions else None
        return self.dropout(torch.cat(outputs, dim=1)), new_state, attention


class BahdanauPreTrainedModel(PreTrainedModel):
    config: BahdanauConfig
    config_class = BahdanauConfig
    base_model_prefix = "bahdanau"
    main_input_name = "input_ids"
    supports_gradient_checkpointing = False

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


class BahdanauForConditionalGeneration(BahdanauPreTrainedModel, GenerationMixin):
    """The Bahdanau attention seq2seq with a language-model head, ready for `generate()`."""

    def __init__(self, config: BahdanauConfig) -> None:
        super().__init__(config)
        self.encoder = BahdanauEncoder(config)
        self.decoder = BahdanauDecoder(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size)
        self._tied_weights_keys = {"lm_head.weight": "decoder.embed_tokens.weight"}
        if config.tie_encoder_decoder_embeddings:
            self._tied_weights_keys["encoder.embed_tokens.weight"] = "decoder.embed_tokens.weight"
        self.post_init()
        # Translation defaults (the model config holds no generation settings in transformers 5).
        self.generation_config.max_new_tokens = 128
        self.generation_config.num_beams = 4

    @classmethod
    def from_pretrained(
        cls,
        pretrained_model_name_or_path: str | os.PathLike,
        *args: Any,
        **kwargs: Any,
    ) -> BahdanauForConditionalGeneration:
        """`PreTrainedModel.from_pretrained`, with a ValueError naming the problem for a checkpoint that does
        not fit its config (e.g. another vocabulary size) or that is corrupt."""
        try:
            return super().from_pretrained(pretrained_model_name_or_path, *args, **kwargs)
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

    def get_encoder(self) -> BahdanauEncoder:
        return self.encoder

    def get_input_embeddings(self) -> nn.Embedding:
        return self.decoder.embed_tokens

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.decoder.embed_tokens = value
        if self.config.tie_encoder_decoder_embeddings:
            self.encoder.embed_tokens = value

    def get_output_embeddings(self) -> nn.Linear:
        return self.lm_head

    def set_output_embeddings(self, new_embeddings: nn.Linear) -> None:
        self.lm_head = new_embeddings

    def resize_token_embeddings(
        self, new_num_tokens: int | None = None, pad_to_multiple_of: int | None = None, mean_resizing: bool = True
    ) -> nn.Embedding:
        """Resize the decoder (and untied encoder) embeddings and the output layer to a new vocabulary size."""
        embeddings = super().resize_token_embeddings(new_num_tokens, pad_to_multiple_of, mean_resizing)
        if not self.config.tie_encoder_decoder_embeddings:  # the base class only resizes the decoder's
            self.encoder.embed_tokens = self._get_resized_embeddings(
                self.encoder.embed_tokens, embeddings.num_embeddings, mean_resizing=mean_resizing
            )
        return embeddings

    def prepare_decoder_input_ids_from_labels(self, labels: torch.Tensor) -> torch.Tensor:
        return shift_tokens_right(labels, self.config.pad_token_id, self.config.decoder_start_token_id)

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        encoder_outputs: BahdanauEncoderOutput | tuple | None = None,
        past_key_values: BahdanauDecoderState | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        num_items_in_batch: int | torch.Tensor | None = None,
        **kwargs: Any,  # generation and Trainer extras
    ) -> Seq2SeqLMOutput:
        """Logits `(batch, tgt_len, vocab)`; `loss` when `labels` `(batch, tgt_len)` are given (-100 ignored).

        With `past_key_values` (the state returned by the previous call) only the new decoder tokens are read.
        `num_items_in_batch` (from the Trainer) makes the loss a sum divided by it, for gradient accumulation.
        """
        output_attentions = output_attentions if output_attentions is not None else self.config.output_attentions
        output_hidden_states = (
            output_hidden_states if output_hidden_states is not None else self.config.output_hidden_states
        )
        if labels is not None:
            use_cache = False
            if decoder_input_ids is None:
                decoder_input_ids = self.prepare_decoder_input_ids_from_labels(labels)
        use_cache = use_cache if use_cache is not None else self.config.use_cache
        if decoder_input_ids is None:
            raise ValueError("pass decoder_input_ids or labels")
        if past_key_values is None:  # later generation steps feed the model's own tokens: no need to check them
            _check_ids("decoder_input_ids", decoder_input_ids, self.config.vocab_size)

        if encoder_outputs is None:
            if input_ids is None:
                raise ValueError("pass input_ids or encoder_outputs")
            encoder_outputs = self.encoder(input_ids, attention_mask, output_hidden_states=output_hidden_states)
        elif not isinstance(encoder_outputs, BahdanauEncoderOutput):
            encoder_outputs = BahdanauEncoderOutput(*encoder_outputs)
        source = encoder_outputs.last_hidden_state  # (batch, src_len, encoder_output_size)
        source_mask = (
            attention_mask.bool() if attention_mask is not None else source.new_ones(source.shape[:2], dtype=torch.bool)
        )
        state = past_key_values if past_key_values is not None else self.decoder.initial_state(encoder_outputs)

        if self.training and self.config.teacher_forcing_ratio < 1.0:
            decoder_out, logits, state, weights = self._decode_with_scheduled_sampling(
                decoder_input_ids, source, source_mask, state, output_attentions
            )
        else:
            decoder_out, state, weights = self.decoder(
                decoder_input_ids, source, source_mask, state, output_attentions=output_attentions
            )
            logits = self.lm_head(decoder_out)  # (batch, tgt_len, vocab)

        loss = None
        if labels is not None:
            loss = self._loss(logits, labels, num_items_in_batch)
        return Seq2SeqLMOutput(
            loss=loss,
            logits=logits,
            past_key_values=state if use_cache else None,
            decoder_hidden_states=(decoder_out,) if output_hidden_states else None,
            cross_attentions=(weights.unsqueeze(1),) if output_attentions else None,  # (batch, 1, tgt, src)
            encoder_last_hidden_state=source,
            encoder_hidden_states=encoder_outputs.hidden_states,
        )

    def _decode_with_scheduled_sampling(
        self,
        decoder_input_ids: torch.LongTensor,  # (batch, tgt_len)
        source: torch.Tensor,  # (batch, src_len, encoder_output_size)
        source_mask: torch.Tensor,  # (batch, src_len)
        state: BahdanauDecoderState,
        output_attentions: bool,
    ) -> tuple[torch.Tensor, torch.Tensor, BahdanauDecoderState, torch.Tensor | None]:
        """Scheduled sampling: after the first step, each sequence is fed its gold previous token with probability
        `teacher_forcing_ratio`, else the model's own greedy prediction. Returns outputs, logits, state, weights."""
        outputs, logits, weights = [], [], []
        step_input = decoder_input_ids[:, :1]  # (batch, 1)
        for step in range(decoder_input_ids.shape[1]):
            output, state, step_weights = self.decoder(
                step_input, source, source_mask, state, output_attentions=output_attentions
            )
            outputs.append(output)
            logits.append(self.lm_head(output))  # (batch, 1, vocab)
            weights.append(step_weights)
            if step + 1 < decoder_input_ids.shape[1]:
                gold = decoder_input_ids[:, step + 1 : step + 2]
                use_gold = torch.rand(gold.shape, device=gold.device) < self.config.teacher_forcing_ratio
                step_input = torch.where(use_gold, gold, logits[-1].argmax(-1))
        attention = torch.cat(weights, dim=1) if output_attentions else None
        return torch.cat(outputs, dim=1), torch.cat(logits, dim=1), state, attention

    def _loss(
        self, logits: torch.Tensor, labels: torch.Tensor, num_items_in_batch: int | torch.Tensor | None
    ) -> torch.Tensor:
        """Token cross-entropy with label smoothing; mean over labelled tokens, or sum / `num_items_in_batch`."""
        reduction = "mean" if num_items_in_batch is None else "sum"
        loss = nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]).float(),
            labels.reshape(-1).to(logits.device),
            ignore_index=-100,
            label_smoothing=self.config.label_smoothing,
            reduction=reduction,
        )
        return loss if num_items_in_batch is None else loss / num_items_in_batch


__all__ = [
    "BahdanauDecoderState",
    "BahdanauEncoderOutput",
    "BahdanauForConditionalGeneration",
    "BahdanauPreTrainedModel",
]
