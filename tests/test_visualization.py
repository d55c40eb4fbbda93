import dataclasses
import importlib
import importlib.resources
import logging
from pathlib import Path

import matplotlib.image
import numpy as np
import pytest
import torch
from matplotlib.figure import Figure

from hf_bahdanau.visualization import plot_curves, plot_training_curves, show_heatmaps

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_show_heatmaps_grid_and_png(tmp_path):
    matrices = torch.softmax(torch.randn(2, 3, 4, 5), dim=-1)
    path = tmp_path / "sub" / "heatmaps.png"
    fig = show_heatmaps(matrices, "keys", "queries", titles=["a", "b", "c"], path=path)
    assert isinstance(fig, Figure)
    assert len(fig.axes) == 2 * 3 + 1  # panels + colorbar
    panels = fig.axes[:6]
    assert [ax.get_title() for ax in panels] == ["a", "b", "c"] * 2
    assert [ax.get_xlabel() for ax in panels] == ["", "", "", "keys", "keys", "keys"]
    assert [ax.get_ylabel() for ax in panels] == ["queries", "", "", "queries", "", ""]
    np.testing.assert_allclose(panels[4].images[0].get_array(), matrices[1, 1].numpy())
    assert len({ax.images[0].get_clim() for ax in panels}) == 1  # one colour scale for the shared colorbar
    assert path.read_bytes()[:8] == PNG_MAGIC
    image = matplotlib.image.imread(path)
    assert image.ndim == 3 and image.shape[0] > 50 and image.shape[1] > 50


def test_show_heatmaps_promotes_2d_and_sets_token_labels():
    matrix = np.eye(3)
    fig = show_heatmaps(
        matrix, "source", "target", xticklabels=["le", "chat", "<eos>"], yticklabels=["the", "cat", "<eos>"]
    )
    ax, _colorbar = fig.axes
    assert [t.get_text() for t in ax.get_xticklabels()] == ["le", "chat", "<eos>"]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["the", "cat", "<eos>"]
    np.testing.assert_array_equal(ax.images[0].get_array(), matrix)


@pytest.mark.parametrize("shape", [(4,), (2, 3, 4), (1, 1, 1, 2, 2)])
def test_show_heatmaps_rejects_bad_ndim(shape):
    with pytest.raises(ValueError, match=str(shape).replace("(", r"\(").replace(")", r"\)")):
        show_heatmaps(np.zeros(shape), "x", "y")


def test_show_heatmaps_rejects_bad_titles_and_labels():
    with pytest.raises(ValueError, match="titles"):
        show_heatmaps(np.zeros((1, 2, 3, 3)), "x", "y", titles=["only one"])
    with pytest.raises(ValueError, match="xticklabels"):
        show_heatmaps(np.zeros((3, 3)), "x", "y", xticklabels=["a", "b"])


LOG_HISTORY = [
    {"loss": 5.0, "grad_norm": 1.0, "learning_rate": 1e-3, "epoch": 0.5, "step": 10},
    {"loss": 4.0, "grad_norm": 1.0, "learning_rate": 1e-3, "epoch": 1.0, "step": 20},
    {"eval_loss": 4.5, "eval_bleu": 2.0, "epoch": 1.0, "step": 20},
    {"loss": 3.0, "grad_norm": 1.0, "learning_rate": 1e-3, "epoch": 1.5, "step": 30},
    {"loss": 2.5, "grad_norm": 1.0, "learning_rate": 1e-3, "epoch": 2.0, "step": 40},
    {"eval_loss": 3.5, "eval_bleu": 7.5, "epoch": 2.0, "step": 40},
    {"train_runtime": 1.0, "train_loss": 3.6, "epoch": 2.0, "step": 40},
]


def test_plot_training_curves(tmp_path):
    path = tmp_path / "curves.png"
    fig = plot_training_curves(LOG_HISTORY, path)
    loss_ax, bleu_ax = fig.axes
    lines = {line.get_label(): line for line in loss_ax.get_lines()}
    assert list(lines["loss"].get_xdata()) == [10, 20, 30, 40]
    assert list(lines["loss"].get_ydata()) == [5.0, 4.0, 3.0, 2.5]
    assert list(lines["eval_loss"].get_ydata()) == [4.5, 3.5]
    assert list(bleu_ax.get_lines()[0].get_ydata()) == [2.0, 7.5]
    assert path.read_bytes()[:8] == PNG_MAGIC


def test_plot_training_curves_without_metric_and_empty():
    fig = plot_training_curves([{"loss": 1.0, "step": 1}, {"loss": 0.5, "step": 2}])
    assert len(fig.axes) == 1
    with pytest.raises(ValueError, match="loss"):
        plot_training_curves([{"train_runtime": 1.0}])


def test_plot_curves(tmp_path):
    path = tmp_path / "c.png"
    fig = plot_curves([1, 2, 3], {"a": [3, 2, 1]}, "epoch", "loss", path=path, points={"p": ([1], [2])})
    ax = fig.axes[0]
    assert {line.get_label() for line in ax.get_lines()} == {"a", "p"}
    assert ax.get_xlabel() == "epoch" and ax.get_ylabel() == "loss"
    assert matplotlib.image.imread(path).size > 0


def attention(layers: int, heads: int, queries: int, keys: int) -> torch.Tensor:
    return torch.softmax(torch.randn(layers, heads, queries, keys), dim=-1)


@pytest.mark.slow  # draws three figures of a 500-token source
def test_attention_maps_of_a_long_source_stay_small_and_readable(tmp_path, monkeypatch):
    """A 500-token source (the position table's limit is 512): before, the encoder figure was 175 x 140 inches
    and `translate --heatmap` ran the machine out of memory."""
    module = importlib.import_module("hf_bahdanau.decoding.attention_maps")
    source, target = [f"s{i}" for i in range(500)], [f"t{i}" for i in range(20)]
    maps = module.AttentionMaps(
        translation="x" * 300,
        source_tokens=source,
        target_tokens=target,
        decoder_input_tokens=["<s>", *target[:-1]],
        cross=attention(3, 4, 20, 500),
        encoder=attention(3, 4, 500, 500),
        decoder=attention(3, 4, 20, 20),
    )
    calls = []
    monkeypatch.setattr(module, "show_heatmaps", lambda weights, **kwargs: calls.append(kwargs))
    module.plot_attention_maps(maps, "y" * 300, tmp_path / "a.png")
    cross, encoder, decoder = calls
    assert all(max(call["figsize"]) <= 40 for call in calls)
    assert cross["xticklabels"] is None and cross["yticklabels"] == target  # 500 labels would be unreadable
    assert encoder["xticklabels"] is None and encoder["yticklabels"] is None
    assert decoder["xticklabels"] == ["<s>", *target[:-1]] and decoder["figsize"] == (4 * 7.0, 3 * 7.0)
    assert all(len(line) <= 102 for call in calls for line in call["suptitle"].splitlines())
    monkeypatch.undo()
    one_panel = {name: getattr(maps, name)[:1, :1] for name in ("cross", "encoder", "decoder")}
    written = module.plot_attention_maps(dataclasses.replace(maps, **one_panel), "y" * 300, tmp_path / "a.png")
    assert [path.name for path in written] == ["a.png", "a-encoder.png", "a-decoder.png"]
    height, width = matplotlib.image.imread(written[1]).shape[:2]
    assert width <= 12 * 150 * 1.2 and height <= 12 * 150 * 1.3  # a 12-inch panel at 150 dpi; labels, title, colorbar


def test_no_public_name_of_the_package_is_also_one_of_its_modules():
    """`import hf_bahdanau.X` binds the package attribute X to the module: a public function of the same name
    (as `attention_maps` was, beside `attention_maps.py`) then turns into a module for every later import."""
    import hf_bahdanau

    modules = {path.stem for path in importlib.resources.files(hf_bahdanau).iterdir() if path.suffix == ".py"}
    assert not modules & set(hf_bahdanau.__all__)
    importlib.import_module("hf_bahdanau.decoding.attention_maps")
    from hf_bahdanau import attention_maps

    assert callable(attention_maps)


def test_training_curves_leave_out_a_bleu_panel_of_one_evaluation(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    once = [{"loss": 6.0, "step": 2}, {"loss": 5.0, "step": 4}, {"eval_loss": 5.5, "eval_bleu": 0.4, "step": 4}]
    path = tmp_path / "curves.png"
    figure = plot_training_curves(once, path)
    assert [axes.get_ylabel() for axes in figure.axes] == ["loss"]  # the losses, no one-dot BLEU panel
    assert caplog.text.count(f"wrote {path}") == 1
    twice = [*once, {"loss": 4.0, "step": 6}, {"eval_loss": 4.5, "eval_bleu": 1.2, "step": 6}]
    assert [axes.get_ylabel() for axes in plot_training_curves(twice).axes] == ["loss", "eval_bleu"]
    assert Path(path).stat().st_size > 0
