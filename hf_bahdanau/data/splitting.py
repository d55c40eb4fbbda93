"""The seeded train/validation/test split of a corpus without splits, grouped by source sentence."""

from __future__ import annotations

import random
from collections.abc import Sequence

import datasets
import numpy as np
import pyarrow.compute as pc

from hf_bahdanau.errors import InputError

SPLITS = ("train", "validation", "test")


def grouped_split(pairs: datasets.Dataset, ratios: Sequence[float], seed: int) -> dict[str, datasets.Dataset]:
    """Seeded train/validation/test split in which all pairs sharing a source sentence land together.

    Each split comes out in a seeded shuffled order: files such as Tatoeba's are sorted by length, and a split
    in file order would make its first pairs (`max_pairs`, `Dataset.select(range(n))`) the shortest ones. The
    split works on Arrow columns and index arrays (the sentences stay in Arrow) and equals a split of lists: the
    distinct sources in order of first appearance, shuffled by `random.Random(seed)`, then
    each split's pairs, in file order, shuffled by the same generator.
    """
    if len(ratios) != 3 or min(ratios) < 0 or abs(sum(ratios) - 1.0) > 1e-6:
        raise InputError(f"split_ratios must be three non-negative numbers summing to 1, got {tuple(ratios)}")
    rng = random.Random(seed)
    sources = pairs.data.column("src")
    distinct = pc.unique(sources)  # in order of first appearance
    source_of_pair = pc.index_in(sources, value_set=distinct).to_numpy()  # (pairs,) index into distinct
    order = list(range(len(distinct)))
    rng.shuffle(order)  # the permutation a shuffle of the distinct sentences themselves would make
    n_train = round(ratios[0] * len(distinct))
    n_val = round(ratios[1] * len(distinct))
    split_of_source = np.empty(len(distinct), dtype=np.int8)  # (distinct,) 0 train, 1 validation, 2 test
    split_of_source[order[:n_train]] = 0
    split_of_source[order[n_train : n_train + n_val]] = 1
    split_of_source[order[n_train + n_val :]] = 2
    split_of_pair = split_of_source[source_of_pair]  # (pairs,)
    result: dict[str, datasets.Dataset] = {}
    for number, split in enumerate(SPLITS):
        indices = np.flatnonzero(split_of_pair == number).tolist()
        rng.shuffle(indices)
        result[split] = pairs.select(indices)
    return result
