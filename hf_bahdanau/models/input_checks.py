"""Checks of a model's inputs: token ids inside the vocabulary, a well-formed source batch and its mask.

Each is a ValueError naming the problem. Checks that read tensor values run in eager mode only (`checking_values`),
never while `torch.compile` traces the model. Copied into saved model folders (`trust_remote_code`): torch only.
"""

from __future__ import annotations

import torch


def checking_values() -> bool:
    """Whether input checks read tensor values (a device sync each): in eager mode; not while `torch.compile` traces
    the model, where they would break the graph (the tokenizer, pipeline and command line feed valid inputs)."""
    return not torch.compiler.is_compiling()


def check_ids(name: str, ids: torch.Tensor, vocab_size: int) -> None:
    """Raise a ValueError when `ids` hold a token outside `[0, vocab_size)` (in eager mode: `checking_values`)."""
    if not ids.numel() or not checking_values():
        return
    low, high = (int(value) for value in torch.aminmax(ids))  # one device sync
    if low < 0 or high >= vocab_size:
        raise ValueError(
            f"{name} holds ids in [{low}, {high}], outside the vocabulary [0, {vocab_size}): "
            "does the tokenizer match the model's config?"
        )


def check_source(input_ids: torch.Tensor, attention_mask: torch.Tensor | None, vocab_size: int) -> torch.Tensor:
    """Validate the source batch; return the mask as booleans `(batch, src_len)`."""
    if input_ids.dim() != 2 or input_ids.numel() == 0:
        raise ValueError(f"input_ids must be a non-empty (batch, src_len) tensor, got shape {tuple(input_ids.shape)}")
    check_ids("input_ids", input_ids, vocab_size)
    if attention_mask is None:
        return torch.ones_like(input_ids, dtype=torch.bool)
    if attention_mask.shape != input_ids.shape:
        raise ValueError(
            f"attention_mask has shape {tuple(attention_mask.shape)} but input_ids has shape {tuple(input_ids.shape)}"
        )
    mask = attention_mask.bool()
    if not checking_values():
        return mask
    empty = (~mask.any(1)).nonzero().flatten()
    if empty.numel():
        raise ValueError(f"source sequence(s) {empty.tolist()} have no token: attention_mask is all zeros there")
    return mask


__all__ = ["check_ids", "check_source", "checking_values"]
