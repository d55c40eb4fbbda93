"""Configuration of the RNN encoder-decoder with Bahdanau attention."""

from __future__ import annotations

from typing import Any

from .configuration_translation import TranslationConfig

RNN_TYPES = ("gru", "lstm")
DECODER_TYPES = ("d2l", "cgru")
ATTENTION_TYPES = ("additive", "dot", "general")


class BahdanauConfig(TranslationConfig):
    r"""Configuration of a [`BahdanauForConditionalGeneration`]: d2l's "Bahdanau attention" seq2seq.

    With the defaults (unidirectional GRU, additive attention, untied embeddings, no embedding dropout) the
    model is exactly d2l's `Seq2SeqEncoder` + `Seq2SeqAttentionDecoder`.

    The fields every translation model shares (`vocab_size`, `dropout`, tying, languages, special ids) are
    documented in [`TranslationConfig`]; here they mean:

    Args:
        embedding_size (`int`, defaults to 256):
            Size of the token embeddings (d2l's `embed_size`).
        hidden_size (`int`, defaults to 256):
            Hidden size of the encoder and decoder RNNs (d2l's `num_hiddens`), per direction.
        encoder_layers (`int`, defaults to 2):
            Number of stacked encoder RNN layers.
        decoder_layers (`int`, defaults to 2):
            Number of stacked decoder RNN layers. When it differs from `encoder_layers`, every decoder layer
            starts from the encoder's top layer.
        rnn_type (`str`, defaults to `"gru"`):
            `"gru"` or `"lstm"`.
        decoder_type (`str`, defaults to `"d2l"`):
            `"d2l"` (d2l's decoder: the previous state attends, one RNN reads `[context; embedding]`) or `"cgru"`
            (the conditional GRU of Nematus and LIUM: a GRU reads the embedding, its new state attends, a second GRU
            reads the context; needs `rnn_type="gru"`).
        bidirectional_encoder (`bool`, defaults to `False`):
            Run the encoder in both directions; its outputs are then `2 * hidden_size` wide and a learned bridge
            (`tanh(W [h_fwd; h_bwd])`) maps its final state to the decoder's initial state.
        attention_type (`str`, defaults to `"additive"`):
            Scoring function: `"additive"` (Bahdanau/MLP), `"dot"` (scaled dot product; needs keys as wide as the
            decoder state, so no bidirectional encoder) or `"general"` (Luong's bilinear `q^T W k`).
        attention_hidden_size (`int`, *optional*):
            Hidden size of the additive scorer; defaults to `hidden_size` (as d2l).
        dropout (`float`, defaults to 0.1):
            Dropout between stacked RNN layers and on the attention weights (d2l's `dropout`).
        embedding_dropout (`float`, defaults to 0.0):
            Dropout on the embeddings and on the decoder output before the vocabulary projection (0 in d2l).
        tie_word_embeddings (`bool`, defaults to `False`):
            Share the decoder's input embedding with the output projection (needs `embedding_size ==
            hidden_size`).
        use_cache (`bool`, defaults to `True`):
            Return the recurrent state as `cache` so generation continues from it.
    """

    model_type = "bahdanau"
    attribute_map = {"num_hidden_layers": "decoder_layers"}

    def __init__(
        self,
        embedding_size: int = 256,
        hidden_size: int = 256,
        encoder_layers: int = 2,
        decoder_layers: int = 2,
        rnn_type: str = "gru",
        decoder_type: str = "d2l",
        bidirectional_encoder: bool = False,
        attention_type: str = "additive",
        attention_hidden_size: int | None = None,
        embedding_dropout: float = 0.0,
        **kwargs: Any,
    ) -> None:
        self.embedding_size = embedding_size
        self.hidden_size = hidden_size
        self.encoder_layers = encoder_layers
        self.decoder_layers = decoder_layers
        self.rnn_type = rnn_type
        self.decoder_type = decoder_type
        self.bidirectional_encoder = bidirectional_encoder
        self.attention_type = attention_type
        self.attention_hidden_size = hidden_size if attention_hidden_size is None else attention_hidden_size
        self.embedding_dropout = embedding_dropout
        super().__init__(**kwargs)

    def check(self) -> None:
        super().check()
        if self.rnn_type not in RNN_TYPES:
            raise ValueError(f"rnn_type must be one of {RNN_TYPES}, got {self.rnn_type!r}")
        if self.decoder_type not in DECODER_TYPES:
            raise ValueError(f"decoder_type must be one of {DECODER_TYPES}, got {self.decoder_type!r}")
        if self.decoder_type == "cgru" and self.rnn_type != "gru":
            raise ValueError(f"decoder_type='cgru' is a GRU decoder: it needs rnn_type='gru', got {self.rnn_type!r}")
        if self.attention_type not in ATTENTION_TYPES:
            raise ValueError(f"attention_type must be one of {ATTENTION_TYPES}, got {self.attention_type!r}")
        self._check_positive("embedding_size", "hidden_size", "encoder_layers", "decoder_layers")
        self._check_probability("embedding_dropout")
        if self.attention_type == "dot" and self.bidirectional_encoder:
            raise ValueError(
                "attention_type='dot' needs keys as wide as the decoder state, but a bidirectional encoder "
                f"gives keys of size {2 * self.hidden_size} for queries of size {self.hidden_size}: "
                "use 'additive' or 'general'"
            )
        if self.tie_word_embeddings and self.embedding_size != self.hidden_size:
            raise ValueError(
                f"tie_word_embeddings needs embedding_size ({self.embedding_size}) == hidden_size "
                f"({self.hidden_size}): the output projection maps decoder states to the vocabulary"
            )

    @property
    def encoder_output_size(self) -> int:
        """Width of the encoder outputs (the attention keys and values)."""
        return self.hidden_size * (2 if self.bidirectional_encoder else 1)


__all__ = ["BahdanauConfig"]
