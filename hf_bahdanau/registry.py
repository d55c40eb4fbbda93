"""The registry of model types: the one place that knows which configuration and model classes exist.

`__init__`, training and the command line read it; nothing else names a model type. Not copied into saved
folders (the remote code of a folder is its own model's files).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

from transformers import AutoConfig, AutoModel, AutoModelForSeq2SeqLM, PretrainedConfig

from hf_bahdanau.choices import EXPORT_INFO
from hf_bahdanau.errors import InputError, as_input_error
from hf_bahdanau.json_files import read_json
from hf_bahdanau.models.configuration_bahdanau import BahdanauConfig
from hf_bahdanau.models.configuration_transformer import TransformerConfig
from hf_bahdanau.models.configuration_translation import TranslationConfig
from hf_bahdanau.models.modeling_bahdanau import BahdanauForConditionalGeneration
from hf_bahdanau.models.modeling_transformer import TransformerForConditionalGeneration
from hf_bahdanau.models.modeling_translation import TranslationForConditionalGeneration


class ModelType(NamedTuple):
    config_class: type[TranslationConfig]
    model_class: type[TranslationForConditionalGeneration]  # its base model: model_class.base_model_class


MODEL_TYPES: dict[str, ModelType] = {
    BahdanauConfig.model_type: ModelType(BahdanauConfig, BahdanauForConditionalGeneration),
    TransformerConfig.model_type: ModelType(TransformerConfig, TransformerForConditionalGeneration),
}
# The short names the command line takes (`--model_type transformer`).
MODEL_TYPE_NAMES = {"bahdanau": BahdanauConfig.model_type, "transformer": TransformerConfig.model_type}


def get_model_type(name: str) -> ModelType:
    """The classes of a model type, by its short name (`bahdanau`, `transformer`) or its `model_type`."""
    model_type = MODEL_TYPE_NAMES.get(name, name)
    if model_type not in MODEL_TYPES:
        raise InputError(f"unknown model type {name!r}; choose one of {', '.join(MODEL_TYPE_NAMES)}")
    return MODEL_TYPES[model_type]


EXPORTS = {  # what each format of `export` is, and how to use it
    "ctranslate2": "a CTranslate2 export: translate with it through --engine ctranslate2",
    "onnx": "an ONNX export: translate with it through --engine onnxruntime",
    "transformers": "a standard transformers export, for transformers without this package: give its model folder",
    "web": "a web export, a page: serve it with a static file server and open its index.html",
}


def check_saved_model_type(path: str | os.PathLike[str]) -> ModelType:
    """The classes of a saved model (a folder or Hub id) by its config.json's `model_type`, read as data; a one-line
    InputError for a type this package does not have (its code would have to come from the folder, and the command
    line never runs a folder's code: every load passes `trust_remote_code=False`)."""
    if (Path(path) / EXPORT_INFO).is_file():  # an export of this package holds no model it loads
        found = read_json(Path(path) / EXPORT_INFO).get("format", "ctranslate2")  # (a CTranslate2 one names none)
        raise InputError(f"{path} is {EXPORTS.get(found, f'an export ({found!r})')}")
    with as_input_error(ValueError, OSError):  # no config.json, one that is not JSON, a Hub id offline
        config, _ = PretrainedConfig.get_config_dict(str(path))
    model_type = config.get("model_type")
    if model_type not in MODEL_TYPES:
        raise InputError(
            f"{path}: model type {model_type!r} is not one of this package's ({', '.join(MODEL_TYPES)}); "
            "hf-bahdanau never runs code from a model folder"
        )
    return MODEL_TYPES[model_type]


def register_auto_classes() -> None:
    """Register every model type with `AutoConfig`, `AutoModelForSeq2SeqLM` (the model with its head) and `AutoModel`
    (the base model), in-process and as remote code."""
    for config_class, model_class in MODEL_TYPES.values():
        AutoConfig.register(config_class.model_type, config_class, exist_ok=True)
        AutoModelForSeq2SeqLM.register(config_class, model_class, exist_ok=True)
        AutoModel.register(config_class, model_class.base_model_class, exist_ok=True)
        config_class.register_for_auto_class()
        model_class.register_for_auto_class("AutoModelForSeq2SeqLM")
        model_class.base_model_class.register_for_auto_class("AutoModel")


__all__ = [
    "MODEL_TYPES",
    "MODEL_TYPE_NAMES",
    "ModelType",
    "check_saved_model_type",
    "get_model_type",
    "register_auto_classes",
]
