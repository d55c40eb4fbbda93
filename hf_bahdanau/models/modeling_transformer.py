"""d2l's Transformer encoder-decoder as a `transformers` seq2seq model (model type `d2l_transformer`).

Encoder: embedding (x sqrt(d_model)) + sinusoidal positions -> blocks of [self-attention, AddNorm, position-wise
FFN, AddNorm]. Decoder: the same with causal self-attention and encoder-decoder attention between them; a linear
layer maps its outputs to logits. Positions count from each sentence's first real token, so left padding does
not shift a sentence. `TransformerModel` is the encoder-decoder; `TransformerForConditionalGeneration` adds the
head. Generation caches the decoder's self-attention keys/values (growing by one step each call)
and the cross-attention keys/values (projected at the first step) in transformers' `EncoderDecoderCache` as Marian
does (`update`, `get_seq_length`, and a cross-attention layer's `keys`/`values` read back), which every
transformers 5 release has, so that a saved folder runs on all of them.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn
from transformers import GenerationMixin
from transformers import initialization as init
from transformers.activations import ACT2FN
from transformers.cache_utils import DynamicCache, EncoderDecoderCache
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import BaseModelOutput, BaseModelOutputWithPastAndCrossAttentions
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

# A direct import of every sibling file the modules below import: transformers 5.8 and 5.9 copy only a remote-code
# module's direct relative imports into their modules cache.
from .attention import MultiHeadAttention, PositionalEncoding
from .cache_names import with_cache
from .configuration_transformer import TransformerConfig
from .configuration_translation import TranslationConfig  # noqa: F401
from .input_checks import check_source
from .modeling_translation import TranslationForConditionalGeneration, TranslationModel
from .pretrained_model import TranslationPreTrainedModel

Attended = tuple[torch.Tensor, torch.Tensor | None]  # (output, attention weights or None)


class PositionWiseFFN(nn.Module):
    """d2l's `PositionWiseFFN`: the same two-layer MLP at every position."""

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.dense1 = nn.Linear(config.d_model, config.ffn_dim)
        self.activation = ACT2FN[config.activation_function]
        self.dense2 = nn.Linear(config.ffn_dim, config.d_model)

    def forward(self, X: torch.Tensor) -> Attended:
        return self.dense2(self.activation(self.dense1(X))), None  # (batch, length, d_model)


class AddNorm(nn.Module):
    """d2l's `AddNorm` around a sub-layer: `norm(x + dropout(sublayer(x)))`, or `x + dropout(sublayer(norm(x)))`."""

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.dropout = nn.Dropout(config.dropout)
        self.norm = nn.LayerNorm(config.d_model)
        self.norm_first = config.norm_first

    def forward(self, X: torch.Tensor, sublayer: Callable[[torch.Tensor], Attended]) -> Attended:
        if self.norm_first:
            Y, weights = sublayer(self.norm(X))
            return X + self.dropout(Y), weights
        Y, weights = sublayer(X)
        return self.norm(X + self.dropout(Y)), weights


def attention_implementation(config: TransformerConfig) -> str | Callable[..., Attended]:
    """`config._attn_implementation` as `MultiHeadAttention` takes it: `"eager"` (d2l's masked softmax) and `"sdpa"`
    (torch's fused kernel) are its own; any other name is transformers' attention function registered under it
    (`transformers.AttentionInterface.register`)."""
    name = config._attn_implementation or "eager"
    return name if name in ("eager", "sdpa") else ALL_ATTENTION_FUNCTIONS[name]


def _attention(config: TransformerConfig) -> MultiHeadAttention:
    d = config.d_model
    return MultiHeadAttention(d, d, d, d, config.attention_heads, config.attention_dropout, config.attention_bias)


class TransformerEncoderLayer(GradientCheckpointingLayer):
    """d2l's `TransformerEncoderBlock`: self-attention and FFN, each inside an AddNorm. With gradient checkpointing
    on (`model.activation_checkpointing_enable()`), training recomputes it in the backward pass."""

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.config = config
        self.self_attn = _attention(config)
        self.self_attn_norm = AddNorm(config)
        self.ffn = PositionWiseFFN(config)
        self.ffn_norm = AddNorm(config)

    def forward(self, X: torch.Tensor, mask: torch.Tensor | None, need_weights: bool) -> Attended:
        """`X` `(batch, src_len, d_model)`, `mask` `(batch, src_len)` (None: no padding) -> the same shape, and the
        weights `(batch, heads, src_len, src_len)`."""
        implementation = attention_implementation(self.config)
        X, weights = self.self_attn_norm(
            X, lambda H: self.self_attn(H, H, H, mask, need_weights=need_weights, implementation=implementation)
        )
        return self.ffn_norm(X, self.ffn)[0], weights


class TransformerDecoderLayer(GradientCheckpointingLayer):
    """d2l's `TransformerDecoderBlock`: causal self-attention, encoder-decoder attention and FFN, each in an AddNorm.
    With gradient checkpointing on, training recomputes it in the backward pass, without a cache (`cache=None`)."""

    def __init__(self, config: TransformerConfig, layer_idx: int) -> None:
        super().__init__()
        self.config, self.layer_idx = config, layer_idx
        self.self_attn = _attention(config)
        self.self_attn_norm = AddNorm(config)
        self.cross_attn = _attention(config)
        self.cross_attn_norm = AddNorm(config)
        self.ffn = PositionWiseFFN(config)
        self.ffn_norm = AddNorm(config)

    def _self_key_values(self, H: torch.Tensor, cache: EncoderDecoderCache | None) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys/values of the new tokens, appended to the cached ones: `(batch, heads, past + tgt_len, head_size)`."""
        key_values = self.self_attn.project_keys_values(H, H)
        return key_values if cache is None else cache.self_attention_cache.update(*key_values, self.layer_idx)

    def _source_key_values(
        self, source: torch.Tensor, cache: EncoderDecoderCache | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys/values of the encoder outputs `(batch, src_len, d_model)`: `(batch, heads, src_len, head_size)`,
        projected at the first step into the cache's cross-attention part, whose layer later steps read them from
        (as Marian's cross-attention does)."""
        cross = None if cache is None else cache.cross_attention_cache
        if cross is not None and cross.get_seq_length(self.layer_idx) > 0:
            layer = cross.layers[self.layer_idx]
            return layer.keys, layer.values
        key_values = self.cross_attn.project_keys_values(source, source)
        return key_values if cross is None else cross.update(*key_values, self.layer_idx)

    def forward(
        self,
        X: torch.Tensor,  # (batch, tgt_len, d_model)
        causal_mask: torch.Tensor | None,  # (batch, tgt_len, past + tgt_len), bool; None: see is_causal
        source: torch.Tensor,  # (batch, src_len, d_model)
        source_mask: torch.Tensor | None,  # (batch, src_len), bool; None: no padding
        cache: EncoderDecoderCache | None,
        need_weights: bool,
        is_causal: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """Outputs `(batch, tgt_len, d_model)`, self- and cross-attention weights `(batch, heads, tgt_len, keys)`.

        Without `causal_mask`, every query sees every key (one new token), or with `is_causal` the keys up to it."""
        options = dict(need_weights=need_weights, implementation=attention_implementation(self.config))
        X, self_weights = self.self_attn_norm(
            X,
            lambda H: self.self_attn(
                H, valid_lens=causal_mask, key_values=self._self_key_values(H, cache), is_causal=is_causal, **options
            ),
        )
        X, cross_weights = self.cross_attn_norm(
            X,
            lambda H: self.cross_attn(
                H,
                valid_lens=source_mask,
                key_values=self._source_key_values(source, cache),
                **options,
            ),
        )
        return self.ffn_norm(X, self.ffn)[0], self_weights, cross_weights


class TransformerStack(nn.Module):
    """What encoder and decoder share: scaled token embeddings plus positions, a stack of layers, a final norm
    (pre-norm only)."""

    def __init__(self, config: TransformerConfig, layers: list[nn.Module]) -> None:
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.d_model)
        self.embed_scale = math.sqrt(config.d_model) if config.scale_embedding else 1.0
        self.positions = PositionalEncoding(config.d_model, config.dropout, config.max_position_embeddings)
        self.layers = nn.ModuleList(layers)
        self.final_norm = nn.LayerNorm(config.d_model) if config.norm_first else nn.Identity()

    def embed(
        self,
        input_ids: torch.LongTensor | None,
        what: str,
        positions: torch.Tensor | None = None,
        offset: int = 0,
        inputs_embeds: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Scaled embeddings of `input_ids` (or `inputs_embeds`, as `embed_tokens` gives them) plus the encoding of
        `positions` `(batch, length)` (default: `offset`, `offset + 1`, ...): `(batch, length, d_model)`. A sequence
        longer than the position table is a ValueError (a shape check: `positions`, counted from each row's first
        real token, stay below `offset + length`)."""
        embeddings = self.embed_tokens(input_ids) if inputs_embeds is None else inputs_embeds
        longest = offset + embeddings.shape[1]
        limit = self.config.max_position_embeddings
        if longest > limit:
            raise ValueError(
                f"the {what} reaches {longest} tokens but the model's max_position_embeddings is {limit}: "
                "truncate it (the pipeline and the command line do)"
            )
        return self.positions(embeddings * self.embed_scale, positions, offset)


class TransformerEncoder(TransformerStack):
    """d2l's `TransformerEncoder`."""

    main_input_name = "input_ids"
    output_class = BaseModelOutput

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__(config, [TransformerEncoderLayer(config) for _ in range(config.encoder_layers)])

    def forward(
        self,
        input_ids: torch.LongTensor | None,
        attention_mask: torch.Tensor | None = None,
        output_attentions: bool = False,
        output_hidden_states: bool = False,
        return_dict: bool = True,
        inputs_embeds: torch.Tensor | None = None,
    ) -> BaseModelOutput:
        """`input_ids` `(batch, src_len)` (or their embeddings `inputs_embeds` `(batch, src_len, d_model)`),
        `attention_mask` `(batch, src_len)` (1 = token, 0 = padding)."""
        mask = check_source(input_ids.shape if inputs_embeds is None else inputs_embeds.shape[:2], attention_mask)
        if mask is None:  # no padding: positions 0, 1, ...
            positions = None
        else:
            positions = (mask.cumsum(-1) - 1).clamp(min=0)  # (batch, src_len), 0 at the first real token
        X = self.embed(input_ids, "source", positions, inputs_embeds=inputs_embeds)  # (batch, src_len, d_model)
        hidden_states, attentions = [X], []
        for layer in self.layers:
            X, weights = layer(X, mask, need_weights=output_attentions)
            hidden_states.append(X)
            attentions.append(weights)
        X = self.final_norm(X)
        return BaseModelOutput(
            last_hidden_state=X,
            hidden_states=(*hidden_states[:-1], X) if output_hidden_states else None,
            attentions=tuple(attentions) if output_attentions else None,
        )


class TransformerDecoder(TransformerStack):
    """d2l's `TransformerDecoder` (without the output layer, which is the model's `lm_head`)."""

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__(config, [TransformerDecoderLayer(config, i) for i in range(config.decoder_layers)])

    def forward(
        self,
        input_ids: torch.LongTensor | None,  # (batch, tgt_len)
        encoder_outputs: BaseModelOutput,
        encoder_attention_mask: torch.Tensor | None,  # (batch, src_len), bool; None: no padding
        cache: EncoderDecoderCache | None = None,
        use_cache: bool = True,
        output_attentions: bool = False,
        output_hidden_states: bool = False,
        attention_mask: torch.Tensor | None = None,  # (batch, past + tgt_len); None: no padding
        inputs_embeds: torch.Tensor | None = None,  # (batch, tgt_len, d_model), instead of input_ids
    ) -> BaseModelOutputWithPastAndCrossAttentions:
        """Outputs `(batch, tgt_len, d_model)` for the tokens after those already in `cache`. With `attention_mask`,
        no token attends to padding and positions count from the first real token (as in the encoder)."""
        if use_cache and cache is None:
            cache = EncoderDecoderCache(DynamicCache(config=self.config), DynamicCache(config=self.config))
        past = cache.get_seq_length() if cache is not None else 0
        batch, length = (input_ids if inputs_embeds is None else inputs_embeds).shape[:2]
        device = (input_ids if inputs_embeds is None else inputs_embeds).device
        # One new token sees every key (no mask); several from the start are causal (fused in sdpa); several after
        # cached ones, or a padded target, need the mask written out.
        causal_mask = positions = None
        if attention_mask is not None or (length > 1 and past):
            query_positions = torch.arange(past, past + length, device=device)  # (tgt_len,)
            key_positions = torch.arange(past + length, device=device)  # (past + tgt_len,)
            causal_mask = (key_positions[None, :] <= query_positions[:, None]).expand(batch, -1, -1)
        if attention_mask is not None:
            if attention_mask.shape != (batch, past + length):
                raise ValueError(
                    f"decoder_attention_mask has shape {tuple(attention_mask.shape)}, not (batch, past + tgt_len) = "
                    f"{(batch, past + length)}"
                )
            tokens = attention_mask.bool()  # (batch, past + tgt_len)
            itself = key_positions[None, None, :] == query_positions[None, :, None]  # a padding query sees itself
            causal_mask = causal_mask & (tokens[:, None, :] | itself)  # (batch, tgt_len, past + tgt_len)
            positions = (tokens.cumsum(-1) - 1).clamp(min=0)[:, past:]  # (batch, tgt_len)
        X = self.embed(input_ids, "target", positions, offset=past, inputs_embeds=inputs_embeds)  # (batch, tgt_len, d)
        source = encoder_outputs.last_hidden_state  # (batch, src_len, d_model)
        hidden_states, self_attentions, cross_attentions = [X], [], []
        for layer in self.layers:
            X, self_weights, cross_weights = layer(
                X,
                causal_mask,
                source,
                encoder_attention_mask,
                cache=cache,  # a keyword: gradient checkpointing drops it (a replay would append twice)
                need_weights=output_attentions,
                is_causal=causal_mask is None and length > 1,
            )
            hidden_states.append(X)
            self_attentions.append(self_weights)
            cross_attentions.append(cross_weights)
        X = self.final_norm(X)
        return with_cache(
            BaseModelOutputWithPastAndCrossAttentions,
            cache,
            last_hidden_state=X,
            hidden_states=(*hidden_states[:-1], X) if output_hidden_states else None,
            attentions=tuple(self_attentions) if output_attentions else None,
            cross_attentions=tuple(cross_attentions) if output_attentions else None,
        )


class TransformerPreTrainedModel(TranslationPreTrainedModel):
    config: TransformerConfig
    config_class = TransformerConfig
    _supports_sdpa = True
    supports_gradient_checkpointing = True  # the encoder and decoder layers are GradientCheckpointingLayers

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        """Xavier linear weights with zero biases (d2l's `xavier_init_weights`), N(0, init_std) embeddings, unit
        layer norms, and the sinusoidal table (a non-persistent buffer, recomputed after loading)."""
        if isinstance(module, nn.Linear):
            init.xavier_uniform_(module.weight)
            if module.bias is not None:
                init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            init.normal_(module.weight, mean=0.0, std=self.config.init_std)
        elif isinstance(module, nn.LayerNorm):
            init.ones_(module.weight)
            init.zeros_(module.bias)
        elif isinstance(module, PositionalEncoding):
            init.copy_(module.P, PositionalEncoding.table(*module.P.shape[1:]))


class TransformerModel(TransformerPreTrainedModel, TranslationModel):
    """The bare d2l Transformer encoder-decoder: the decoder's outputs for the target tokens, no head."""

    def __init__(self, config: TransformerConfig, initialize: bool = True) -> None:
        super().__init__(config, initialize)
        self.encoder = TransformerEncoder(config)
        self.decoder = TransformerDecoder(config)
        self.share_embeddings()
        self.post_init()


class TransformerForConditionalGeneration(
    TransformerPreTrainedModel, TranslationForConditionalGeneration, GenerationMixin
):  # GenerationMixin listed: see can_generate
    """d2l's Transformer: `TransformerModel` (under `model`) with a language-model head, ready for `generate()`."""

    base_model_class = TransformerModel


__all__ = ["TransformerForConditionalGeneration", "TransformerModel", "TransformerPreTrainedModel"]
