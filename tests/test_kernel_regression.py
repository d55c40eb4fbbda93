"""Nadaraya-Watson attention pooling (hf_bahdanau.kernel_regression) against d2l's chapter, and the script that
reproduces it (scripts/nadaraya_watson.py)."""

import logging
import math

import pytest
import torch
from conftest import load_script

from hf_bahdanau.kernel_regression import (
    AveragePooling,
    NonParametricPooling,
    NWKernelRegression,
    kernel_weights,
    leave_one_out,
    make_nw_data,
    train_nw,
)


@pytest.fixture(scope="module")
def data():
    return make_nw_data(seed=0)


def test_data_matches_chapter_and_is_reproducible(data):
    assert data.x_train.shape == (50,) and data.x_test.shape == (50,)
    assert torch.all(data.x_train[1:] >= data.x_train[:-1])
    assert 0 <= data.x_train.min() and data.x_train.max() < 5
    torch.testing.assert_close(data.y_truth, 2 * torch.sin(data.x_test) + data.x_test**0.8)
    noise = data.y_train - (2 * torch.sin(data.x_train) + data.x_train**0.8)
    assert 0.3 < noise.std() < 0.7
    again = make_nw_data(seed=0)
    assert torch.equal(again.x_train, data.x_train) and torch.equal(again.y_train, data.y_train)
    assert not torch.equal(make_nw_data(seed=1).x_train, data.x_train)


def test_nonparametric_weights_match_hand_computation():
    queries, keys = torch.tensor([0.0, 1.0]), torch.tensor([0.0, 1.0, 3.0])
    values = torch.tensor([1.0, 2.0, 4.0])
    pooling = NonParametricPooling()
    out = pooling(queries, keys, values)
    expected = []
    for q in queries.tolist():
        scores = [math.exp(-((q - k) ** 2) / 2) for k in keys.tolist()]
        expected.append([s / sum(scores) for s in scores])
    expected = torch.tensor(expected)
    torch.testing.assert_close(pooling.attention_weights, expected)
    torch.testing.assert_close(out, expected @ values)


@pytest.mark.parametrize(
    "pooling",
    [AveragePooling(), NWKernelRegression(init_w=3.0)]
    + [NonParametricPooling(kernel) for kernel in ("gaussian", "boxcar", "constant", "epanechikov")],
    ids=lambda p: type(p).__name__ + getattr(p, "kernel", ""),
)
def test_weights_are_distributions(pooling, data):
    with torch.no_grad():
        pooling(data.x_test, data.x_train, data.y_train)
    weights = pooling.attention_weights
    assert weights.shape == (50, 50)
    assert torch.all(weights >= 0)
    torch.testing.assert_close(weights.sum(dim=1), torch.ones(50))


def test_boxcar_without_keys_in_support_gives_zero_weights():
    assert torch.equal(kernel_weights(torch.tensor([[5.0, -3.0]]), "boxcar"), torch.zeros(1, 2))


def test_average_pooling_is_mean_and_constant_kernel_matches_it(data):
    out = AveragePooling()(data.x_test, data.x_train, data.y_train)
    torch.testing.assert_close(out, data.y_train.mean().expand(50))
    torch.testing.assert_close(NonParametricPooling("constant")(data.x_test, data.x_train, data.y_train), out)


def test_kernel_pooling_beats_average_pooling(data):
    def mse(pooling):
        return torch.mean((pooling(data.x_test, data.x_train, data.y_train) - data.y_truth) ** 2).item()

    average = mse(AveragePooling())
    assert mse(NonParametricPooling()) < 0.7 * average
    assert mse(NonParametricPooling("epanechikov")) < 0.7 * average


def test_parametric_with_w_one_equals_nonparametric_and_keys_broadcast(data):
    model = NWKernelRegression(init_w=1.0)
    shared = model(data.x_test, data.x_train, data.y_train)
    tiled = model(data.x_test, data.x_train.repeat((50, 1)), data.y_train.repeat((50, 1)))  # d2l's call
    torch.testing.assert_close(shared, tiled)
    torch.testing.assert_close(shared, NonParametricPooling()(data.x_test, data.x_train, data.y_train))


def test_gradient_reaches_w(data):
    model = NWKernelRegression(init_w=2.0)
    loss = ((model(data.x_train, leave_one_out(data.x_train), leave_one_out(data.y_train)) - data.y_train) ** 2).sum()
    loss.backward()
    assert model.w.grad is not None and model.w.grad.abs().item() > 0


def test_leave_one_out_drops_the_diagonal():
    x = torch.tensor([1.0, 2.0, 3.0])
    assert torch.equal(leave_one_out(x), torch.tensor([[2.0, 3.0], [1.0, 3.0], [1.0, 2.0]]))


def test_training_loss_falls_and_sharpens_the_kernel(data):
    model, losses = train_nw(data.x_train, data.y_train, generator=torch.Generator().manual_seed(0))
    assert len(losses) == 5
    assert losses[-1] < 0.6 * losses[0]
    assert abs(model.w.item()) > 2  # narrower than the fixed Gaussian of width 1
    with torch.no_grad():
        trained = model(data.x_test, data.x_train, data.y_train)
        fixed = NonParametricPooling()(data.x_test, data.x_train, data.y_train)
    assert torch.mean((trained - data.y_truth) ** 2) < torch.mean((fixed - data.y_truth) ** 2)


def test_bad_shapes_raise():
    with pytest.raises(ValueError, match="queries"):
        AveragePooling()(torch.zeros(2, 3), torch.zeros(3), torch.zeros(3))
    with pytest.raises(ValueError, match="keys"):
        AveragePooling()(torch.zeros(2), torch.zeros(3, 4), torch.zeros(4))
    with pytest.raises(ValueError, match="kernel"):
        NonParametricPooling("triangle")


@pytest.mark.slow  # the script end to end: trains, draws four figures
def test_script_writes_figures(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    load_script("nadaraya_watson").main(["--output-dir", str(tmp_path)])
    for name in ("predictions", "attention_nonparametric", "attention_parametric", "training_loss"):
        assert (tmp_path / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "test MSE parametric" in caplog.text and "learned w" in caplog.text
