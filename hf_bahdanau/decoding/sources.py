"""Sources as the translator reads them: token ids cut to the model's limit, the length bound of each translation,
and the warnings about sources the model is unlikely to translate well.

A source is cut by the rule the shipped pipeline uses (`models/source_length.py`); this module imports neither torch
nor transformers, so that the CTranslate2 engine needs neither.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from hf_bahdanau.models.source_length import cut_source

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from .folder_data import FolderTokenizer

logger = logging.getLogger(__name__)

LENGTH_FACTOR = 3  # a translation is at most this many times its source's tokens ...
MIN_NEW_TOKENS = 8  # ... or this many, whichever is more


def length_bound(source_tokens: int) -> int:
    """The most tokens a translation of a source of `source_tokens` tokens (`</s>` included) may have."""
    return max(MIN_NEW_TOKENS, LENGTH_FACTOR * source_tokens)


def source_ids(
    tokenizer: PreTrainedTokenizerBase | FolderTokenizer, texts: Sequence[str], limit: int
) -> list[list[int]]:
    """Each text's token ids (`</s>` included); one of more than `limit` tokens is cut to its first `limit - 1` and its
    `</s>`, with a warning; an empty or blank text has none."""
    return [
        cut_source(tokenizer(text, verbose=False)["input_ids"], limit, text) if text.strip() else [] for text in texts
    ]


def trained_source_length(model_dir: str) -> int | None:
    """The longest source (in tokens, `</s>` included) a model folder was trained on: `max_source_length` in its
    `translation_data.json` (None where not recorded)."""
    from hf_bahdanau.data.run_settings import read_data_settings

    length = read_data_settings(model_dir).get("max_source_length")
    return length if isinstance(length, int) else None


def warn_long_sources(lengths: Sequence[int], trained: int | None) -> bool:
    """Log one warning when a source is longer than `trained` tokens; whether it did."""
    longer = [length for length in lengths if trained is not None and length > trained]
    if longer:
        logger.warning(
            "%d source(s) longer than the %d tokens of the longest source the model saw in training (up to %d "
            "tokens): their translations may be cut short or go wrong",
            len(longer),
            trained,
            max(longer),
        )
    return bool(longer)


def unknown_text_message(tokenizer: PreTrainedTokenizerBase, text: str) -> str | None:
    """One line saying that `text` is mostly unknown to the model, or None: more than half of its tokens (special
    tokens such as `</s>` left out) are the tokenizer's unk token, e.g. Chinese typed into a de-en model."""
    unk = tokenizer.unk_token_id
    special = set(tokenizer.all_special_ids) - {unk}
    ids = [i for i in tokenizer(text, verbose=False)["input_ids"] if i not in special]
    unknown = sum(i == unk for i in ids) if unk is not None else 0
    if 2 * unknown <= len(ids):
        return None
    shown = text if len(text) <= 40 else text[:40] + "..."
    return (
        f"The text is mostly in letters the model does not know ({unknown} of {len(ids)} tokens unknown): "
        f"{shown!r} is not in the language it translates from."
    )


__all__ = [
    "LENGTH_FACTOR",
    "MIN_NEW_TOKENS",
    "length_bound",
    "source_ids",
    "trained_source_length",
    "unknown_text_message",
    "warn_long_sources",
]
