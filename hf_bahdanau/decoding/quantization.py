"""int8 inference on CPU: `quantize_for_cpu(model)`, `load_checkpoint(folder, quantize="int8")`, `--quantize int8`.

A feature of this package, kept out of the model files that saved folders ship as remote code.

Why torch's dynamic quantization (`torch.ao.quantization.quantize_dynamic`) although torch marks `torch.ao`
deprecated in favour of torchao: torchao's replacement (`quantize_(model, Int8DynamicActivationInt8WeightConfig())`)
covers `nn.Linear` only, not `nn.GRU` / `nn.LSTM` (most of the RNN's decoding work), and targets
`torch.compile`d models (its int8 products ran slower than fp32 in eager mode on our x86 CPUs). torch 2.13 still
ships and runs `quantize_dynamic` for linear and recurrent layers on CPU; when it goes, this module is the one
place to change.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import torch
from torch import nn

from hf_bahdanau.choices import QUANTIZATIONS
from hf_bahdanau.errors import InputError


def quantize_for_cpu(model: nn.Module) -> nn.Module:
    """The model, in place, with int8 linear and recurrent (GRU, LSTM) layers (weights int8 per output channel,
    activations quantized per call) for CPU inference; returns it, in eval mode. It translates faster on CPU and
    can no longer be trained or saved (`model.quantization` is set to "int8")."""
    # A one-output layer (the additive attention's score vector) would only quantize its large input per step.
    layers = (
        name
        for name, module in model.named_modules()
        if (type(module) is nn.Linear and module.out_features > 1) or type(module) in (nn.GRU, nn.LSTM)
    )
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*(deprecated|quantize_per_tensor|quantize_per_channel).*")
        qconfigs = dict.fromkeys(layers, torch.ao.quantization.per_channel_dynamic_qconfig)  # a scale per output
        torch.ao.quantization.quantize_dynamic(model.eval(), qconfigs, dtype=torch.qint8, inplace=True)
    model.quantization = "int8"
    return model


def quantizer(quantize: str) -> Callable[[nn.Module], nn.Module]:
    """The in-place quantizing function for the name `quantize` (one of `QUANTIZATIONS`)."""
    if quantize not in QUANTIZATIONS:
        raise InputError(f"quantize must be one of {QUANTIZATIONS} or None, got {quantize!r}")
    return quantize_for_cpu


__all__ = ["QUANTIZATIONS", "quantize_for_cpu", "quantizer"]
