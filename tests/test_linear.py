"""`linear`: oneDNN products where they apply, the layer's own call everywhere else."""

import helpers
import pytest
import torch
from helpers import MODEL_TYPES, greedy_config, random_ids
from torch import nn

from hf_bahdanau import linear as linear_module
from hf_bahdanau import quantize_for_cpu
from hf_bahdanau.linear import linear, use_onednn

pytestmark = pytest.mark.skipif(not linear_module._has_onednn_linear(), reason="this torch build has no oneDNN linear")


@pytest.fixture
def onednn_calls(monkeypatch) -> list[tuple[tuple[int, ...], int]]:
    """oneDNN for every product, however small; the input shape and output size of each call."""
    calls, product = [], linear_module._onednn

    def spy(inputs: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        calls.append((tuple(inputs.shape), weight.shape[0]))
        return product(inputs, weight, bias)

    monkeypatch.setattr(linear_module, "_onednn", spy)
    monkeypatch.setattr(linear_module, "MIN_MULTIPLY_ADDS", 0)
    return calls


@pytest.mark.parametrize("shape", [(5, 33), (3, 1, 16), (2, 4, 6, 16)])
@pytest.mark.parametrize("bias", [True, False])
def test_linear_through_onednn_equals_the_layer(onednn_calls, shape, bias):
    torch.manual_seed(0)
    layer, inputs = nn.Linear(shape[-1], 10, bias=bias), torch.randn(*shape)
    with torch.no_grad(), use_onednn(True):
        ours = linear(layer, inputs)
        assert onednn_calls == [(shape, 10)]
        torch.testing.assert_close(ours, layer(inputs), atol=1e-5, rtol=1e-5)


class Tagged(torch.Tensor):
    """A tensor subclass."""


class Through(nn.Module):
    """`linear` on a layer, as a model calls it."""

    def __init__(self, layer: nn.Linear) -> None:
        super().__init__()
        self.layer = layer

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        return linear(self.layer, inputs)


@pytest.mark.filterwarnings("ignore:.*(deprecated|quantize_per_tensor)")
def test_linear_calls_the_layer_where_onednn_does_not_apply(onednn_calls, monkeypatch):
    torch.manual_seed(0)
    layer, inputs = nn.Linear(16, 8), torch.randn(4, 16)
    with use_onednn(True):
        linear(layer, inputs.requires_grad_()).sum().backward()  # training: autograd needs the layer's own op
        assert inputs.grad is not None and layer.weight.grad is not None
        with torch.no_grad():
            with torch.autocast("cpu", dtype=torch.bfloat16):
                assert linear(layer, inputs).dtype == torch.bfloat16
            assert linear(layer.double(), inputs.double()).dtype == torch.float64
            layer.float()
            handle = layer.register_forward_hook(lambda module, args, output: output + 1)
            plus_one = nn.functional.linear(inputs, layer.weight, layer.bias) + 1
            torch.testing.assert_close(linear(layer, inputs), plus_one)
            handle.remove()
            hook = nn.modules.module.register_module_forward_hook(lambda module, args, output: output * 2)
            torch.testing.assert_close(linear(layer, inputs), (plus_one - 1) * 2)  # global hooks run too
            hook.remove()
            with monkeypatch.context() as switched_off:
                switched_off.setattr(torch.backends.mkldnn, "enabled", False)
                linear(layer, inputs)
            linear(layer, inputs.as_subclass(Tagged))  # a tensor subclass may mean anything to the layer
            int8 = torch.ao.quantization.quantize_dynamic(nn.Sequential(layer), {nn.Linear}, dtype=torch.qint8)[0]
            assert linear(int8, inputs).shape == (4, 8)
            monkeypatch.setattr(linear_module, "MIN_MULTIPLY_ADDS", 4 * 16 * 8 + 1)
            linear(layer, inputs)  # one row short of paying
            assert onednn_calls == []
            monkeypatch.setattr(linear_module, "MIN_MULTIPLY_ADDS", 4 * 16 * 8)
            linear(layer, inputs)
            assert onednn_calls == [((4, 16), 8)]
    with torch.no_grad(), use_onednn(False):
        linear(layer, inputs)
    assert onednn_calls == [((4, 16), 8)]
    with use_onednn(True):
        layer.weight.requires_grad_(False)  # only the bias learns: still the layer's own op
        layer.bias.grad = None
        linear(layer, inputs.detach()).sum().backward()
        torch.testing.assert_close(layer.bias.grad, torch.full((8,), 4.0))
        with torch.no_grad():
            traced = torch.jit.trace(
                Through(layer.requires_grad_()), inputs.detach(), check_trace=False
            )  # sees the layer's op
        graph = str(traced.inlined_graph)
        assert "aten::linear" in graph and "_linear_pointwise" not in graph
    assert onednn_calls == [((4, 16), 8)]


@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_models_translate_alike_through_onednn(onednn_calls, model_type):
    model = helpers.make_model(model_type, 1, width=32, vocab_size=300)
    src, tgt = random_ids(6, 9, vocab=300), random_ids(6, 7, seed=1, vocab=300)
    configs = [greedy_config(max_new_tokens=10), greedy_config(max_new_tokens=10, num_beams=4)]
    with torch.no_grad():
        with use_onednn(False):
            logits = model(input_ids=src, decoder_input_ids=tgt).logits
            tokens = [model.generate(src, generation_config=config) for config in configs]
        assert onednn_calls == []
        with use_onednn(True):
            torch.testing.assert_close(model(input_ids=src, decoder_input_ids=tgt).logits, logits, atol=1e-5, rtol=1e-5)
            for config, expected in zip(configs, tokens, strict=True):
                torch.testing.assert_close(model.generate(src, generation_config=config), expected)
    assert ((6, 7, 32), 300) in onednn_calls  # the output layer, teacher-forced
    calls = len(onednn_calls)
    with torch.no_grad(), use_onednn(True):
        quantize_for_cpu(model).generate(src, generation_config=configs[0])
    assert {size for _, size in onednn_calls[calls:]} <= {1}  # int8 layers run as they are; a score vector is float


@pytest.mark.parametrize("setting, expected", [("1", True), ("0", False)])
def test_the_environment_decides_over_the_processor(monkeypatch, setting, expected):
    monkeypatch.setenv("HF_BAHDANAU_ONEDNN", setting)
    assert linear_module._onednn_pays() is expected


@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_a_training_step_is_alike_through_onednn(onednn_calls, model_type):
    """The loss's output layer (its logits and the hidden states' gradient) goes through oneDNN; the loss and every
    gradient stay those of torch's products."""
    model = helpers.make_model(model_type, 2, width=32, vocab_size=300, label_smoothing=0.1).train()
    src, labels = random_ids(6, 9, vocab=300), random_ids(6, 7, seed=3, vocab=300)

    def step() -> list[torch.Tensor]:
        model.zero_grad()
        loss = model(input_ids=src, labels=labels).loss
        loss.backward()
        return [loss.detach()] + [param.grad.clone() for param in model.parameters() if param.grad is not None]

    with use_onednn(False):
        expected = step()
    assert onednn_calls == []
    with use_onednn(True):
        ours = step()
    assert {size for _, size in onednn_calls} == {300, 32}  # the logits, then the hidden states' gradient
    assert len(ours) == len(expected) > 10
    for got, reference in zip(ours, expected, strict=True):
        torch.testing.assert_close(got, reference, atol=1e-5, rtol=1e-4)
