"""hf_bahdanau: d2l's attention translation models as first-class Hugging Face models.

Importing the package registers both model types (`bahdanau`, `d2l_transformer`) with `AutoConfig`,
`AutoModelForSeq2SeqLM` and `AutoModel` (the base model), and the translation pipeline (see
`hf_bahdanau.models.pipelines`); the `hf-bahdanau` command (started from `hf_bahdanau_cli`) registers them once
its arguments are parsed. Public names are imported on first use.
"""

import importlib
import sys
from typing import Any

__version__ = "0.1.0"

# Where each public name lives; a name is imported on first use (PEP 562).
_EXPORTS = {
    "models.attention": ("AdditiveAttention", "BilinearAttention", "DotProductAttention", "MultiHeadAttention",
                  "PositionalEncoding", "masked_softmax"),
    "decoding.attention_maps": ("AttentionMaps", "attention_maps", "plot_attention_maps"),
    "decoding.translator": ("Hypothesis", "Translation", "Translator"),
    "training.averaging": ("average_checkpoints",),
    "models.configuration_bahdanau": ("BahdanauConfig",),
    "models.configuration_transformer": ("TransformerConfig",),
    "models.configuration_translation": ("TranslationConfig",),
    "data.cleaning": ("normalize_d2l",),
    "data.corpora": ("load_parallel_corpus",),
    "data.tokenized": ("tokenize_corpus",),
    "decoding.engines.ctranslate2": ("CTranslate2Translator",),
    "decoding.export.ctranslate2": ("export_ctranslate2",),
    "kernel_regression": ("AveragePooling", "NonParametricPooling", "NWKernelRegression"),
    "metrics": ("bleu", "load_metric", "make_compute_metrics"),
    "models.modeling_bahdanau": ("BahdanauForConditionalGeneration", "BahdanauModel", "BahdanauPreTrainedModel"),
    "models.modeling_transformer": ("TransformerForConditionalGeneration", "TransformerModel",
                                    "TransformerPreTrainedModel"),
    "models.modeling_translation": ("TranslationForConditionalGeneration", "TranslationModel"),
    "models.pretrained_model": ("GENERATION_DEFAULTS", "TranslationPreTrainedModel"),
    "decoding.quantization": ("QUANTIZATIONS", "quantize_for_cpu"),
    "registry": ("MODEL_TYPES", "get_model_type", "register_auto_classes"),
    "models.pipelines": ("TASK", "TranslationPipeline", "register_pipeline", "save_for_pipeline"),
    "data.tokenization": ("train_tokenizer",),
    "visualization": ("show_heatmaps",),
}  # fmt: skip
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}


def __getattr__(name: str) -> Any:
    if name not in _MODULE_OF:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_MODULE_OF[name]}", __name__), name)
    globals()[name] = value
    return value


def register() -> None:
    """Register both model types with `AutoConfig` / `AutoModelForSeq2SeqLM`, and the translation pipeline, whose
    glossary, prefix, avoid and quality options the package's `Translator` serves."""
    from hf_bahdanau.decoding.quality.estimator import QualityEstimator
    from hf_bahdanau.decoding.translator import Translator
    from hf_bahdanau.models.pipelines import TranslationPipeline, register_pipeline
    from hf_bahdanau.registry import register_auto_classes

    register_auto_classes()
    register_pipeline()
    TranslationPipeline.translator_class = Translator
    TranslationPipeline.read_estimator = QualityEstimator.from_folder


if "hf_bahdanau_cli" not in sys.modules:  # the console script's module, imported first: `main` registers later
    register()

__all__ = [
    "AdditiveAttention",
    "AttentionMaps",
    "AveragePooling",
    "BahdanauConfig",
    "BahdanauForConditionalGeneration",
    "BahdanauModel",
    "BahdanauPreTrainedModel",
    "BilinearAttention",
    "CTranslate2Translator",
    "DotProductAttention",
    "GENERATION_DEFAULTS",
    "Hypothesis",
    "MODEL_TYPES",
    "MultiHeadAttention",
    "NWKernelRegression",
    "NonParametricPooling",
    "PositionalEncoding",
    "QUANTIZATIONS",
    "TASK",
    "TransformerConfig",
    "TransformerForConditionalGeneration",
    "TransformerModel",
    "TransformerPreTrainedModel",
    "Translation",
    "TranslationConfig",
    "TranslationForConditionalGeneration",
    "TranslationModel",
    "TranslationPipeline",
    "TranslationPreTrainedModel",
    "Translator",
    "attention_maps",
    "average_checkpoints",
    "bleu",
    "export_ctranslate2",
    "get_model_type",
    "load_metric",
    "load_parallel_corpus",
    "make_compute_metrics",
    "masked_softmax",
    "normalize_d2l",
    "plot_attention_maps",
    "quantize_for_cpu",
    "register",
    "save_for_pipeline",
    "show_heatmaps",
    "tokenize_corpus",
    "train_tokenizer",
]
