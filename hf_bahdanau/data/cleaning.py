"""Cleaning of sentence pairs: d2l's normalisation and the filters of empty and over-long pairs."""

from __future__ import annotations

import re
from collections.abc import Callable

import datasets

from hf_bahdanau.errors import InputError

_D2L_SPACE_BEFORE = re.compile(r"(?<=[^ ])([,.!?])")


def normalize_d2l(text: str) -> str:
    """d2l's `preprocess_nmt` for one sentence: no-break spaces -> space, lowercase, space before `,.!?`."""
    text = text.replace("\u202f", " ").replace("\xa0", " ").lower()
    return _D2L_SPACE_BEFORE.sub(r" \1", text)


def pair_cleaner(
    max_length: int | None, drop_empty: bool, normalize: bool, where: str = "the corpus"
) -> Callable[[dict[str, list[str]]], dict[str, list[str]]]:
    """A batched map function over `src`/`tgt` columns: strip (and optionally normalise) both sides, drop empty and
    over-long pairs. A missing side (files zipped by line, one shorter) is a ValueError naming `where`."""

    def clean(batch: dict[str, list[str]]) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {"src": [], "tgt": []}
        for src, tgt in zip(batch["src"], batch["tgt"], strict=True):
            if src is None or tgt is None:
                raise InputError(f"parallel files differ in length: {where} has more lines on one side")
            src, tgt = src.strip(), tgt.strip()
            if normalize:
                src, tgt = normalize_d2l(src), normalize_d2l(tgt)
            if drop_empty and not (src and tgt):
                continue
            if max_length is not None and max(len(src.split()), len(tgt.split())) > max_length:
                continue
            out["src"].append(src)
            out["tgt"].append(tgt)
        return out

    return clean


def clean_pairs(pairs: datasets.Dataset, max_length: int | None, drop_empty: bool, normalize: bool) -> datasets.Dataset:
    """Strip (and optionally normalise) both sides; drop empty and over-long pairs (a batched, cached map)."""
    clean = pair_cleaner(max_length, drop_empty, normalize)
    return pairs.map(clean, batched=True, desc="clean pairs")
