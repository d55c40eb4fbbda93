"""The ONNX graphs of a d2l Transformer in optimum's and transformers.js's layout (`onnx_export` writes them): the
encoder, and the merged decoder, one graph for every step.

The decoder step is the model's own `TransformerDecoder` with a cache object of this module that holds its keys and
values as the graph's inputs and outputs: the self-attention ones of the past (length 0 at the first step) extended
by the new token's; the cross-attention ones given. The merged decoder is an `If` on `use_cache_branch` with the step
in both branches (as optimum merges its two decoders; the weights are shared): true, the step reads the
cross-attention keys and values of `past_key_values.{i}.encoder.*`, uncopied, and `present.{i}.encoder.*` are empty;
false (the first step), they are projected from `encoder_hidden_states` and come out as `present.{i}.encoder.*`.
Each part is quantized before the merge, so the int8 decoder's every matrix product is int8.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from .onnx_tracing import SOURCE_AXES, EncoderOutput, quantized, sample_source, traced


class _SelfAttentionPast:
    """The self-attention part of the decoder's cache, as `TransformerDecoderLayer` uses it: each layer's past keys
    and values `(batch, heads, past, head_dim)` extended by the new token's, kept as the presents."""

    def __init__(self, past: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        self.past, self.present = past, [None] * len(past)

    def update(self, key: torch.Tensor, value: torch.Tensor, layer_idx: int) -> tuple[torch.Tensor, torch.Tensor]:
        past_key, past_value = self.past[layer_idx]
        self.present[layer_idx] = (torch.cat([past_key, key], 2), torch.cat([past_value, value], 2))
        return self.present[layer_idx]


@dataclass
class _GivenLayer:
    """One layer's cross-attention keys and values `(batch, heads, src_len, head_dim)`, as transformers' cache layers
    hold them."""

    keys: torch.Tensor
    values: torch.Tensor


class _CrossAttentionGiven:
    """The cross-attention part: each layer's keys and values, given (projected already, so the layers read them)."""

    def __init__(self, given: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        self.layers = [_GivenLayer(keys, values) for keys, values in given]

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.layers[layer_idx].keys.shape[2]


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


def _branch(graph: Any, prefix: str, given: dict[str, str]) -> list[Any]:
    """`graph`'s nodes for an `If` branch: the values they make renamed `prefix + name` (a branch's names are apart
    from the other branch's and the outer graph's), the inputs in `given` read from other values; the graph's inputs
    and initializers are the outer graph's."""
    made = {name for node in graph.node for name in node.output}
    nodes = []
    for node in graph.node:
        copy = type(node)()
        copy.CopyFrom(node)
        copy.name = prefix + node.name
        copy.input[:] = [given.get(name, prefix + name if name in made else name) for name in node.input]
        copy.output[:] = [prefix + name for name in node.output]
        nodes.append(copy)
    return nodes


def merged_decoder(step: Any, projection: Any, layers: int) -> Any:
    """The merged decoder: an `If` on `use_cache_branch` over the decoder `step` graph (cross-attention keys and
    values as inputs `cross.{i}.key/value`). True: the step reads them from `past_key_values.{i}.encoder.*` and
    `present.{i}.encoder.*` are empty `(batch, heads, 0, head_dim)` (the pasts stay as they are, as transformers.js
    and optimum keep them). False: the `projection` graph makes them from `encoder_hidden_states`, the step reads
    them, and they come out as `present.{i}.encoder.*`. Both branches read the weights of the outer graph."""
    import onnx
    from onnx import TensorProto, helper

    presents, pasts, cross = (_names("present", layers, "encoder"), _names("past_key_values", layers, "encoder"),
                              _names("cross", layers))  # fmt: skip
    graph = step.graph
    shapes = {value.name: _shape(value) for value in graph.input}
    inputs = [value for value in graph.input if value.name not in cross]
    if all(value.name != "encoder_hidden_states" for value in inputs):  # the step reads the keys and values only
        inputs.insert(2, projection.graph.input[0])
    past_inputs = [helper.make_tensor_value_info(past, TensorProto.FLOAT, shapes[name])
                   for past, name in zip(pasts, cross, strict=True)]  # fmt: skip
    outputs = [*graph.output, *(helper.make_tensor_value_info(name, TensorProto.FLOAT, shapes[given])
                                for name, given in zip(presents, cross, strict=True))]  # fmt: skip

    def branch_outputs(names: list[str]) -> list[Any]:
        return [helper.make_tensor_value_info(name, value.type.tensor_type.elem_type, _shape(value))
                for name, value in zip(names, outputs, strict=True)]  # fmt: skip

    cached = _branch(graph, "cached/", dict(zip(cross, pasts, strict=True)))
    none = helper.make_tensor("cached/none", TensorProto.INT64, [1], [0])  # an empty slice of each past
    axis = helper.make_tensor("cached/source_axis", TensorProto.INT64, [1], [2])
    cached += [helper.make_node("Slice", [past, none.name, none.name, axis.name], [f"cached/{name}"])
               for past, name in zip(pasts, presents, strict=True)]  # fmt: skip
    cached_names = [f"cached/{value.name}" for value in graph.output] + [f"cached/{name}" for name in presents]
    cached_branch = helper.make_graph(cached, "cached", [], branch_outputs(cached_names), [none, axis])
    projected = [f"first/projection/{value.name}" for value in projection.graph.output]
    weights = {initializer.name: f"projection/{initializer.name}" for initializer in projection.graph.initializer}
    first = [*_branch(projection.graph, "first/projection/", weights),
             *_branch(graph, "first/", dict(zip(cross, projected, strict=True)))]  # fmt: skip
    first_names = [f"first/{value.name}" for value in graph.output] + projected
    first_branch = helper.make_graph(first, "first", [], branch_outputs(first_names))
    branch = helper.make_node("If", ["use_cache_branch"], [value.name for value in outputs],
                              then_branch=cached_branch, else_branch=first_branch)  # fmt: skip
    use_cache = helper.make_tensor_value_info("use_cache_branch", TensorProto.BOOL, [1])
    renamed = [_renamed(tensor, weights[tensor.name]) for tensor in projection.graph.initializer]
    merged = helper.make_graph([branch], "decoder_model_merged", [*inputs, *past_inputs, use_cache], outputs,
                               [*graph.initializer, *renamed])  # fmt: skip
    domains = {entry.domain: entry for entry in [*step.opset_import, *projection.opset_import]}
    model = helper.make_model(merged, opset_imports=list(domains.values()), producer_name="hf_bahdanau")
    model.ir_version = step.ir_version
    onnx.checker.check_model(model)
    return model


def _renamed(tensor: Any, name: str) -> Any:
    """A copy of the initializer `tensor` named `name`."""
    copy = type(tensor)()
    copy.CopyFrom(tensor)
    copy.name = name
    return copy


def _shape(value: Any) -> list[int | str]:
    """A graph input's declared shape: each axis's size, or its name."""
    return [dim.dim_value if dim.HasField("dim_value") else dim.dim_param for dim in value.type.tensor_type.shape.dim]


def transformer_graphs(model: nn.Module) -> dict[str, tuple[Any, Any]]:
    """The encoder and the merged decoder of a d2l Transformer (eager attention: plain ONNX operators), each in
    float32 and int8 (the merged decoder made of the int8 step and projection)."""
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
    int8_step, int8_projection = quantized(step), quantized(projection)
    return {
        "encoder_model": (encoder, quantized(encoder)),
        "decoder_model_merged": (merged_decoder(step, projection, layers),
                                 merged_decoder(int8_step, int8_projection, layers)),
    }  # fmt: skip


__all__ = [
    "CrossKeyValuesGraph",
    "TransformerDecoderGraph",
    "TransformerEncoderGraph",
    "merged_decoder",
    "transformer_graphs",
]
