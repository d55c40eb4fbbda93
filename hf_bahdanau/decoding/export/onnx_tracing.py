"""Tracing the package's modules into ONNX graphs (`onnx_transformer`, `onnx_rnn`): the legacy TorchScript exporter on
a sample batch with padding (so that the graphs keep the mask's paths), its graph made valid ONNX where torch's
operators and ONNX's differ, its int8 copy, and what both families' graphs share.
"""

from __future__ import annotations

import inspect
import io
import logging
import tempfile
import warnings
from pathlib import Path
from typing import Any

import torch
from torch import nn

OPSET = 17
SOURCE_AXES = {0: "batch_size", 1: "encoder_sequence_length"}  # of `input_ids`, `attention_mask` and what follows them


class EncoderOutput:
    """The encoder outputs as the decoders read them."""

    def __init__(self, last_hidden_state: torch.Tensor) -> None:
        self.last_hidden_state = last_hidden_state


def traced(module: nn.Module, args: tuple, inputs: list[str], outputs: list[str], axes: dict) -> Any:
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


def quantized(model: Any) -> Any:
    """`model` with int8 weights: onnxruntime's dynamic quantization (int8 matrix products, activations quantized as
    they come)."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with tempfile.TemporaryDirectory(prefix="hf_bahdanau_onnx_") as scratch:
        source, target = Path(scratch) / "float32.onnx", Path(scratch) / "int8.onnx"
        onnx.save(model, str(source))
        logging.disable(logging.WARNING)  # the quantizer logs each tensor it leaves as it is, and advice, to the root
        try:
            quantize_dynamic(str(source), str(target), weight_type=QuantType.QInt8)
        finally:
            logging.disable(logging.NOTSET)
        return onnx.load(str(target))


def sample_source(vocab: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Source ids and a mask `(2, 5)` with padding (so that the traced graphs keep the mask's paths)."""
    input_ids = torch.randint(3, vocab, (2, 5), generator=torch.Generator().manual_seed(0))
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1, 3:] = 0
    return input_ids, attention_mask


__all__ = ["OPSET", "SOURCE_AXES", "EncoderOutput", "quantized", "sample_source", "traced"]
