"""Length-sorted token batches, and results given back in input order as soon as they can be.

Sources are taken in windows of `SORT_WINDOW`, each sorted by length (longest first) and cut into batches of at most
`batch_tokens` padded source tokens (and `max_sentences` sentences).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    import torch

Result = TypeVar("Result")
SORT_WINDOW = 2000  # lines sorted by length together (results wait at most this many lines to be given in order)


def token_batches(
    lengths: Sequence[int], batch_tokens: int | None = None, max_sentences: int | None = None
) -> list[list[int]]:
    """Indices of `lengths` sorted longest first, cut into batches whose padded size (sentences x longest) stays
    within `batch_tokens` (a longer sentence goes alone) and of at most `max_sentences` sentences."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    batches: list[list[int]] = []
    for index in order:
        batch = batches[-1] if batches else None
        if (
            batch is not None
            and (batch_tokens is None or (len(batch) + 1) * max(lengths[batch[0]], 1) <= batch_tokens)
            and (max_sentences is None or len(batch) < max_sentences)
        ):  # sorted: the batch's first is its longest
            batch.append(index)
        else:
            batches.append([index])
    return batches


def in_input_order(
    translate: Callable[[list[int]], list[Result]],
    lengths: Sequence[int],
    batch_tokens: int | None = None,
    max_sentences: int | None = None,
    progress: bool = False,
) -> Iterator[list[Result]]:
    """Translate `len(lengths)` sources by length-sorted token batches (`translate(indices)` -> their results, in
    that order); yields the results in input order, as soon as the next ones are done."""
    from tqdm.auto import tqdm

    done: dict[int, Result] = {}
    next_index = 0
    with tqdm(total=len(lengths), desc="translating", unit="sent", disable=not progress) as bar:
        for start in range(0, len(lengths), SORT_WINDOW):
            window = lengths[start : start + SORT_WINDOW]
            for batch in token_batches(window, batch_tokens, max_sentences):
                indices = [start + i for i in batch]
                done.update(zip(indices, translate(indices), strict=True))
                bar.update(len(indices))
                ready = []
                while next_index in done:
                    ready.append(done.pop(next_index))
                    next_index += 1
                if ready:
                    yield ready


def padded(rows: Sequence[list[int]], pad: int, side: str) -> tuple[torch.Tensor, torch.Tensor]:
    """`input_ids` and `attention_mask` `(batch, longest)` of `rows`, padded on `side` ("left" or "right")."""
    import torch

    longest = max(len(row) for row in rows)
    ids = torch.full((len(rows), longest), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), longest), dtype=torch.long)
    for i, row in enumerate(rows):
        where = slice(longest - len(row), longest) if side == "left" else slice(0, len(row))
        ids[i, where] = torch.tensor(row)
        mask[i, where] = 1
    return ids, mask


__all__ = ["SORT_WINDOW", "in_input_order", "padded", "token_batches"]
