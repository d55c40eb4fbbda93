"""Configuration of d2l's Transformer encoder-decoder (model type `d2l_transformer`)."""

from __future__ import annotations

from typing import Any

from .configuration_translation import TranslationConfig

ACTIVATIONS = ("relu", "gelu", "gelu_new", "silu", "swish")


class TransformerConfig(TranslationConfig):
    r"""Configuration of a [`TransformerForConditionalGeneration`]: d2l's chapter "The Transformer Architecture".

    With the defaults (post-norm AddNorm, embeddings scaled by sqrt(d_model) before the sinusoidal encoding is added,
    attention projections without bias, a ReLU position-wise FFN, untied embeddings) the model is exactly d2l's
    `TransformerEncoder` + `TransformerDecoder`. The fields every translation model shares (`vocab_size`,
    `dropout`, tying, languages, special ids) are documented in [`TranslationConfig`].

    Args:
        d_model (`int`, defaults to 256):
            Width of the embeddings and of every layer's input and output (d2l's `num_hiddens`).
        encoder_layers (`int`, defaults to 2):
            Number of encoder blocks (d2l's `num_blks`).
        decoder_layers (`int`, defaults to 2):
            Number of decoder blocks.
        attention_heads (`int`, defaults to 4):
            Heads of every multi-head attention; `d_model` must be divisible by it.
        ffn_dim (`int`, defaults to 64):
            Hidden size of the position-wise feed-forward network (d2l's `ffn_num_hiddens`).
        activation_function (`str`, defaults to `"relu"`):
            Activation of the feed-forward network: one of `"relu"`, `"gelu"`, `"gelu_new"`, `"silu"`, `"swish"`.
        dropout (`float`, defaults to 0.1):
            Dropout after the positional encoding and on every sub-layer's output before the residual addition.
        attention_dropout (`float`, *optional*):
            Dropout on the attention weights; defaults to `dropout` (as d2l).
        attention_bias (`bool`, defaults to `False`):
            Give the query, key, value and output projections a bias (d2l: no bias).
        max_position_embeddings (`int`, defaults to 1024):
            Longest sequence the sinusoidal position table covers; a longer source is an error.
        norm_first (`bool`, defaults to `False`):
            Pre-norm blocks (`x + sublayer(norm(x))`, with a final norm after each stack) instead of d2l's post-norm
            AddNorm (`norm(x + sublayer(x))`); pre-norm trains more stably with deep stacks and large learning rates.
        scale_embedding (`bool`, defaults to `True`):
            Multiply the embeddings by sqrt(d_model) before adding the positional encoding (as d2l).
        init_std (`float`, defaults to 1.0):
            Standard deviation of the embeddings' normal initialisation (1.0 as d2l and PyTorch; `d_model ** -0.5`
            keeps scaled, tied embeddings and the first logits of unit size).
        tie_word_embeddings (`bool`, defaults to `False`):
            Share the decoder's input embedding with the output projection.
    """

    model_type = "d2l_transformer"
    attribute_map = {
        "num_hidden_layers": "decoder_layers",
        "num_attention_heads": "attention_heads",
        "hidden_size": "d_model",
    }

    def __init__(
        self,
        d_model: int = 256,
        encoder_layers: int = 2,
        decoder_layers: int = 2,
        attention_heads: int = 4,
        ffn_dim: int = 64,
        activation_function: str = "relu",
        attention_dropout: float | None = None,
        attention_bias: bool = False,
        max_position_embeddings: int = 1024,
        norm_first: bool = False,
        scale_embedding: bool = True,
        init_std: float = 1.0,
        **kwargs: Any,
    ) -> None:
        self.d_model = d_model
        self.encoder_layers = encoder_layers
        self.decoder_layers = decoder_layers
        self.attention_heads = attention_heads
        self.ffn_dim = ffn_dim
        self.activation_function = activation_function
        self.attention_dropout = kwargs.get("dropout", 0.1) if attention_dropout is None else attention_dropout
        self.attention_bias = attention_bias
        self.max_position_embeddings = max_position_embeddings
        self.norm_first = norm_first
        self.scale_embedding = scale_embedding
        self.init_std = init_std
        super().__init__(**kwargs)

    def check(self) -> None:
        super().check()
        self._check_positive(
            "d_model", "encoder_layers", "decoder_layers", "attention_heads", "ffn_dim", "max_position_embeddings"
        )
        self._check_probability("attention_dropout")
        if self.d_model % self.attention_heads:
            raise ValueError(
                f"d_model ({self.d_model}) must be divisible by attention_heads ({self.attention_heads}): each head "
                "gets d_model / attention_heads dimensions"
            )
        if self.activation_function not in ACTIVATIONS:
            raise ValueError(f"activation_function must be one of {ACTIVATIONS}, got {self.activation_function!r}")
        if self.init_std <= 0:
            raise ValueError(f"init_std must be positive, got {self.init_std}")


__all__ = ["TransformerConfig"]
