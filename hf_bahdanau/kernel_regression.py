"""Nadaraya-Watson attention pooling (d2l, "Attention Pooling: Nadaraya-Watson Kernel Regression").

Every model maps queries `x` to `f(x) = sum_i alpha(x, x_i) y_i` where the attention weights `alpha` over
the key-value pairs `(x_i, y_i)` are non-negative and sum to 1. Shapes used throughout:

- `queries`: `(n_queries,)`
- `keys`, `values`: `(n_keys,)` (shared by all queries) or `(n_queries, n_keys)` (one row per query, as in
  d2l's leave-one-out training)
- `attention_weights`: `(n_queries, n_keys)`
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

logger = logging.getLogger(__name__)

KERNELS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "gaussian": lambda d: torch.exp(-(d**2) / 2),
    "boxcar": lambda d: (d.abs() < 1.0).to(d.dtype),
    "constant": torch.ones_like,
    "epanechikov": lambda d: (1 - d.abs()).clamp_min(0),
}


def _check_kernel(kernel: str) -> None:
    if kernel not in KERNELS:
        raise ValueError(f"unknown kernel {kernel!r}, expected one of {sorted(KERNELS)}")


def kernel_weights(distances: torch.Tensor, kernel: str = "gaussian") -> torch.Tensor:
    """Normalise `kernel(distances)` over the last (key) dimension.

    The Gaussian kernel is computed as `softmax(-d**2 / 2)`, which is the same maths without overflow.
    For compactly supported kernels (boxcar, Epanechikov) a query with no key in its support gets zeros.
    """
    _check_kernel(kernel)
    if kernel == "gaussian":
        return torch.softmax(-(distances**2) / 2, dim=-1)
    k = KERNELS[kernel](distances)
    return k / k.sum(dim=-1, keepdim=True).clamp_min(torch.finfo(k.dtype).tiny)


class AttentionPooling(nn.Module):
    """Base class: `f(q) = sum_i alpha(q - k_i) v_i`; subclasses define `attention(distances)`."""

    def __init__(self) -> None:
        super().__init__()
        self.attention_weights: torch.Tensor | None = None  # (n_queries, n_keys), detached

    def attention(self, distances: torch.Tensor) -> torch.Tensor:
        """Map `distances = q - k` of shape `(n_queries, n_keys)` to weights of the same shape."""
        raise NotImplementedError

    def forward(self, queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        """Pool `values` for each query; returns `(n_queries,)`."""
        if queries.dim() != 1:
            raise ValueError(f"queries must have shape (n_queries,), got {tuple(queries.shape)}")
        for name, tensor in (("keys", keys), ("values", values)):
            if tensor.dim() not in (1, 2) or (tensor.dim() == 2 and tensor.shape[0] != queries.shape[0]):
                raise ValueError(
                    f"{name} must have shape (n_keys,) or (n_queries={queries.shape[0]}, n_keys), "
                    f"got {tuple(tensor.shape)}"
                )
        if keys.shape[-1] != values.shape[-1]:
            raise ValueError(f"keys {tuple(keys.shape)} and values {tuple(values.shape)} differ in n_keys")
        distances = queries.unsqueeze(-1) - keys  # (n_queries, n_keys)
        weights = self.attention(distances)
        self.attention_weights = weights.detach()
        return (weights * values).sum(dim=-1)


class AveragePooling(AttentionPooling):
    """`f(x) = mean_i y_i`: uniform weights `1 / n_keys` whatever the query."""

    def attention(self, distances: torch.Tensor) -> torch.Tensor:
        return torch.full_like(distances, 1.0 / distances.shape[-1])


class NonParametricPooling(AttentionPooling):
    """Nadaraya-Watson pooling with a fixed kernel; Gaussian gives `softmax(-(x - x_i)**2 / 2)`."""

    def __init__(self, kernel: str = "gaussian") -> None:
        super().__init__()
        _check_kernel(kernel)  # at construction, not at the first call
        self.kernel = kernel

    def attention(self, distances: torch.Tensor) -> torch.Tensor:
        return kernel_weights(distances, self.kernel)

    def extra_repr(self) -> str:
        return f"kernel={self.kernel!r}"


class NWKernelRegression(NonParametricPooling):
    """Parametric Nadaraya-Watson regression: `softmax(-((x - x_i) * w)**2 / 2)` with a learned width `w`.

    `forward(queries, keys, values)` keeps d2l's call; keys/values may also be `(n_keys,)` and are then shared
    by all queries. `w` starts at `init_w`, or like d2l at `U[0, 1)` drawn from `generator` when it is None;
    only `|w|` matters, and `w` near 0 (uniform weights) is a stationary point that SGD barely leaves.
    """

    def __init__(
        self, init_w: float | None = None, kernel: str = "gaussian", generator: torch.Generator | None = None
    ) -> None:
        super().__init__(kernel)
        w = torch.rand(1, generator=generator) if init_w is None else torch.tensor([float(init_w)])
        self.w = nn.Parameter(w)

    def attention(self, distances: torch.Tensor) -> torch.Tensor:
        return super().attention(distances * self.w)


def true_function(x: torch.Tensor) -> torch.Tensor:
    """The chapter's regression target `f(x) = 2 sin(x) + x**0.8`."""
    return 2 * torch.sin(x) + x**0.8


@dataclass
class NWData:
    """The chapter's data: sorted noisy training samples and a test grid with the noise-free truth."""

    x_train: torch.Tensor  # (n_train,), sorted
    y_train: torch.Tensor  # (n_train,)
    x_test: torch.Tensor  # (n_test,)
    y_truth: torch.Tensor  # (n_test,)


def make_nw_data(
    n_train: int = 50, noise_std: float = 0.5, seed: int | None = 0, generator: torch.Generator | None = None
) -> NWData:
    """The chapter's data: `x_train = sort(rand(n_train) * 5)`, `y_train = f(x_train) + N(0, noise_std)`.

    The test grid is `arange(0, 5, 0.1)`. Randomness comes from `generator`, or else a fresh generator seeded
    with `seed` (`seed=None`: non-deterministic).
    """
    if generator is None:
        generator = torch.Generator()
        if seed is None:
            generator.seed()
        else:
            generator.manual_seed(seed)
    x_train, _ = torch.sort(torch.rand(n_train, generator=generator) * 5)
    y_train = true_function(x_train) + torch.normal(0.0, noise_std, (n_train,), generator=generator)
    x_test = torch.arange(0, 5, 0.1)
    return NWData(x_train=x_train, y_train=y_train, x_test=x_test, y_truth=true_function(x_test))


def leave_one_out(x: torch.Tensor) -> torch.Tensor:
    """Row `i` holds every element of `x` but `x[i]`: `(n,)` -> `(n, n - 1)`."""
    n = x.shape[0]
    mask = ~torch.eye(n, dtype=torch.bool)
    return x.repeat((n, 1))[mask].reshape((n, n - 1))


def train_nw(
    x_train: torch.Tensor,
    y_train: torch.Tensor,
    epochs: int = 5,
    lr: float = 0.5,
    model: NWKernelRegression | None = None,
    generator: torch.Generator | None = None,
) -> tuple[NWKernelRegression, list[float]]:
    """Fit `w` like d2l: full-batch SGD on the summed squared error, each input attending to the others.

    Returns the model and the summed loss of every epoch (computed before that epoch's update).
    """
    model = NWKernelRegression(generator=generator) if model is None else model
    keys, values = leave_one_out(x_train), leave_one_out(y_train)  # (n_train, n_train - 1)
    loss_fn = nn.MSELoss(reduction="none")
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    losses: list[float] = []
    for epoch in range(epochs):
        optimizer.zero_grad()
        loss = loss_fn(model(x_train, keys, values), y_train).sum()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        logger.info("epoch %d, loss %.6f, w %.4f", epoch + 1, losses[-1], model.w.item())
        if not math.isfinite(losses[-1]):
            raise FloatingPointError(f"loss diverged at epoch {epoch + 1}; lower the learning rate")
    return model, losses
