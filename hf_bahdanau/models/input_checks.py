"""The shape checks of a model's source batch: a ValueError naming the problem.

They read shapes only, never tensor values (no device synchronisation, nothing that breaks a `torch.compile` graph):
ids inside the vocabulary and sources with at least one token are the business of whoever makes the ids (a tokenizer
that matches the model's config). Copied into saved model folders (`trust_remote_code`): torch only.
"""

from __future__ import annotations

import torch


def check_source(shape: torch.Size, attention_mask: torch.Tensor | None) -> torch.Tensor | None:
    """Check the source batch's `shape` `(batch, src_len)` (of its ids, or its embeddings' first two dimensions) and
    its mask's; return the mask as booleans (None: no mask, no padding)."""
    if len(shape) != 2 or 0 in shape:
        raise ValueError(f"input_ids must be a non-empty (batch, src_len) tensor, got shape {tuple(shape)}")
    if attention_mask is None:
        return None
    if attention_mask.shape != shape:
        raise ValueError(
            f"attention_mask has shape {tuple(attention_mask.shape)} but input_ids has shape {tuple(shape)}"
        )
    return attention_mask.bool()


__all__ = ["check_source"]
