"""hf_bahdanau: d2l's attention translation models as first-class Hugging Face models.

Importing the package registers `BahdanauConfig` / `BahdanauForConditionalGeneration` with `AutoConfig` and
`AutoModelForSeq2SeqLM`.
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
from .kernel_regression import AveragePooling, NonParametricPooling, NWKernelRegression
from .modeling_bahdanau import BahdanauForConditionalGeneration, BahdanauPreTrainedModel
from .visualization import show_heatmaps

__version__ = "0.1.0"

AutoConfig.register(BahdanauConfig.model_type, BahdanauConfig, exist_ok=True)
AutoModelForSeq2SeqLM.register(BahdanauConfig, BahdanauForConditionalGeneration, exist_ok=True)
BahdanauConfig.register_for_auto_class()
BahdanauForConditionalGeneration.register_for_auto_class("AutoModelForSeq2SeqLM")

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
    "masked_softmax",
    "show_heatmaps",
]
