"""hf_bahdanau: d2l's attention translation models as first-class Hugging Face models.

Importing the package registers `BahdanauConfig` / `BahdanauForConditionalGeneration` with `AutoConfig` and
`AutoModelForSeq2SeqLM`, and the translation pipeline under the task `"bahdanau-translation"`.
"""

from transformers import AutoConfig, AutoModelForSeq2SeqLM

from .attention import (
    AdditiveAttention,
    BilinearAttention,
    DotProductAttention,
    MultiHeadAttention,
    PositionalEncoding,
    masked_softmax,
)
from .configuration_bahdanau import BahdanauConfig
from .data import load_parallel_corpus, normalize_d2l, tokenize_corpus
from .kernel_regression import AveragePooling, NonParametricPooling, NWKernelRegression
from .metrics import bleu, load_metric, make_compute_metrics
from .modeling_bahdanau import BahdanauForConditionalGeneration, BahdanauPreTrainedModel
from .pipelines import TASK, TranslationPipeline, register_pipeline, save_for_pipeline, translate_with_attention
from .tokenization import train_tokenizer
from .visualization import show_heatmaps

__version__ = "0.1.0"

AutoConfig.register(BahdanauConfig.model_type, BahdanauConfig, exist_ok=True)
AutoModelForSeq2SeqLM.register(BahdanauConfig, BahdanauForConditionalGeneration, exist_ok=True)
BahdanauConfig.register_for_auto_class()
BahdanauForConditionalGeneration.register_for_auto_class("AutoModelForSeq2SeqLM")
register_pipeline()

__all__ = [
    "AdditiveAttention",
    "AveragePooling",
    "BahdanauConfig",
    "BahdanauForConditionalGeneration",
    "BahdanauPreTrainedModel",
    "BilinearAttention",
    "DotProductAttention",
    "MultiHeadAttention",
    "NWKernelRegression",
    "NonParametricPooling",
    "PositionalEncoding",
    "TASK",
    "TranslationPipeline",
    "bleu",
    "load_metric",
    "load_parallel_corpus",
    "make_compute_metrics",
    "masked_softmax",
    "normalize_d2l",
    "save_for_pipeline",
    "show_heatmaps",
    "tokenize_corpus",
    "train_tokenizer",
    "translate_with_attention",
]
