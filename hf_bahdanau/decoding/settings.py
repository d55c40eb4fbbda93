"""What a search does (`SearchSettings`): a generation config's settings, checked, with a call's on top.

It imports neither torch nor transformers, so that the CTranslate2 engine, which takes the same settings, needs
neither; `search` runs them.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any

from hf_bahdanau.errors import InputError

if TYPE_CHECKING:
    from transformers import GenerationConfig, PretrainedConfig, PreTrainedModel


@dataclass(frozen=True)
class SearchSettings:
    """What a search does; `from_config` reads a generation config and refuses what the search cannot do."""

    eos_token_id: int
    decoder_start_token_id: int
    pad_token_id: int | None = None
    max_new_tokens: int = 128  # new tokens, `</s>` included
    num_beams: int = 1
    num_return_sequences: int = 1
    length_penalty: float = 1.0  # beam scores are divided by length ** length_penalty
    early_stopping: bool | str = False  # generate()'s: True, False (its heuristic) or "never"
    do_sample: bool = False
    temperature: float = 1.0
    top_k: int | None = 50
    top_p: float = 1.0

    # Settings of a generation config whose generate() default is the only value the search takes.
    UNSUPPORTED = {
        "no_repeat_ngram_size": 0, "repetition_penalty": 1.0, "min_length": 0, "min_new_tokens": None,
        "num_beam_groups": 1, "diversity_penalty": 0.0, "bad_words_ids": None, "force_words_ids": None,
        "constraints": None, "forced_bos_token_id": None, "forced_eos_token_id": None, "suppress_tokens": None,
        "begin_suppress_tokens": None, "typical_p": 1.0, "epsilon_cutoff": 0.0, "eta_cutoff": 0.0,
        "encoder_no_repeat_ngram_size": 0, "encoder_repetition_penalty": 1.0, "exponential_decay_length_penalty": None,
        "max_time": None, "stop_strings": None, "renormalize_logits": False, "remove_invalid_values": False,
    }  # fmt: skip

    @classmethod
    def from_config(
        cls, config: GenerationConfig, model_config: PretrainedConfig | None = None, **overrides: Any
    ) -> SearchSettings:
        """The settings of `config` (special ids missing there from `model_config`), `overrides` (None: keep) on top.
        ValueError names a setting the search does not do (e.g. `no_repeat_ngram_size=3`)."""
        overrides = {name: value for name, value in overrides.items() if value is not None}
        known = {field.name for field in fields(cls)}
        values = {name: overrides.get(name, getattr(config, name, None)) for name in (*known, *cls.UNSUPPORTED)}
        for name in ("eos_token_id", "decoder_start_token_id", "pad_token_id"):
            if values[name] is None and model_config is not None:
                values[name] = getattr(model_config, name, None)
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise InputError(f"the search takes no {', '.join(unknown)}")
        refused = [f"{name}={values[name]!r}" for name, default in cls.UNSUPPORTED.items()
                   if values[name] not in (default, None, [])]  # fmt: skip
        if values["max_new_tokens"] is None:  # a config of whole lengths: the start token and the new ones
            max_length = getattr(config, "max_length", None)
            values["max_new_tokens"] = max_length - 1 if max_length else cls.max_new_tokens
        eos = values["eos_token_id"]
        if isinstance(eos, list):
            if len(eos) != 1:
                refused.append(f"eos_token_id={eos!r} (one id)")
            values["eos_token_id"] = eos[0]
        if refused:
            raise InputError(f"the search does not do {', '.join(refused)}")
        if values["eos_token_id"] is None or values["decoder_start_token_id"] is None:
            raise InputError("the search needs eos_token_id and decoder_start_token_id (from the model's config)")
        settings = {name: values[name] for name in known if values[name] is not None}
        return cls(**settings)

    def bounded(self, model: PreTrainedModel) -> SearchSettings:
        """These settings with `max_new_tokens` within the model's position table (a Transformer's
        `max_position_embeddings`; the RNN has none): the decoder reads the start and every token but the last."""
        table = getattr(model.config, "max_position_embeddings", None)
        return self if table is None or self.max_new_tokens <= table else replace(self, max_new_tokens=table)


__all__ = ["SearchSettings"]
