"""hf_bahdanau: d2l's attention translation models as first-class Hugging Face models.

Importing the package registers both model types (`bahdanau`, `d2l_transformer`) with `AutoConfig` and
`AutoModelForSeq2SeqLM`, and the translation pipeline (see `hf_bahdanau.pipelines`).
"""

from .attention import (
    AdditiveAttention,
    BilinearAttention,
    DotProductAttention,
    MultiHeadAttention,
    PositionalEncoding,
    masked_softmax,
)
from .attention_maps import AttentionMaps, attention_maps, plot_attention_maps
from .configuration_bahdanau import BahdanauConfig
from .configuration_transformer import TransformerConfig
from .configuration_translation import TranslationConfig
from .data import load_parallel_corpus, normalize_d2l, tokenize_corpus
from .kernel_regression import AveragePooling, NonParametricPooling, NWKernelRegression
from .metrics import bleu, load_metric, make_compute_metrics
from .modeling_bahdanau import BahdanauForConditionalGeneration, BahdanauPreTrainedModel
from .modeling_transformer import TransformerForConditionalGeneration, TransformerPreTrainedModel
from .modeling_translation import GENERATION_DEFAULTS, TranslationPreTrainedModel, quantize_for_cpu
from .models import MODEL_TYPES, get_model_type, register_auto_classes
from .pipelines import TASK, TranslationPipeline, register_pipeline, save_for_pipeline
from .tokenization import train_tokenizer
from .visualization import show_heatmaps

__version__ = "0.1.0"

register_auto_classes()
register_pipeline()

__all__ = [
    "AdditiveAttention",
    "AttentionMaps",
    "AveragePooling",
    "BahdanauConfig",
    "BahdanauForConditionalGeneration",
    "BahdanauPreTrainedModel",
    "BilinearAttention",
    "DotProductAttention",
    "GENERATION_DEFAULTS",
    "MODEL_TYPES",
    "MultiHeadAttention",
    "NWKernelRegression",
    "NonParametricPooling",
    "PositionalEncoding",
    "TASK",
    "TransformerConfig",
    "TransformerForConditionalGeneration",
    "TransformerPreTrainedModel",
    "TranslationConfig",
    "TranslationPipeline",
    "TranslationPreTrainedModel",
    "attention_maps",
    "bleu",
    "get_model_type",
    "load_metric",
    "load_parallel_corpus",
    "make_compute_metrics",
    "masked_softmax",
    "normalize_d2l",
    "plot_attention_maps",
    "quantize_for_cpu",
    "save_for_pipeline",
    "show_heatmaps",
    "tokenize_corpus",
    "train_tokenizer",
]
