"""The base models, as transformers' `MarianModel` / `MarianMTModel`: `BahdanauModel` and `TransformerModel`
(encoder-decoder, no head) under `model` in the `...ForConditionalGeneration` models, `AutoModel` in-process and as
remote code, and folders with flat keys (`encoder.*`, `decoder.*`, `lm_head.*`) loading exactly."""

import json

import pytest
import torch
from helpers import MODEL_TYPES, make_model, random_ids
from safetensors.torch import load_file, save_file
from transformers import AutoModel, AutoModelForSeq2SeqLM
from transformers.modeling_outputs import Seq2SeqModelOutput

from hf_bahdanau import BahdanauModel, TransformerModel
from hf_bahdanau.models.modeling_translation import TranslationModel

BASE_CLASSES = {"bahdanau": BahdanauModel, "d2l_transformer": TransformerModel}
TIED = dict(tie_word_embeddings=True, tie_encoder_decoder_embeddings=True)


def source_and_target() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Source ids `(3, 6)` with row 1 left-padded, its mask, and decoder inputs `(3, 4)`."""
    src, mask = random_ids(3, 6, seed=3), torch.ones(3, 6, dtype=torch.long)
    mask[1, :2] = 0
    return src.masked_fill(mask == 0, 0), mask, random_ids(3, 4, seed=4)


def logits_of(model: torch.nn.Module) -> torch.Tensor:
    src, mask, tgt = source_and_target()
    with torch.no_grad():
        return model.eval()(input_ids=src, attention_mask=mask, decoder_input_ids=tgt).logits


def assert_same_weights_and_logits(loaded: torch.nn.Module, model: torch.nn.Module) -> None:
    """Every weight bit-equal (the same names); the logits equal up to float rounding: a model's weights read from a
    file sit at other memory alignments than those it was made with, and CPU kernels may then round differently."""
    weights, expected = loaded.state_dict(), model.state_dict()
    assert weights.keys() == expected.keys()
    assert [name for name in expected if not torch.equal(weights[name], expected[name])] == []
    torch.testing.assert_close(logits_of(loaded), logits_of(model))


def save_with_flat_keys(model: torch.nn.Module, folder) -> None:
    """Save `model` with flat keys: the same files, the weights without the `model.` prefix."""
    model.save_pretrained(folder)
    weights = load_file(folder / "model.safetensors")
    assert weights and all(key.startswith(("model.", "lm_head.")) for key in weights)
    save_file({key.removeprefix("model."): value for key, value in weights.items()}, folder / "model.safetensors",
              metadata={"format": "pt"})  # fmt: skip


@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_the_model_with_a_head_holds_its_base_model(model_type):
    """transformers' `test_model_base_model_prefix`: the attribute named `base_model_prefix` is the base model."""
    model = make_model(model_type)
    base_class = BASE_CLASSES[model_type]
    assert model.base_model_prefix == base_class.base_model_prefix == "model"
    assert type(model.model) is base_class and model.base_model is model.model
    assert model.model.base_model is model.model  # the base model is its own base
    assert model.get_encoder() is model.model.encoder and model.get_decoder() is model.model.decoder
    assert model.get_input_embeddings() is model.model.decoder.embed_tokens
    assert {name.split(".")[0] for name, _ in model.named_parameters()} == {"model", "lm_head"}
    assert not base_class.can_generate() and model.can_generate()


@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_the_base_model_gives_the_decoder_states_the_head_reads(model_type):
    model = make_model(model_type, output_attentions=True, output_hidden_states=True)
    src, mask, tgt = source_and_target()
    with torch.no_grad():
        full = model(input_ids=src, attention_mask=mask, decoder_input_ids=tgt)
        base = model.model(input_ids=src, attention_mask=mask, decoder_input_ids=tgt)
    assert type(base) is Seq2SeqModelOutput
    width = model.config.hidden_size
    assert base.last_hidden_state.shape == (3, 4, width)
    torch.testing.assert_close(model.lm_head(base.last_hidden_state), full.logits, rtol=0, atol=0)
    torch.testing.assert_close(base.encoder_last_hidden_state, full.encoder_last_hidden_state, rtol=0, atol=0)
    torch.testing.assert_close(base.cross_attentions, full.cross_attentions, rtol=0, atol=0)
    assert base.cross_attentions[0].shape[-2:] == (4, 6)
    with pytest.raises(ValueError, match="pass decoder_input_ids"):
        model.model(input_ids=src)


@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_automodel_gives_the_base_model_of_a_saved_folder(model_type, tmp_path):
    """In-process (registered classes): `AutoModel` loads the base model of a head model's folder, its `lm_head`
    weights left out without error; `AutoModelForSeq2SeqLM` the model with its head."""
    model = make_model(model_type)
    model.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    module = type(model).__module__.split(".")[-1]
    assert config["auto_map"]["AutoModel"] == f"{module}.{BASE_CLASSES[model_type].__name__}"
    assert config["auto_map"]["AutoModelForSeq2SeqLM"] == f"{module}.{type(model).__name__}"
    base, info = AutoModel.from_pretrained(tmp_path, output_loading_info=True)
    assert type(base) is BASE_CLASSES[model_type] and not info["missing_keys"]
    head = AutoModelForSeq2SeqLM.from_pretrained(tmp_path)  # loaded too: the same memory layout, bit-equal results
    assert type(head) is type(model)
    src, mask, tgt = source_and_target()
    with torch.no_grad():
        states = base(input_ids=src, attention_mask=mask, decoder_input_ids=tgt).last_hidden_state
        torch.testing.assert_close(head.lm_head(states), logits_of(head), rtol=0, atol=0)


@pytest.mark.slow  # the remote code loaded in a process of its own (conftest's without_the_package)
@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_remote_code_automodel_gives_the_base_model(model_type, without_the_package):
    """Without the package (remote code from the folder): `AutoModel` gives the base model, the same states."""
    found = without_the_package[model_type]  # loaded in a process where hf_bahdanau cannot be imported
    model, inputs = found["model"], found["inputs"]
    loaded = type(model).from_pretrained(found["folder"]).model  # as that process loads it
    with torch.no_grad():
        expected = loaded(input_ids=inputs["src"], attention_mask=inputs["mask"], decoder_input_ids=inputs["tgt"])
    torch.testing.assert_close(found["states"], expected.last_hidden_state, rtol=0, atol=0)
    assert found["modules"][1].startswith("transformers_modules"), found["modules"]
    base_name = BASE_CLASSES[model_type].__name__
    assert found["classes"] == [base_name, type(model).__name__, base_name]


@pytest.mark.parametrize("tied", [False, True], ids=["untied", "tied"])
@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_new_saves_use_the_base_model_prefix_and_load_exactly(model_type, tied, tmp_path):
    model = make_model(model_type, **(TIED if tied else {}))
    model.save_pretrained(tmp_path)
    keys = set(load_file(tmp_path / "model.safetensors"))
    assert {key.split(".")[0] for key in keys} == {"model", "lm_head"}
    assert "model.decoder.embed_tokens.weight" in keys
    # tied weights are stored once, as the decoder's embedding, and tied again after loading
    assert ("lm_head.weight" in keys, "model.encoder.embed_tokens.weight" in keys) == (not tied, not tied)
    expected_tied = {"model.decoder.embed_tokens.weight": "lm_head.weight"}  # the saved weight is the target
    if tied:
        expected_tied["model.encoder.embed_tokens.weight"] = "model.decoder.embed_tokens.weight"
    assert model._tied_weights_keys == expected_tied
    loaded, info = type(model).from_pretrained(tmp_path, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    assert (loaded.lm_head.weight is loaded.model.decoder.embed_tokens.weight) == tied
    assert (loaded.model.encoder.embed_tokens is loaded.model.decoder.embed_tokens) == tied  # one module, as Marian's
    assert_same_weights_and_logits(loaded, model)


@pytest.mark.parametrize("tied", [False, True], ids=["untied", "tied"])
@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_a_folder_with_flat_keys_loads_with_the_same_logits(model_type, tied, tmp_path):
    """Keys `encoder.*`, `decoder.*`, `lm_head.*`: `from_pretrained` (head model and `AutoModel`) loads every weight,
    the logits bit-equal; a new save nests them (`model.encoder.*`)."""
    model = make_model(model_type, **(TIED if tied else {}))
    with torch.no_grad():  # non-zero biases, so that every weight matters
        for parameter in model.parameters():
            parameter.add_(0.1 * torch.randn_like(parameter))
    old = tmp_path / "old"
    save_with_flat_keys(model, old)
    assert not any(key.startswith("model.") for key in load_file(old / "model.safetensors"))
    loaded, info = AutoModelForSeq2SeqLM.from_pretrained(old, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    assert (loaded.lm_head.weight is loaded.model.decoder.embed_tokens.weight) == tied
    assert_same_weights_and_logits(loaded, model)
    base = AutoModel.from_pretrained(old)  # strict: every weight of the base model found
    torch.testing.assert_close(base.encoder.embed_tokens.weight, model.model.encoder.embed_tokens.weight)
    loaded.save_pretrained(tmp_path / "new")
    assert all(key.startswith(("model.", "lm_head.")) for key in load_file(tmp_path / "new" / "model.safetensors"))


# make_model(model_type, seed=0), drawn in the head model's order: the sum of |weights| and lm_head.weight[0, :3]
SEED_0_WEIGHTS = {
    "bahdanau": (2274.130452922731, [-0.013815484941005707, 0.15710985660552979, -0.12940619885921478]),
    "d2l_transformer": (3335.407869534076, [-0.18987806141376495, 0.1422567516565323, -0.27320119738578796]),
}


@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_a_seed_draws_the_weights_in_the_head_models_order(model_type):
    """The model with a head initialises its base model's weights with its own, in one fixed order (the base model
    alone does it in its own `post_init`): seeded runs and tests draw the recorded models."""
    model = make_model(model_type)
    total, first = SEED_0_WEIGHTS[model_type]
    assert sum(float(value.double().abs().sum()) for value in model.state_dict().values()) == pytest.approx(total)
    assert model.lm_head.weight[0, :3].tolist() == pytest.approx(first)
    alone = BASE_CLASSES[model_type](model.config)  # initialised by itself: other draws, the same kind of weights
    assert alone.state_dict().keys() == model.model.state_dict().keys()
    assert not torch.equal(alone.decoder.embed_tokens.weight, model.model.decoder.embed_tokens.weight)


def test_the_shared_base_model_code_lives_in_one_file():
    """Both base models are `TranslationModel`s: forward, encode and embeddings are not copied per model type."""
    for base_class in BASE_CLASSES.values():
        assert issubclass(base_class, TranslationModel)
        assert {"forward", "encode", "get_encoder"}.isdisjoint(vars(base_class))
