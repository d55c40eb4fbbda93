"""Tensors two ONNX graphs hold alike (the encoder's and the decoder's shared embedding, their position tables), stored
once: a file of ONNX external data that both graphs read, so that a page downloads them once."""

from __future__ import annotations

from pathlib import Path

LEAST = 1024  # bytes: smaller tensors stay in their graphs


def share_weights(graphs: list[Path], data_name: str) -> bool:
    """Move every tensor of at least `LEAST` bytes that each of the ONNX files `graphs` holds alike (the same type and
    values, in any shape; initializers, and large `Constant`s made initializers) into `data_name`, a file beside
    them that each reads as external data; whether there was any."""
    import onnx
    from onnx import numpy_helper

    from .onnx_tracing import large_constants_as_initializers

    models = [onnx.load(str(path)) for path in graphs]
    for model in models:
        model.graph.CopyFrom(large_constants_as_initializers(model.graph, LEAST))

    def large(model: onnx.ModelProto) -> dict[tuple, onnx.TensorProto]:  # (type, bytes) -> tensor (of any shape)
        arrays = [(tensor, numpy_helper.to_array(tensor)) for tensor in model.graph.initializer]
        return {(tensor.data_type, array.tobytes()): tensor for tensor, array in arrays if array.nbytes >= LEAST}

    found = [large(model) for model in models]
    shared = [content for content in found[0] if all(content in others for others in found[1:])]
    if not shared:
        return False
    offset = 0
    with open(graphs[0].parent / data_name, "wb") as data:
        for content in shared:
            data.write(content[1])
            for tensors in found:
                tensor = tensors[content]
                tensor.ClearField("raw_data")
                for field in ("float_data", "int32_data", "int64_data", "double_data", "uint64_data"):
                    tensor.ClearField(field)
                tensor.data_location = onnx.TensorProto.EXTERNAL
                del tensor.external_data[:]
                for name, value in (("location", data_name), ("offset", str(offset)), ("length", str(len(content[1])))):
                    tensor.external_data.add(key=name, value=value)
            offset += len(content[1])
    for model, path in zip(models, graphs, strict=True):
        onnx.save(model, str(path))
    return True


__all__ = ["share_weights"]
