"""What the configurations of both translation models share: vocabulary, dropout, tying, languages, ids.

This file is copied into saved model folders beside the models' own configuration files (`trust_remote_code`),
so it imports nothing but transformers, and it runs on every transformers 5 release: the configs are plain
`PretrainedConfig` subclasses with an `__init__` that takes every field as a keyword, which works where
`PretrainedConfig` is a plain class (5.0-5.5) and where it is a dataclass (5.6 on; a subclass with its own `__init__`
keeps it). Under transformers 4, importing it raises an ImportError naming the release it needs.
"""

from __future__ import annotations

import inspect
import os
from typing import Any

import transformers
from transformers import PretrainedConfig

if int(transformers.__version__.split(".")[0]) < 5:
    raise ImportError(f"this model needs transformers>=5.0,<6 (installed: {transformers.__version__})")

SPECIAL_IDS = ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id")
# Fields the tokenizer, the corpus or transformers decide: neither architecture shown on a card nor `train` options.
NOT_ARCHITECTURE = ("source_language", "target_language", "use_cache", "is_encoder_decoder", *SPECIAL_IDS)
# Training settings that some saved config.json files hold: the run's choice, not the architecture, so a config drops
# them (a run records them in its trainer_state.json).
TRAINING_SETTINGS = ("label_smoothing", "unlikelihood", "teacher_forcing_ratio")


class TranslationConfig(PretrainedConfig):
    r"""The fields every translation model of this package has; a model's config adds its architecture.

    Args:
        vocab_size (`int`, defaults to 8000):
            Size of the one vocabulary shared by source and target (a joint tokenizer).
        dropout (`float`, defaults to 0.1):
            The model's main dropout probability (d2l's `dropout`).
        tie_word_embeddings (`bool`, defaults to `False`):
            Share the decoder's input embedding with the output projection.
        tie_encoder_decoder_embeddings (`bool`, defaults to `False`):
            Share the encoder's embedding too (needs `tie_word_embeddings`).
        source_language, target_language (`str`, *optional*):
            Language codes of the translation direction the model was trained for (e.g. `"de"`, `"en"`).
        use_cache (`bool`, defaults to `True`):
            Return the decoder's state as `cache` so that generation continues from it.
        pad_token_id, bos_token_id, eos_token_id, decoder_start_token_id (`int`):
            Special token ids, matching the tokenizers of `hf_bahdanau.data.tokenization` (0, 1, 2, 1).
    """

    keys_to_ignore_at_inference = ["past_key_values", "cache"]  # the field's name per release

    def __init__(
        self,
        vocab_size: int = 8000,
        dropout: float = 0.1,
        tie_word_embeddings: bool = False,
        tie_encoder_decoder_embeddings: bool = False,
        source_language: str | None = None,
        target_language: str | None = None,
        use_cache: bool = True,
        pad_token_id: int | None = 0,
        bos_token_id: int | None = 1,
        eos_token_id: int | list[int] | None = 2,
        decoder_start_token_id: int | None = 1,
        **kwargs: Any,
    ) -> None:
        self.vocab_size = vocab_size
        self.dropout = dropout
        self.tie_encoder_decoder_embeddings = tie_encoder_decoder_embeddings
        self.source_language = source_language
        self.target_language = target_language
        self.use_cache = use_cache
        kwargs["is_encoder_decoder"] = True
        for name in TRAINING_SETTINGS:
            kwargs.pop(name, None)
        super().__init__(
            tie_word_embeddings=tie_word_embeddings,
            pad_token_id=pad_token_id,
            bos_token_id=bos_token_id,
            eos_token_id=eos_token_id,
            decoder_start_token_id=decoder_start_token_id,
            **kwargs,
        )
        # Set after the base class, which sets some of them itself on some releases.
        self.tie_word_embeddings = tie_word_embeddings
        for name, value in zip(
            SPECIAL_IDS, (pad_token_id, bos_token_id, eos_token_id, decoder_start_token_id), strict=True
        ):
            setattr(self, name, value)
        self.check()

    @classmethod
    def config_fields(cls) -> dict[str, inspect.Parameter]:
        """`{field: its __init__ parameter}` (annotation as a string, default) of this class and its bases (ours)."""
        found: dict[str, inspect.Parameter] = {}
        for klass in reversed([klass for klass in cls.__mro__ if issubclass(klass, TranslationConfig)]):
            parameters = inspect.signature(klass.__dict__["__init__"]).parameters.values()
            found.update({p.name: p for p in parameters if p.name != "self" and p.kind is p.POSITIONAL_OR_KEYWORD})
        return found

    def check(self) -> None:
        """Raise a ValueError naming the field for an invalid value or combination (also run before saving)."""
        self._check_positive("vocab_size")
        self._check_probability("dropout")
        if self.tie_encoder_decoder_embeddings and not self.tie_word_embeddings:
            raise ValueError("tie_encoder_decoder_embeddings needs tie_word_embeddings=True")
        for name in SPECIAL_IDS:
            value = getattr(self, name)
            if isinstance(value, int) and not 0 <= value < self.vocab_size:
                raise ValueError(f"{name}={value} is outside the vocabulary of size {self.vocab_size}")

    def _check_positive(self, *names: str) -> None:
        for name in names:
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")

    def _check_probability(self, *names: str) -> None:
        for name in names:
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ValueError(f"{name} must be in [0, 1), got {getattr(self, name)}")

    @property
    def custom_pipelines(self) -> dict[str, Any]:
        """The folder's pipelines (saved as remote code), less the tasks this process registered itself: for them,
        `pipeline(task, model=folder)` uses the registered class and needs no `trust_remote_code`."""
        if "custom_pipelines" not in self.__dict__:
            raise AttributeError("custom_pipelines")
        saved = self.__dict__["custom_pipelines"]
        from transformers.pipelines import PIPELINE_REGISTRY

        registered = PIPELINE_REGISTRY.supported_tasks
        return {
            task: spec
            for task, spec in saved.items()
            if getattr(registered.get(task, {}).get("impl"), "__name__", None) != spec.get("impl", "").split(".")[-1]
        }

    @custom_pipelines.setter
    def custom_pipelines(self, value: dict[str, Any]) -> None:
        self.__dict__["custom_pipelines"] = value

    @custom_pipelines.deleter
    def custom_pipelines(self) -> None:
        del self.__dict__["custom_pipelines"]

    def save_pretrained(self, save_directory: str | os.PathLike, *args: Any, **kwargs: Any) -> None:
        """Check the fields first, so that no folder holds a config that `from_pretrained` would reject."""
        self.check()
        super().save_pretrained(save_directory, *args, **kwargs)


__all__ = ["TranslationConfig"]
