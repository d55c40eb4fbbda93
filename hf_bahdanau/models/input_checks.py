"""The shape checks of a model's source batch: a ValueError naming the problem.

They read shapes only, never tensor values (no device synchronisation, nothing that breaks a `torch.compile` graph):
ids inside the vocabulary and sources with at least one token are the business of whoever makes the ids (a tokenizer
that matches the model's config). Copied into saved model folders (`trust_remote_code`): torch only.
"""

from __future__ import annotations

import torch


def check_source(input_ids: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor | None:
    """Check the shapes of the source batch `(batch, src_len)` and its mask; return the mask as booleans (None: no
    mask, no padding)."""
    if input_ids.dim() != 2 or input_ids.numel() == 0:
        raise ValueError(f"input_ids must be a non-empty (batch, src_len) tensor, got shape {tuple(input_ids.shape)}")
    if attention_mask is None:
        return None
    if attention_mask.shape != input_ids.shape:
        raise ValueError(
            f"attention_mask has shape {tuple(attention_mask.shape)} but input_ids has shape {tuple(input_ids.shape)}"
        )
    return attention_mask.bool()


__all__ = ["check_source"]
