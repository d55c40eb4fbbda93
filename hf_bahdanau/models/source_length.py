"""The longest source a model reads, and how a longer one is cut: the one rule the shipped pipeline and the
package's translator share.

Copied into saved model folders (`trust_remote_code`) beside `pipelines.py`; it imports only the standard library, so
that the CTranslate2 engine, which reads it too, needs neither torch nor transformers.
"""

from __future__ import annotations

import logging
import math
from typing import Any

logger = logging.getLogger(__name__)


def source_limit(config: Any, tokenizer: Any) -> int:
    """The longest source (in tokens, `</s>` included) a model reads: its tokenizer's `model_max_length`, and the
    position table of its `config` (a Transformer's `max_position_embeddings`; the RNN has none)."""
    return min(tokenizer.model_max_length, getattr(config, "max_position_embeddings", None) or math.inf)


def cut_source(ids: list[int], limit: int, text: str) -> list[int]:
    """`ids`, the token ids of `text` (`</s>` last), cut to their first `limit - 1` and the `</s>` when there are more
    than `limit`, with a warning naming the text."""
    if len(ids) <= limit:
        return ids
    logger.warning("input of %d tokens truncated to the model's limit of %d tokens: %.60r", len(ids), limit, text)
    return ids[: limit - 1] + ids[-1:]


__all__ = ["cut_source", "source_limit"]
