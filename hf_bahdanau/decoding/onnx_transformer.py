"""The ONNX graphs of a d2l Transformer in optimum's and transformers.js's layout (`onnx_export` writes them): the
encoder, and the merged decoder, one graph for every step.

The decoder step is the model's own `TransformerDecoder` with a cache object of this module that holds its keys and
values as the graph's inputs and outputs: the self-attention ones of the past (length 0 at the first step) extended
by the new token's; the cross-attention ones given. An `If` on `use_cache_branch` in front of it gives those: the
past's (`past_key_values.{i}.encoder.*`, true) or the projections of `encoder_hidden_states` (false, the first step),
and they come out as `present.{i}.encoder.*` either way.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from .onnx_tracing import SOURCE_AXES, EncoderOutput, sample_source, traced


class _SelfAttentionPast:
    """The self-attention part of the decoder's cache, as `TransformerDecoderLayer` uses it: each layer's past keys
    and values `(batch, heads, past, head_dim)` extended by the new token's, kept as the presents."""

    def __init__(self, past: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        self.past, self.present = past, [None] * len(past)

    def update(self, key: torch.Tensor, value: torch.Tensor, layer_idx: int) -> tuple[torch.Tensor, torch.Tensor]:
        past_key, past_value = self.past[layer_idx]
        self.present[layer_idx] = (torch.cat([past_key, key], 2), torch.cat([past_value, value], 2))
        return self.present[layer_idx]


class _CrossAttentionGiven:
    """The cross-attention part: each layer's keys and values `(batch, heads, src_len, head_dim)`, given."""

    def __init__(self, given: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        self.given = given

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return 1  # projected already: the layer reads them back through `update`

    def update(self, key: torch.Tensor, value: torch.Tensor, layer_idx: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.given[layer_idx]


class _GivenCache:
    """What `TransformerDecoder` asks of its `EncoderDecoderCache`, on tensors the graph takes as inputs."""

    def __init__(self, past: list, cross: list) -> None:
        self.self_attention_cache, self.cross_attention_cache = _SelfAttentionPast(past), _CrossAttentionGiven(cross)

    def get_seq_length(self, layer_idx: int = 0) -> Any:
        return self.self_attention_cache.past[0][0].shape[2]  # traced: the graph reads it from the past's shape


class TransformerEncoderGraph(nn.Module):
    """`input_ids`, `attention_mask` `(batch, src_len)` -> `last_hidden_state` `(batch, src_len, d_model)`."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.model.get_encoder()(input_ids, attention_mask).last_hidden_state


class TransformerDecoderGraph(nn.Module):
    """One decoder step with every layer's cross-attention keys and values given: `(encoder_attention_mask,
    input_ids (batch, 1), encoder_hidden_states, *past, *cross)` -> `(logits (batch, 1, vocab), *present)`, where
    `past`/`present` hold each layer's self-attention key and value and `cross` each layer's cross-attention ones."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model, self.layers = model, model.config.decoder_layers

    def forward(
        self,
        encoder_attention_mask: torch.Tensor,  # (batch, src_len)
        input_ids: torch.Tensor,  # (batch, 1)
        encoder_hidden_states: torch.Tensor,  # (batch, src_len, d_model)
        *states: torch.Tensor,  # (batch, heads, past | src_len, head_dim)
    ) -> tuple[torch.Tensor, ...]:
        pairs = [tuple(states[i : i + 2]) for i in range(0, len(states), 2)]
        cache = _GivenCache(pairs[: self.layers], pairs[self.layers :])
        decoded = self.model.get_decoder()(
            input_ids, EncoderOutput(encoder_hidden_states), encoder_attention_mask.bool(), cache
        ).last_hidden_state  # (batch, 1, d_model)
        present = [tensor for pair in cache.self_attention_cache.present for tensor in pair]
        return (self.model.lm_head(decoded), *present)


class CrossKeyValuesGraph(nn.Module):
    """`encoder_hidden_states` -> each decoder layer's cross-attention key and value `(batch, heads, src_len, dim)`."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, encoder_hidden_states: torch.Tensor) -> tuple[torch.Tensor, ...]:
        layers = self.model.get_decoder().layers
        h = encoder_hidden_states
        return tuple(tensor for layer in layers for tensor in layer.cross_attn.project_keys_values(h, h))


def _names(prefix: str, layers: int, part: str | None = None) -> list[str]:
    """Each layer's key and value names: `prefix.{i}.part.key`, `prefix.{i}.part.value` (no part: `prefix.{i}.key`)."""
    middle = "" if part is None else f".{part}"
    return [f"{prefix}.{i}{middle}.{kind}" for i in range(layers) for kind in ("key", "value")]


def _merged_decoder(step: Any, cross: Any, layers: int) -> Any:
    """The decoder `step` graph (cross-attention keys and values as inputs `cross.{i}.key/value`) with an `If` on
    `use_cache_branch` in front that makes them: the past's (`past_key_values.{i}.encoder.*`) when true, the `cross`
    graph's projections of `encoder_hidden_states` when false; they come out as `present.{i}.encoder.*`."""
    import onnx
    from onnx import TensorProto, helper

    made, pasts = _names("present", layers, "encoder"), _names("past_key_values", layers, "encoder")
    rename = dict(zip(_names("cross", layers), made, strict=True))
    graph = step.graph
    for node in graph.node:
        node.input[:] = [rename.get(name, name) for name in node.input]
    shapes = {rename[value.name]: _shape(value) for value in graph.input if value.name in rename}  # by present
    kept_inputs = [value for value in graph.input if value.name not in rename]
    if all(value.name != "encoder_hidden_states" for value in kept_inputs):  # the step reads the keys and values only
        kept_inputs.insert(2, cross.graph.input[0])

    def values(names: list[str], suffix: str = "") -> list[Any]:
        return [helper.make_tensor_value_info(name + suffix, TensorProto.FLOAT, shapes[name]) for name in names]

    # The branches: each yields the keys and values, named apart from the graph's (a subgraph's outputs are its own).
    then_outputs = values(made, "/given")
    then_branch = helper.make_graph(
        [helper.make_node("Identity", [past], [out.name]) for past, out in zip(pasts, then_outputs, strict=True)],
        "given_cross_key_values", [], then_outputs,
    )  # fmt: skip
    projection = cross.graph
    prefix = "cross_key_values/"  # the projection's names, apart from the step's (both traced on their own)
    for node in projection.node:
        node.name = prefix + node.name
        node.input[:] = [name if name == "encoder_hidden_states" or not name else prefix + name for name in node.input]
        node.output[:] = [prefix + name for name in node.output]
    for initializer in projection.initializer:
        initializer.name = prefix + initializer.name
    else_outputs = [helper.make_tensor_value_info(prefix + value.name, TensorProto.FLOAT, shapes[name])
                    for value, name in zip(projection.output, made, strict=True)]  # fmt: skip
    else_branch = helper.make_graph(list(projection.node), "projected_cross_key_values", [], else_outputs)
    branch = helper.make_node("If", ["use_cache_branch"], made, then_branch=then_branch, else_branch=else_branch)
    past_inputs = [helper.make_tensor_value_info(past, TensorProto.FLOAT, shapes[name])
                   for past, name in zip(pasts, made, strict=True)]  # fmt: skip
    use_cache = helper.make_tensor_value_info("use_cache_branch", TensorProto.BOOL, [1])
    merged = helper.make_graph(
        [branch, *graph.node], "decoder_model_merged", [*kept_inputs, *past_inputs, use_cache],
        [*graph.output, *values(made)], [*graph.initializer, *projection.initializer],
    )  # fmt: skip
    model = helper.make_model(merged, opset_imports=step.opset_import, producer_name="hf_bahdanau")
    model.ir_version = step.ir_version
    onnx.checker.check_model(model)
    return model


def _shape(value: Any) -> list[int | str]:
    """A graph input's declared shape: each axis's size, or its name."""
    return [dim.dim_value if dim.HasField("dim_value") else dim.dim_param for dim in value.type.tensor_type.shape.dim]


def transformer_graphs(model: nn.Module) -> dict[str, Any]:
    """The encoder and the merged decoder of a d2l Transformer (eager attention: plain ONNX operators)."""
    config = model.config
    config._attn_implementation = "eager"
    layers, heads = config.decoder_layers, config.attention_heads
    input_ids, attention_mask = sample_source(config.vocab_size)
    encoder = traced(TransformerEncoderGraph(model), (input_ids, attention_mask), ["input_ids", "attention_mask"],
                      ["last_hidden_state"], {"input_ids": SOURCE_AXES, "attention_mask": SOURCE_AXES,
                                              "last_hidden_state": SOURCE_AXES})  # fmt: skip
    with torch.no_grad():
        hidden = TransformerEncoderGraph(model)(input_ids, attention_mask)  # (2, 5, d_model)
    head_dim = config.d_model // heads
    past = [torch.zeros(2, heads, 3, head_dim) for _ in range(2 * layers)]
    cross = list(CrossKeyValuesGraph(model)(hidden))
    past_names, present_names = _names("past_key_values", layers, "decoder"), _names("present", layers, "decoder")
    cross_names = _names("cross", layers)
    batch = {0: "batch_size"}
    cross_axes = {name: {0: "batch_size", 2: "encoder_sequence_length"} for name in cross_names}
    axes = {"encoder_attention_mask": SOURCE_AXES, "input_ids": batch, "encoder_hidden_states": SOURCE_AXES,
            "logits": batch, **cross_axes,
            **{name: {0: "batch_size", 2: "past_decoder_sequence_length"} for name in past_names},
            **{name: {0: "batch_size", 2: "past_decoder_sequence_length + 1"} for name in present_names}}  # fmt: skip
    step = traced(TransformerDecoderGraph(model), (attention_mask, input_ids[:, :1], hidden, *past, *cross),
                   ["encoder_attention_mask", "input_ids", "encoder_hidden_states", *past_names, *cross_names],
                   ["logits", *present_names], axes)  # fmt: skip
    projection = traced(CrossKeyValuesGraph(model), (hidden,), ["encoder_hidden_states"], cross_names,
                         {"encoder_hidden_states": SOURCE_AXES, **cross_axes})  # fmt: skip
    return {"encoder_model": encoder, "decoder_model_merged": _merged_decoder(step, projection, layers)}


__all__ = ["CrossKeyValuesGraph", "TransformerDecoderGraph", "TransformerEncoderGraph", "transformer_graphs"]
