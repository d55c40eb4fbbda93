"""The tools users bring to a transformers model work on ours: hooks, in-place weight edits, PEFT LoRA,
`torch.compile`, bfloat16; and the model files that saved folders ship hold plain code only."""

import copy
import json
from pathlib import Path

import pytest
import torch
from helpers import MODEL_TYPES, greedy_config, make_model, random_ids
from torch import nn
from transformers.dynamic_module_utils import get_relative_import_files, get_relative_imports

import hf_bahdanau

PACKAGE = Path(hf_bahdanau.__file__).parent
MODELS = PACKAGE / "models"  # the files a saved folder ships
# The files a saved folder ships as remote code: every module of `models/` (configuration_*, modeling_*, the modules
# they import, pipelines.py).
SHIPPED = sorted(path for path in MODELS.glob("*.py") if path.name != "__init__.py")
# What plain model code never holds: private oneDNN ops, CPU detection, tensor addresses and version counters (a
# cache keyed on weights), transformers' private task table, torch's private hook dictionaries.
FORBIDDEN = ("mkldnn", "/proc/cpuinfo", "data_ptr(", "._version", "REMOVED_TASKS", "_forward_hooks")
# LoRA targets: the attention projections and the output layer.
LORA_TARGETS = {
    "bahdanau": ["W_q", "W_k", "lm_head"],
    "d2l_transformer": ["W_q", "W_k", "W_v", "W_o", "lm_head"],
}


@pytest.fixture(params=MODEL_TYPES)
def model_type(request) -> str:
    return request.param


def batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Source ids `(3, 6)` with one padded row, its mask, and labels `(3, 5)`."""
    src, labels = random_ids(3, 6), random_ids(3, 5, seed=3)
    mask = torch.ones(3, 6, dtype=torch.long)
    mask[2, 4:] = 0
    return src, mask, labels


def loss_and_logits(model: nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
    """The training loss (train mode, dropout 0) and the evaluation logits of `batch()`, detached."""
    src, mask, labels = batch()
    loss = model.train()(input_ids=src, attention_mask=mask, labels=labels).loss.detach()
    with torch.no_grad():
        logits = model.eval()(input_ids=src, attention_mask=mask, decoder_input_ids=labels).logits
    return loss, logits


def test_shipped_files_hold_no_cpu_specific_code_or_weight_cache():
    assert {path.name for path in SHIPPED} >= {"modeling_translation.py", "attention.py", "pipelines.py"}
    for path in SHIPPED:
        text = path.read_text()
        assert not [word for word in FORBIDDEN if word in text], path.name
    assert not (MODELS / "linear.py").exists()


def test_a_saved_folder_ships_the_model_files_and_no_quantization(model_type, tmp_path):
    make_model(model_type).save_pretrained(tmp_path)
    shipped = {path.name for path in tmp_path.glob("*.py")}
    assert shipped and shipped <= {path.name for path in SHIPPED}
    assert "modeling_translation.py" in shipped and "quantization.py" not in shipped
    assert {"pretrained_model.py", "cache_names.py", "input_checks.py", "attention.py"} <= shipped
    assert {"bahdanau_encoder.py", "bahdanau_decoder.py"} <= shipped or model_type != "bahdanau"
    assert not [name for name in shipped if "bahdanau" in name] or model_type == "bahdanau"  # another type's code


def test_each_module_a_folder_names_imports_every_sibling_it_needs_itself(model_type, tmp_path):
    """transformers 5.8 and 5.9 copy only a remote-code module's direct relative imports into their modules cache: a
    module that config.json's `auto_map` names imports every sibling file that its imports need, itself."""
    make_model(model_type).save_pretrained(tmp_path)
    auto_map = json.loads((tmp_path / "config.json").read_text())["auto_map"]
    for module in {reference.split(".")[0] for reference in auto_map.values()}:
        path = tmp_path / f"{module}.py"
        needed = {Path(file).stem for file in get_relative_import_files(path)}
        assert len(needed) > 1 or module.startswith("configuration_"), module
        assert needed - set(get_relative_imports(path)) == set(), module


def test_a_forward_hook_on_any_linear_layer_changes_the_loss_and_the_logits(model_type):
    model = make_model(model_type, bidirectional_encoder=True) if model_type == "bahdanau" else make_model(model_type)
    plain_loss, plain_logits = loss_and_logits(model)
    linears = [name for name, module in model.named_modules() if isinstance(module, nn.Linear)]
    assert "lm_head" in linears and len(linears) > 3
    for name in linears:
        handle = model.get_submodule(name).register_forward_hook(lambda module, args, output: output * 0.5 + 0.1)
        loss, logits = loss_and_logits(model)
        handle.remove()
        assert not torch.allclose(loss, plain_loss), name
        assert not torch.allclose(logits, plain_logits), name
    torch.testing.assert_close(loss_and_logits(model), (plain_loss, plain_logits))  # hooks removed


@pytest.mark.parametrize("edit", ["data", "no_grad_copy", "ema"])
def test_in_place_weight_edits_take_effect_on_the_next_forward(model_type, edit):
    """After decoding calls under `no_grad` (where a cache of the weights would pay), an in-place edit of the
    weights shows in the next forward: its logits are those of a model built afresh with the edited weights."""
    model, other = make_model(model_type), make_model(model_type, seed=7)
    src, mask, labels = batch()
    with torch.no_grad():
        for _ in range(4):
            model(input_ids=src, attention_mask=mask, decoder_input_ids=labels)
    embeddings = model.get_input_embeddings().weight
    if edit == "data":
        embeddings.data[3:].mul_(-2.0)
    elif edit == "no_grad_copy":
        with torch.no_grad():
            embeddings.copy_(other.get_input_embeddings().weight)
    else:  # an exponential moving average of another model's weights, as EMA training keeps
        with torch.no_grad():
            for average, weights in zip(model.parameters(), other.parameters(), strict=True):
                average.mul_(0.5).add_(weights, alpha=0.5)
    fresh = make_model(model_type, seed=3)
    fresh.load_state_dict(model.state_dict())
    with torch.no_grad():
        edited = model(input_ids=src, attention_mask=mask, decoder_input_ids=labels).logits
        expected = fresh(input_ids=src, attention_mask=mask, decoder_input_ids=labels).logits
        generated = model.generate(src, attention_mask=mask, generation_config=greedy_config(max_new_tokens=6))
        expected_generated = fresh.generate(src, attention_mask=mask, generation_config=greedy_config(max_new_tokens=6))
    torch.testing.assert_close(edited, expected)
    assert torch.equal(generated, expected_generated)


def test_peft_lora_on_attention_projections_and_lm_head(model_type):
    peft = pytest.importorskip("peft")
    model = make_model(model_type)
    plain_loss, _ = loss_and_logits(model)
    config = peft.LoraConfig(r=4, lora_alpha=8, target_modules=LORA_TARGETS[model_type], init_lora_weights=False)
    lora = peft.get_peft_model(copy.deepcopy(model), config)
    adapted = {name for name, module in lora.named_modules() if isinstance(module, peft.tuners.lora.LoraLayer)}
    assert {name.split(".")[-1] for name in adapted} == set(LORA_TARGETS[model_type])
    src, mask, labels = batch()
    loss = lora.train()(input_ids=src, attention_mask=mask, labels=labels).loss
    assert not torch.allclose(loss.detach(), plain_loss)  # the adapters take part in the training loss
    trainable = [param for param in lora.parameters() if param.requires_grad]
    assert all("lora_" in name for name, param in lora.named_parameters() if param.requires_grad)
    before = {name: param.detach().clone() for name, param in lora.named_parameters()}
    optimizer = torch.optim.SGD(trainable, lr=0.5)
    loss.backward()
    optimizer.step()
    moved = {name for name, param in lora.named_parameters() if not torch.equal(param, before[name])}
    assert moved and all("lora_" in name for name in moved)  # only adapter weights train
    for target in LORA_TARGETS[model_type]:  # every adapter gets a gradient through the loss, lm_head's too
        assert any(f"{target}.lora_B" in name for name in moved), target
    with torch.no_grad():
        adapted_logits = lora.eval()(input_ids=src, attention_mask=mask, decoder_input_ids=labels).logits
        merged = lora.merge_and_unload()
        assert not any(isinstance(module, peft.tuners.lora.LoraLayer) for module in merged.modules())
        merged_logits = merged(input_ids=src, attention_mask=mask, decoder_input_ids=labels).logits
    torch.testing.assert_close(merged_logits, adapted_logits, atol=1e-5, rtol=1e-5)


def test_bfloat16_model_runs_forward_and_generate_on_cpu(model_type):
    model = make_model(model_type).to(torch.bfloat16)
    src, mask, labels = batch()
    out = model.train()(input_ids=src, attention_mask=mask, labels=labels)
    assert out.logits.dtype == torch.bfloat16 and out.loss.isfinite()
    out.loss.backward()
    assert model.lm_head.weight.grad.dtype == torch.bfloat16
    model.eval()
    for config in (greedy_config(max_new_tokens=5), greedy_config(max_new_tokens=5, num_beams=3)):
        generated = model.generate(src, attention_mask=mask, generation_config=config)
        assert generated.shape[0] == 3 and 1 < generated.shape[1] <= 6


@pytest.mark.slow  # compiling takes some 5 s of CPU
def test_torch_compile_gives_eager_logits_on_a_padded_rnn_batch():
    """torch.compile's graph capture and AOTAutograd's tracing (`aot_eager`: the graph that the default inductor
    backend generates code from) give eager's logits on a padded RNN batch, whose packing breaks the graph; that a
    training forward and a cached decoding step of each model type compile into one graph each is
    test_model_contract.py's. Inductor's own code generation is left to torch: on a cold cache it costs half a minute
    of CPU per model type."""
    model = make_model("bahdanau")
    src, mask, labels = batch()
    compiled = copy.deepcopy(model)
    compiled.forward = torch.compile(compiled.forward, backend="aot_eager")  # what generate calls at each step
    with torch.no_grad():
        eager_logits = model(input_ids=src, attention_mask=mask, decoder_input_ids=labels).logits
        compiled_logits = compiled(input_ids=src, attention_mask=mask, decoder_input_ids=labels).logits
    torch.testing.assert_close(compiled_logits, eager_logits, atol=1e-5, rtol=1e-5)
