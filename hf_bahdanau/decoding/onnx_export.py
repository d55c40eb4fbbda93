"""Export a model of either family to ONNX (`hf-bahdanau export --format onnx`): an encoder and a decoder step in
float32, with int8 copies (onnxruntime's dynamic quantization) beside them, the tokenizer files and
`onnx/decoding.json`, which names every input and output so that a search loop in any language can run them.

The graphs are traced from the package's own modules (nothing of the model is written twice): a module of this file
calls the model's encoder, decoder and head with its decoder state as plain tensors.

- **Transformer** (`d2l_transformer`): the standard folder of `standard_folder` (MarianMT for a post-norm model,
  Blenderbot for a pre-norm one) plus transformers.js's layout of it: `onnx/encoder_model.onnx` (`input_ids`,
  `attention_mask` -> `last_hidden_state`) and `onnx/decoder_model_merged.onnx` with optimum's names
  (`encoder_attention_mask`, `input_ids` `(batch, 1)`, `encoder_hidden_states`, `past_key_values.{i}.decoder.key`
  ..., `use_cache_branch` -> `logits`, `present.{i}.decoder.key` ...; keys and values `(batch, heads, seq, head_dim)`),
  and their `_quantized` copies. "Merged" is one graph for every step: the self-attention keys and values of the
  past (length 0 at the first step) are extended by the new token's; an ONNX `If` on `use_cache_branch` takes the
  cross-attention keys and values from `past_key_values.{i}.encoder.*` (true) or projects them from
  `encoder_hidden_states` (false, the first step), and they come out as `present.{i}.encoder.*` either way. The
  decoder reads one token a step, the next after its past. Its graph is our model's, whose residual stream is the
  standard one's up to a permutation of dimensions: the keys, values and logits are the standard model's.
- **RNN** (`bahdanau`): `onnx/encoder_model.onnx` (`input_ids`, `attention_mask` -> `encoder_hidden_states`,
  `projected_keys`, the decoder's initial `hidden` (and an LSTM's `cell`), batch first) and `onnx/decoder_model.onnx`,
  one step: `input_ids` `(batch, 1)`, `encoder_hidden_states`, `projected_keys`, `encoder_attention_mask`, `hidden`
  (`cell`) -> `logits` `(batch, 1, vocab)`, `new_hidden` (`new_cell`); with the tokenizer files, the generation
  config and the model's config (without the pointers to the code a saved folder holds).
"""

from __future__ import annotations

import contextlib
import inspect
import io
import json
import logging
import os
import shutil
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn

from hf_bahdanau.errors import InputError
from hf_bahdanau.json_files import read_json

from .export import (
    COPIED_FILES,
    check_export_output,
    check_outside_model_folders,
    check_tokenizer_file,
    load_exportable,
    local_folder,
    source_fingerprint,
    write_export,
)

logger = logging.getLogger(__name__)

FORMAT = "onnx"  # `export --format`
SUBFOLDER = "onnx"  # where transformers.js looks for a model's ONNX files
DESCRIPTION = "decoding.json"  # in SUBFOLDER: the graphs' files, inputs and outputs, and the special ids
QUANTIZED_SUFFIX = "_quantized"  # transformers.js's name of int8 ("q8") files
OPSET = 17
INSTALL_HINT = "pip install hf_bahdanau[onnx]"
CODE_SETTINGS = ("auto_map", "custom_pipelines")  # a saved folder's pointers to its code, which an export lacks


def require_onnx() -> None:
    """An InputError that says how to install what an ONNX export needs, where it is missing."""
    try:
        import onnx  # noqa: F401
        import onnxruntime  # noqa: F401
    except ImportError as error:
        raise InputError(f"ONNX export needs onnx and onnxruntime ({error.name} is missing): {INSTALL_HINT}") from None


# ---- the graphs' modules: the model's own forward, the decoder state as tensors ----


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

    def forward(self, encoder_attention_mask, input_ids, encoder_hidden_states, *states):  # noqa: ANN001, ANN201
        pairs = [tuple(states[i : i + 2]) for i in range(0, len(states), 2)]
        cache = _GivenCache(pairs[: self.layers], pairs[self.layers :])
        decoded = self.model.get_decoder()(
            input_ids, _EncoderOutput(encoder_hidden_states), encoder_attention_mask.bool(), cache
        ).last_hidden_state  # (batch, 1, d_model)
        present = [tensor for pair in cache.self_attention_cache.present for tensor in pair]
        return (self.model.lm_head(decoded), *present)


class _EncoderOutput:
    """The encoder outputs as the decoders read them."""

    def __init__(self, last_hidden_state: torch.Tensor) -> None:
        self.last_hidden_state = last_hidden_state


class CrossKeyValuesGraph(nn.Module):
    """`encoder_hidden_states` -> each decoder layer's cross-attention key and value `(batch, heads, src_len, dim)`."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, encoder_hidden_states: torch.Tensor) -> tuple[torch.Tensor, ...]:
        layers = self.model.get_decoder().layers
        h = encoder_hidden_states
        return tuple(tensor for layer in layers for tensor in layer.cross_attn.project_keys_values(h, h))


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

    def forward(self, input_ids, encoder_hidden_states, projected_keys, encoder_attention_mask, hidden, cell=None):  # noqa: ANN001, ANN201
        from hf_bahdanau.models.bahdanau_decoder import BahdanauDecoderState
        from hf_bahdanau.models.cache_names import returned_cache

        state = BahdanauDecoderState(
            hidden.transpose(0, 1), None if cell is None else cell.transpose(0, 1), projected_keys
        )  # (layers, batch, hidden)
        decoded = self.model.get_decoder()(
            input_ids, _EncoderOutput(encoder_hidden_states), encoder_attention_mask.bool(), state
        )
        new = returned_cache(decoded)
        cell = () if new.cell is None else (new.cell.transpose(0, 1),)
        return (self.model.lm_head(decoded.last_hidden_state), new.hidden.transpose(0, 1), *cell)


# ---- tracing and the graph surgery ----


def _traced(module: nn.Module, args: tuple, inputs: list[str], outputs: list[str], axes: dict) -> Any:
    """The ONNX model of `module` traced on `args` (opset `OPSET`), with `axes` dynamic."""
    import onnx

    buffer = io.BytesIO()
    tracer = {"dynamo": False} if "dynamo" in inspect.signature(torch.onnx.export).parameters else {}  # torch 2.5 on
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the tracer's notes on Python values it records as constants (checks)
        torch.onnx.export(module, args, buffer, input_names=inputs, output_names=outputs, dynamic_axes=axes,
                          opset_version=OPSET, do_constant_folding=True, **tracer)  # fmt: skip
    model = onnx.load_from_string(buffer.getvalue())
    _count_booleans_as_integers(model.graph)
    return model


@contextlib.contextmanager
def _exportable_stable_argsort() -> Iterator[None]:
    """Within the block, `torch.argsort(..., stable=True)` (the RNN encoder's, which moves each row's tokens to its
    front) sorts keys made unique by their position instead: the same order, through ONNX's TopK (the exporter has
    no stable sort)."""
    argsort = torch.argsort

    def unique_keys_argsort(keys: torch.Tensor, dim: int = -1, descending: bool = False, stable: bool = False):  # noqa: ANN202
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


def _count_booleans_as_integers(graph: Any) -> None:
    """ONNX's CumSum takes no booleans (torch's counts a boolean mask as int64): cast its boolean inputs first."""
    from onnx import TensorProto, helper

    made = {output: node for node in graph.node for output in node.output}
    nodes = []
    for node in graph.node:
        source = made.get(node.input[0]) if node.op_type == "CumSum" else None
        cast = source if source is not None and source.op_type == "Cast" else None
        if cast is not None and helper.get_attribute_value(cast.attribute[0]) == TensorProto.BOOL:
            counted = f"{node.input[0]}_as_int64"
            nodes.append(helper.make_node("Cast", [node.input[0]], [counted], to=TensorProto.INT64))
            node.input[0] = counted
        nodes.append(node)
    del graph.node[:]
    graph.node.extend(nodes)


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


def _quantize(source: Path, target: Path) -> None:
    """`target`: `source` with int8 weights (onnxruntime's dynamic quantization: int8 matrix products, activations
    quantized per batch)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    logging.disable(logging.INFO)  # the quantizer logs each tensor it leaves as it is, on the root logger
    try:
        quantize_dynamic(str(source), str(target), weight_type=QuantType.QInt8)
    finally:
        logging.disable(logging.NOTSET)


# ---- the two families ----


def _sample_source(vocab: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Source ids and a mask `(2, 5)` with padding (so that the traced graphs keep the mask's paths)."""
    input_ids = torch.randint(3, vocab, (2, 5), generator=torch.Generator().manual_seed(0))
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1, 3:] = 0
    return input_ids, attention_mask


SOURCE_AXES = {0: "batch_size", 1: "encoder_sequence_length"}


def _transformer_graphs(model: nn.Module) -> dict[str, Any]:
    """The encoder and the merged decoder of a d2l Transformer (eager attention: plain ONNX operators)."""
    config = model.config
    config._attn_implementation = "eager"
    layers, heads = config.decoder_layers, config.attention_heads
    input_ids, attention_mask = _sample_source(config.vocab_size)
    encoder = _traced(TransformerEncoderGraph(model), (input_ids, attention_mask), ["input_ids", "attention_mask"],
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
    step = _traced(TransformerDecoderGraph(model), (attention_mask, input_ids[:, :1], hidden, *past, *cross),
                   ["encoder_attention_mask", "input_ids", "encoder_hidden_states", *past_names, *cross_names],
                   ["logits", *present_names], axes)  # fmt: skip
    projection = _traced(CrossKeyValuesGraph(model), (hidden,), ["encoder_hidden_states"], cross_names,
                         {"encoder_hidden_states": SOURCE_AXES, **cross_axes})  # fmt: skip
    return {"encoder_model": encoder, "decoder_model_merged": _merged_decoder(step, projection, layers)}


def _rnn_graphs(model: nn.Module) -> dict[str, Any]:
    """The encoder and the decoder step of a d2l RNN encoder-decoder."""
    config = model.config
    lstm = config.rnn_type == "lstm"
    input_ids, attention_mask = _sample_source(config.vocab_size)
    states = ["hidden", "cell"] if lstm else ["hidden"]
    batch, source = {0: "batch_size"}, SOURCE_AXES
    encoder_outputs = ["encoder_hidden_states", "projected_keys", *states]
    with _exportable_stable_argsort():
        encoder = _traced(RNNEncoderGraph(model), (input_ids, attention_mask), ["input_ids", "attention_mask"],
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
    decoder = _traced(RNNDecoderGraph(model), args, inputs, outputs, axes)
    return {"encoder_model": encoder, "decoder_model": decoder}


def description(model: nn.Module, graphs: dict[str, Any]) -> dict[str, Any]:
    """What `onnx/decoding.json` says: each graph's file (and int8 file), inputs and outputs; which decoder outputs
    feed which decoder inputs at the next step (`state`), the encoder outputs the decoder reads (`from_encoder`,
    with the source's `attention_mask` as `encoder_attention_mask`), which inputs belong to a source rather than to
    a hypothesis (`per_source`: a beam search reorders only the others), what the first step and the later ones
    feed (`first_step`, `later_steps`: the empty past's shape for the Transformer), and the special ids."""
    config, generation = model.config, model.generation_config
    encoder_name, decoder_name = list(graphs)
    files = {name: {"file": f"{name}.onnx", "int8_file": f"{name}{QUANTIZED_SUFFIX}.onnx",
                    "inputs": [v.name for v in graph.graph.input], "outputs": [v.name for v in graph.graph.output]}
             for name, graph in graphs.items()}  # fmt: skip
    decoder_inputs = set(files[decoder_name]["inputs"])
    from_encoder = {name: name for name in files[encoder_name]["outputs"] if name in decoder_inputs}
    if "last_hidden_state" in files[encoder_name]["outputs"]:
        from_encoder["last_hidden_state"] = "encoder_hidden_states"
    state = {}
    for name in files[decoder_name]["outputs"]:
        if name.startswith("present."):
            state[name] = name.replace("present.", "past_key_values.", 1)
        elif name.startswith("new_"):
            state[name] = name[len("new_") :]
    cross = [name for name in decoder_inputs if name.endswith((".encoder.key", ".encoder.value"))]
    per_source = ["encoder_hidden_states", "encoder_attention_mask", "projected_keys", *cross]
    found = {
        "family": "transformer" if config.model_type == "d2l_transformer" else "rnn",
        "opset": OPSET,
        "encoder": files[encoder_name],
        "decoder": files[decoder_name],
        "from_encoder": from_encoder,
        "state": state,
        "per_source": sorted(name for name in per_source if name in decoder_inputs),
        "decoder_start_token_id": config.decoder_start_token_id,
        "eos_token_id": config.eos_token_id,
        "pad_token_id": config.pad_token_id,
        "vocab_size": config.vocab_size,
        "max_position_embeddings": getattr(config, "max_position_embeddings", None),
        "num_beams": generation.num_beams,
        "length_penalty": 1.0 if generation.length_penalty is None else generation.length_penalty,
    }
    if found["family"] == "transformer":
        heads = config.attention_heads
        found["first_step"] = {"use_cache_branch": False,
                               "empty_past_shape": ["batch_size", heads, 0, config.d_model // heads]}  # fmt: skip
        found["later_steps"] = {"use_cache_branch": True}
    return found


def export_onnx(
    model_dir_or_repo_id: str | os.PathLike, output_dir: str | os.PathLike, overwrite: bool = False
) -> Path:
    """Write the ONNX export of a model folder (or Hub repo) of either family to `output_dir` (see the module's
    docstring); its path. `output_dir` is a new or empty folder outside any model folder, or (with `overwrite`) an
    earlier export; it is written beside it and moved into place at the end."""
    require_onnx()
    import onnx

    output = Path(output_dir)
    check_outside_model_folders(output)
    folder = local_folder(model_dir_or_repo_id)
    if not (folder / "config.json").is_file():
        raise InputError(f"{folder} is not a saved model folder (no config.json)")
    model_config = read_json(folder / "config.json")
    if model_config.get("model_type") not in ("bahdanau", "d2l_transformer"):
        raise InputError(f"{folder} holds a {model_config.get('model_type')!r} model: only this package's export")
    check_tokenizer_file(folder)
    check_export_output(output, folder, overwrite)
    fingerprint = source_fingerprint(folder)
    model, _ = load_exportable(folder)
    transformer = model.config.model_type == "d2l_transformer"
    standard = None
    if transformer:
        from .standard_folder import to_standard_model

        standard = to_standard_model(model)  # refuses, in one line, what no standard architecture holds
    graphs = _transformer_graphs(model) if transformer else _rnn_graphs(model)
    found = description(model, graphs)

    def write(staging: Path) -> None:
        if standard is not None:
            from .standard_folder import save_tokenizer

            standard.save_pretrained(staging, safe_serialization=True)
            save_tokenizer(folder, staging)
        else:  # the tokenizer, the generation config, and the model's config as data (no code to load it with)
            for name in COPIED_FILES:
                if (folder / name).is_file():
                    shutil.copy2(folder / name, staging / name)
            settings = {name: value for name, value in model_config.items() if name not in CODE_SETTINGS}
            (staging / "config.json").write_text(json.dumps(settings, indent=2) + "\n", encoding="utf-8")
        (staging / SUBFOLDER).mkdir()
        for name, graph in graphs.items():
            path = staging / SUBFOLDER / f"{name}.onnx"
            onnx.save(graph, str(path))
            _quantize(path, path.with_name(f"{name}{QUANTIZED_SUFFIX}.onnx"))
        text = json.dumps(found, indent=2) + "\n"
        (staging / SUBFOLDER / DESCRIPTION).write_text(text, encoding="utf-8")

    info = {"format": FORMAT, "family": found["family"], "source_fingerprint": fingerprint,
            "model_config": model_config}  # fmt: skip
    if standard is not None:
        info["architecture"] = type(standard).__name__
    write_export(output, info, write)
    logger.info("exported %s to ONNX (float32 and int8) in %s", folder, output)
    return output


__all__ = ["DESCRIPTION", "FORMAT", "SUBFOLDER", "export_onnx", "is_onnx_folder", "require_onnx"]


def is_onnx_folder(folder: str | os.PathLike) -> bool:
    """Whether `folder` holds an ONNX export of this package (its `onnx/decoding.json`)."""
    return (Path(folder) / SUBFOLDER / DESCRIPTION).is_file()
