"""`linear(layer, inputs)`: an `nn.Linear` layer's product, through oneDNN where torch's default is slow.

torch multiplies float32 matrices on CPU with MKL, and MKL runs its AVX-512 kernels on Intel processors only: on an
AMD processor with AVX-512 it runs AVX2 code at about half the speed. oneDNN, also in torch's x86 builds, picks its
kernels by instruction set. On an AMD EPYC (Zen 5) VM, one thread, the decoding step's products ran 2.1-2.2x faster
through it (docs/benchmarks.md). The result is the same product up to float rounding (another summation order).

It is used for inference on such CPUs (and, through `product`, by the training loss's own products, which run
outside autograd): float32 on CPU, no autograd graph, no autocast, and a product large enough to
repay oneDNN's fixed cost per call (about 10 us), on a plain `nn.Linear` without hooks. Everything else (int8
layers, training, autocast, other devices) calls the layer.
`HF_BAHDANAU_ONEDNN=1` or `0` turns it on or off whatever the processor; `use_onednn` does within a block, for this
package's modules (a saved folder's remote code has its own copy of this module, which reads the setting alone).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from torch import nn

MIN_MULTIPLY_ADDS = 2**20  # rows x in x out: at 2**19 oneDNN and MKL took the same time (AMD EPYC, one thread)


def _onednn_pays() -> bool:
    """Whether this machine runs MKL's slower kernels: an x86 processor with AVX-512 that is not Intel's."""
    setting = os.environ.get("HF_BAHDANAU_ONEDNN")
    if setting is not None:
        return setting == "1"
    if torch.backends.cpu.get_cpu_capability() != "AVX512":
        return False
    try:
        vendors = {line.split(":")[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                   if line.startswith("vendor_id")}  # fmt: skip
    except OSError:
        return False
    return bool(vendors) and "GenuineIntel" not in vendors


def _has_onednn_linear() -> bool:
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


def _onednn(inputs: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """`inputs @ weight.T + bias` by oneDNN (the op torch's own compiler emits for CPU linear layers)."""
    return torch.ops.mkldnn._linear_pointwise(inputs, weight, bias, "none", [], "")


_enabled = _onednn_pays() and _has_onednn_linear()
_PLAIN_TENSORS = (torch.Tensor, nn.Parameter)  # not tensor subclasses (quantized weights, fakes)


@contextmanager
def use_onednn(enabled: bool) -> Iterator[None]:
    """Within the block, `linear` uses oneDNN (where it applies) or never does."""
    global _enabled
    previous, _enabled = _enabled, enabled and _has_onednn_linear()
    try:
        yield
    finally:
        _enabled = previous


def called_as_is(module: nn.Module, cls: type[nn.Module]) -> bool:
    """Whether calling `module` runs `cls.forward` and nothing else: exactly that class, no forward or backward
    hooks (its own or global ones: pruning, offloading), no `forward` replaced on the instance (as accelerate's
    hooks do). Code that reads such a module's weights directly skips nothing its caller would expect to run."""
    hooks = nn.modules.module
    return (
        type(module) is cls
        and not (module._forward_hooks or module._forward_pre_hooks or "forward" in vars(module))
        and not (module._backward_hooks or module._backward_pre_hooks)
        and not (hooks._global_forward_hooks or hooks._global_forward_pre_hooks)
        and not (hooks._global_backward_hooks or hooks._global_backward_pre_hooks)
    )


def onednn_applies(inputs: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether `inputs @ weight.T` goes to oneDNN: enabled here, plain float32 tensors on CPU, no autocast, no
    tracing or compiling (which see the call as it is written), large enough."""
    return (
        _enabled
        and torch.backends.mkldnn.enabled
        and type(inputs) in _PLAIN_TENSORS
        and type(weight) in _PLAIN_TENSORS
        and not (torch.jit.is_tracing() or torch.compiler.is_compiling())
        and inputs.device.type == "cpu"
        and inputs.dtype == weight.dtype == torch.float32
        and not torch.is_autocast_enabled("cpu")
        and inputs.numel() * weight.shape[0] >= MIN_MULTIPLY_ADDS
    )


def product(inputs: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """`inputs @ weight.T + bias` of tensors outside autograd (inside an `autograd.Function`), by oneDNN where it
    applies."""
    if onednn_applies(inputs, weight):
        return _onednn(inputs, weight, bias)
    return nn.functional.linear(inputs, weight, bias)


def linear(layer: nn.Module, inputs: torch.Tensor) -> torch.Tensor:
    """`layer(inputs)`, through oneDNN for a float32 `nn.Linear` on CPU when it pays (see the module's text)."""
    if (
        called_as_is(layer, nn.Linear)
        and not (
            torch.is_grad_enabled()
            and any(t is not None and t.requires_grad for t in (inputs, layer.weight, layer.bias))
        )
        and onednn_applies(inputs, layer.weight)
    ):
        return _onednn(inputs, layer.weight, layer.bias)
    return layer(inputs)
