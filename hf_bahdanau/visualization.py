"""Figures for attention weights and training curves.

Figures are plain `matplotlib.figure.Figure` objects (no pyplot global state, no backend switch), so they
can be saved from scripts and servers and still display in notebooks.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

logger = logging.getLogger(__name__)

Series = tuple[Sequence[float], Sequence[float]]  # (xs, ys)
_MARK_UP_TO = 30  # series this short get point markers, so e.g. a single evaluation stays visible


def save_figure(fig: Figure, path: str | Path, dpi: int = 150) -> Path:
    """Write `fig` as an image (format from the suffix, PNG by default), creating parent folders."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi, bbox_inches="tight", format=path.suffix[1:] or "png")
    logger.info("wrote %s", path)
    return path


def _as_4d(matrices: Any) -> np.ndarray:
    if hasattr(matrices, "detach"):  # torch.Tensor
        matrices = matrices.detach().float().cpu().numpy()
    array = np.asarray(matrices, dtype=float)
    if array.ndim == 2:
        return array[None, None]
    if array.ndim != 4:
        raise ValueError(
            "matrices must have shape (num_rows, num_cols, n_queries, n_keys) or (n_queries, n_keys), "
            f"got {array.shape}"
        )
    return array


def _set_ticklabels(ax: Axes, axis: str, labels: Sequence[str] | None, size: int) -> None:
    if labels is None:
        return
    if len(labels) != size:
        raise ValueError(f"{len(labels)} {axis}ticklabels for {size} {axis}-positions")
    if axis == "x":
        ax.set_xticks(range(size), labels, rotation=90)
    else:
        ax.set_yticks(range(size), labels)


def show_heatmaps(
    matrices: Any,
    xlabel: str,
    ylabel: str,
    titles: Sequence[str] | None = None,
    figsize: tuple[float, float] = (2.5, 2.5),
    cmap: str = "Reds",
    path: str | Path | None = None,
    xticklabels: Sequence[str] | None = None,
    yticklabels: Sequence[str] | None = None,
    row_labels: Sequence[str] | None = None,
    suptitle: str | None = None,
    colorbar_label: str | None = None,
) -> Figure:
    """d2l's grid of heatmaps with one shared colorbar.

    Args:
        matrices: `(num_rows, num_cols, n_queries, n_keys)` or `(n_queries, n_keys)` tensor/array.
        titles: one title per column; row_labels: one label per row (beside `ylabel`), e.g. layers.
        suptitle: a title over the whole figure; colorbar_label: what the colours measure.
        xticklabels, yticklabels: labels of the `n_keys` columns / `n_queries` rows (e.g. source and
            generated tokens).
        path: also write the figure there.

    All panels share one colour scale, so the colorbar is valid for every panel.
    """
    matrices = _as_4d(matrices)
    num_rows, num_cols, n_queries, n_keys = matrices.shape
    if titles is not None and len(titles) != num_cols:
        raise ValueError(f"{len(titles)} titles for {num_cols} columns")
    if row_labels is not None and len(row_labels) != num_rows:
        raise ValueError(f"{len(row_labels)} row_labels for {num_rows} rows")
    fig = Figure(figsize=figsize, layout="constrained")  # room for the titles, labels and colorbar
    axes = fig.subplots(num_rows, num_cols, sharex=True, sharey=True, squeeze=False)
    vmin, vmax = float(matrices.min()), float(matrices.max())
    for i, (row_axes, row_matrices) in enumerate(zip(axes, matrices, strict=True)):
        for j, (ax, matrix) in enumerate(zip(row_axes, row_matrices, strict=True)):
            image = ax.imshow(matrix, cmap=cmap, vmin=vmin, vmax=vmax)
            _set_ticklabels(ax, "x", xticklabels, n_keys)
            _set_ticklabels(ax, "y", yticklabels, n_queries)
            if i == num_rows - 1:
                ax.set_xlabel(xlabel)
            if j == 0:
                ax.set_ylabel(ylabel if row_labels is None else f"{row_labels[i]}\n{ylabel}")
            if titles is not None:
                ax.set_title(titles[j])
    colorbar = fig.colorbar(image, ax=axes, shrink=0.6)
    if colorbar_label is not None:
        colorbar.set_label(colorbar_label)
    if suptitle is not None:
        fig.suptitle(suptitle)
    if path is not None:
        save_figure(fig, path)
    return fig


def _draw(
    ax: Axes,
    lines: Mapping[str, Series],
    xlabel: str,
    ylabel: str,
    points: Mapping[str, Series] | None = None,
) -> None:
    for label, (xs, ys) in (points or {}).items():
        ax.plot(xs, ys, "o", alpha=0.5, label=label)
    for label, (xs, ys) in lines.items():
        ax.plot(xs, ys, marker="o" if len(xs) <= _MARK_UP_TO else None, markersize=3, label=label)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")


def plot_curves(
    xs: Sequence[float],
    ys: Mapping[str, Sequence[float]],
    xlabel: str,
    ylabel: str,
    path: str | Path | None = None,
    points: Mapping[str, Series] | None = None,
    figsize: tuple[float, float] = (4.5, 3.0),
    title: str | None = None,
) -> Figure:
    """Line plot of the named series `ys` (each as long as `xs`), plus optional named scatter `points`."""
    fig = Figure(figsize=figsize)
    ax = fig.subplots()
    _draw(ax, {label: (xs, values) for label, values in ys.items()}, xlabel, ylabel, points)
    if title is not None:
        ax.set_title(title)
    if path is not None:
        save_figure(fig, path)
    return fig


def _series(log_history: Sequence[Mapping[str, Any]], key: str) -> Series:
    entries = [(entry.get("step", i), entry[key]) for i, entry in enumerate(log_history) if key in entry]
    return [step for step, _ in entries], [value for _, value in entries]


LOSS_KEYS = ("loss", "eval_loss")  # the entries of a log history that training curves draw


def has_loss(log_history: Sequence[Mapping[str, Any]]) -> bool:
    """Whether `log_history` logs a loss to draw (`--logging_steps` above the steps run and no evaluation log none)."""
    return any(key in entry for entry in log_history for key in LOSS_KEYS)


def plot_training_curves(
    log_history: Sequence[Mapping[str, Any]],
    path: str | Path | None = None,
    figsize: tuple[float, float] = (8.0, 3.0),
    metric: str = "eval_bleu",
) -> Figure:
    """Plot a `transformers` Trainer's `state.log_history`: train/eval loss vs step, `metric` beside it.

    The metric panel is drawn only when at least two entries log `metric`: one evaluation is a dot, not a curve (its
    score is in the log and `trainer_state.json`).
    """
    if not has_loss(log_history):
        raise ValueError("log_history has no 'loss' or 'eval_loss' entries")
    losses = {key: _series(log_history, key) for key in LOSS_KEYS}
    losses = {key: series for key, series in losses.items() if series[0]}
    metric_steps, metric_values = _series(log_history, metric)
    fig = Figure(figsize=figsize)
    curve = len(metric_values) >= 2
    axes = fig.subplots(1, 2 if curve else 1, squeeze=False)[0]
    _draw(axes[0], losses, "step", "loss")
    if curve:
        _draw(axes[1], {metric: (metric_steps, metric_values)}, "step", metric)
    fig.tight_layout()
    if path is not None:
        save_figure(fig, path)
    return fig
