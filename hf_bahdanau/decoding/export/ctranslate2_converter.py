"""The converter of a d2l Transformer to CTranslate2, on CTranslate2's own converter API: `D2LTransformerLoader`
maps our modules onto a `TransformerSpec` with the helpers of CTranslate2's `ModelLoader`, and
`D2LTransformerConverter` is a CTranslate2 `Converter`, which validates, quantizes and saves the spec
(`export.export_ctranslate2` writes the export folder around it). It needs torch and CTranslate2's converters.

What the mapping has to get right (checked by tests/test_export.py against our `generate()`):
- d2l's sinusoid table interleaves sin and cos (`P[i, 2j]`, `P[i, 2j + 1]`), CTranslate2's own puts all sines
  first: the spec gets our table, `max_position_embeddings` rows.
- Our decoder starts from the real embedding of `<s>` (the decoder start token) at position 0: no
  `start_from_zero_embedding`, and the vocabulary keeps every row (Marian's loader does neither).
- The embedding scale (sqrt(d_model), or 1 without `scale_embedding`) and the layer-norm epsilon are set
  explicitly; `lm_head.bias` is the output projection's bias; tied weights are stored once (CTranslate2 aliases
  equal variables).
- Our tokenizer appends `</s>` to the source itself: CTranslate2 gets token strings and adds nothing.
"""

from __future__ import annotations

from typing import Any

import torch
from ctranslate2.converters import Converter, utils
from ctranslate2.converters.transformers import ModelLoader
from ctranslate2.specs import common_spec, model_spec, transformer_spec

_ACTIVATIONS = {"relu": "RELU", "gelu": "GELU", "gelu_new": "GELUTanh", "silu": "SWISH", "swish": "SWISH"}


class D2LTransformerLoader(ModelLoader):
    """Maps a `TransformerForConditionalGeneration` and its tokenizer onto a CTranslate2 `TransformerSpec`."""

    @property
    def architecture_name(self) -> str:
        return "TransformerForConditionalGeneration"

    def get_model_spec(self, model: torch.nn.Module) -> Any:
        config = model.config
        activation = getattr(common_spec.Activation, _ACTIVATIONS[config.activation_function])
        spec = transformer_spec.TransformerSpec.from_config(
            (config.encoder_layers, config.decoder_layers),
            config.attention_heads,
            pre_norm=config.norm_first,
            activation=activation,
        )
        encoder, decoder = model.get_encoder(), model.get_decoder()
        self.set_stack(spec.encoder, encoder, spec.encoder.embeddings[0])
        self.set_stack(spec.decoder, decoder, spec.decoder.embeddings)
        for layer_spec, layer in zip(spec.encoder.layer, encoder.layers, strict=True):
            self.set_attention(layer_spec.self_attention, layer.self_attn, layer.self_attn_norm, self_attention=True)
            self.set_ffn(layer_spec.ffn, layer)
        for layer_spec, layer in zip(spec.decoder.layer, decoder.layers, strict=True):
            self.set_attention(layer_spec.self_attention, layer.self_attn, layer.self_attn_norm, self_attention=True)
            self.set_attention(layer_spec.attention, layer.cross_attn, layer.cross_attn_norm, self_attention=False)
            self.set_ffn(layer_spec.ffn, layer)
        self.set_linear(spec.decoder.projection, model.lm_head)
        if not model.lm_head.bias.any():  # an all-zero bias (as initialised) is no work to do at every step
            spec.decoder.projection.bias = model_spec.OPTIONAL
        return spec

    def set_stack(self, spec: Any, stack: torch.nn.Module, embeddings: Any) -> None:
        """Embeddings, their scale, our position table and (pre-norm) the final norm of an encoder or decoder."""
        self.set_embeddings(embeddings, stack.embed_tokens)
        spec.scale_embeddings = float(stack.embed_scale)  # 1.0 without scale_embedding: never CTranslate2's default
        spec.position_encodings.encodings = stack.positions.P[0, : stack.config.max_position_embeddings]
        if stack.config.norm_first:
            self.set_layer_norm(spec.layer_norm, stack.final_norm)

    def set_attention(
        self, spec: Any, attention: torch.nn.Module, add_norm: torch.nn.Module, self_attention: bool
    ) -> None:
        """Our W_q, W_k, W_v, W_o as CTranslate2's fused projections, and the AddNorm's norm."""
        split = [common_spec.LinearSpec() for _ in range(3)]
        for layer_spec, module in zip(split, (attention.W_q, attention.W_k, attention.W_v), strict=True):
            self.set_linear(layer_spec, module)
        if self_attention:
            utils.fuse_linear(spec.linear[0], split)
        else:
            utils.fuse_linear(spec.linear[0], split[:1])
            utils.fuse_linear(spec.linear[1], split[1:])
        self.set_linear(spec.linear[-1], attention.W_o)
        self.set_layer_norm(spec.layer_norm, add_norm.norm)

    def set_ffn(self, spec: Any, layer: torch.nn.Module) -> None:
        self.set_linear(spec.linear_0, layer.ffn.dense1)
        self.set_linear(spec.linear_1, layer.ffn.dense2)
        self.set_layer_norm(spec.layer_norm, layer.ffn_norm.norm)

    def get_vocabulary(self, model: torch.nn.Module, tokenizer: Any) -> list[str]:
        """One token string per embedding row; rows the tokenizer never produces get placeholder names."""
        tokens = tokenizer.convert_ids_to_tokens(list(range(model.config.vocab_size)))
        return [token if token is not None else f"<unused_{i}>" for i, token in enumerate(tokens)]

    def set_vocabulary(self, spec: Any, tokens: list[str]) -> None:
        spec.register_source_vocabulary(tokens)
        spec.register_target_vocabulary(tokens)

    def set_config(self, config: Any, model: torch.nn.Module, tokenizer: Any) -> None:
        ids = model.config
        config.bos_token = tokenizer.convert_ids_to_tokens(ids.bos_token_id)
        config.eos_token = tokenizer.convert_ids_to_tokens(ids.eos_token_id)
        config.unk_token = tokenizer.unk_token or config.unk_token
        config.decoder_start_token = tokenizer.convert_ids_to_tokens(ids.decoder_start_token_id)
        config.add_source_eos = False  # the tokenizer appended it
        config.layer_norm_epsilon = model.get_decoder().layers[0].ffn_norm.norm.eps


class D2LTransformerConverter(Converter):
    """A CTranslate2 `Converter` of a loaded d2l Transformer and its tokenizer (`convert(output_dir, ...)`)."""

    def __init__(self, model: torch.nn.Module, tokenizer: Any) -> None:
        self.model, self.tokenizer = model, tokenizer

    def _load(self) -> Any:
        with torch.no_grad():
            return D2LTransformerLoader()(self.model, self.tokenizer)


__all__ = ["D2LTransformerConverter", "D2LTransformerLoader"]
