"""Tokenization of translation-format splits for a seq2seq model, cached by corpus and tokenizer, with truncation
counts."""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import datasets
import pyarrow.compute as pc
from transformers import PreTrainedTokenizerBase

from hf_bahdanau.errors import InputError

logger = logging.getLogger(__name__)

TOKENIZE_VERSION = 1  # part of the tokenized splits' cache key: raise it when `tokenize_corpus`'s output changes


def tokenizer_hash(tokenizer: PreTrainedTokenizerBase) -> str:
    """A hash of everything that decides how `tokenizer` encodes (its whole `tokenizer.json` for a fast one)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    state = backend.to_str() if backend is not None else json.dumps(sorted(tokenizer.get_vocab().items()))
    return hashlib.sha256(f"{type(tokenizer).__name__}\n{state}".encode()).hexdigest()[:16]


def _tokenized_fingerprint(
    dataset: datasets.Dataset, tokenizer: PreTrainedTokenizerBase, src_lang: str, tgt_lang: str, lengths: tuple
) -> str:
    """The cache key of a tokenized split: the split's own fingerprint, the tokenizer's hash and the settings. The
    same corpus and tokenizer find the tokenized split in the corpus's cache folder instead of tokenizing again."""
    key = [dataset._fingerprint, tokenizer_hash(tokenizer), src_lang, tgt_lang, *lengths, TOKENIZE_VERSION]
    return hashlib.sha256(json.dumps(key).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class TruncationStats:
    """How many pairs of one split had their source, target or either side truncated."""

    pairs: int
    truncated_source: int
    truncated_target: int
    truncated_pairs: int

    @property
    def rate(self) -> float:
        return self.truncated_pairs / self.pairs if self.pairs else 0.0


def _truncate(ids: list[int], max_length: int) -> tuple[list[int], bool]:
    """Cut `ids` to `max_length`, keeping its last (end-of-sequence) token."""
    if len(ids) <= max_length:
        return ids, False
    return ids[: max_length - 1] + ids[-1:], True


def pair_encoder(
    tokenizer: PreTrainedTokenizerBase, src_lang: str, tgt_lang: str, max_source_length: int, max_target_length: int
) -> Callable[[dict[str, list[Any]]], dict[str, list[Any]]]:
    """A batched map function from a `translation` column to `input_ids`, `attention_mask`, `labels` (cut to the
    lengths, keeping `</s>`) and the `src_cut`/`tgt_cut` flags of the pairs cut."""
    if min(max_source_length, max_target_length) < 2:
        raise InputError("max_source_length and max_target_length must be at least 2 (one token and </s>)")

    def encode(batch: dict[str, list[Any]]) -> dict[str, list[Any]]:
        src = [row[src_lang] for row in batch["translation"]]
        tgt = [row[tgt_lang] for row in batch["translation"]]
        enc = tokenizer(src, text_target=tgt)
        out: dict[str, list[Any]] = {"input_ids": [], "labels": [], "src_cut": [], "tgt_cut": []}
        for src_ids, tgt_ids in zip(enc["input_ids"], enc["labels"], strict=True):
            src_ids, src_cut = _truncate(src_ids, max_source_length)
            tgt_ids, tgt_cut = _truncate(tgt_ids, max_target_length)
            out["input_ids"].append(src_ids)
            out["labels"].append(tgt_ids)
            out["src_cut"].append(src_cut)
            out["tgt_cut"].append(tgt_cut)
        out["attention_mask"] = [[1] * len(ids) for ids in out["input_ids"]]
        return out

    return encode


def tokenize_corpus(
    corpus: datasets.DatasetDict,
    tokenizer: PreTrainedTokenizerBase,
    src_lang: str,
    tgt_lang: str,
    *,
    max_source_length: int = 128,
    max_target_length: int = 128,
    num_proc: int | None = None,
) -> tuple[datasets.DatasetDict, dict[str, TruncationStats]]:
    """Tokenize translation-format splits into `input_ids`, `attention_mask`, `labels` for `src -> tgt`.

    Sequences longer than the maximum lengths are cut but keep their final `</s>` (the tokenizer must append
    it, as `train_tokenizer`'s does). Returns the tokenized splits (other columns removed; `Dataset.map` is
    batched, run by `num_proc` processes, and cached in the corpus's cache folder under a key made of the split's
    fingerprint, the tokenizer's `tokenizer_hash` and the lengths, so a second run with the same corpus and tokenizer
    reads the cache instead of tokenizing) and per-split truncation counts, which are also logged.
    """
    encode = pair_encoder(tokenizer, src_lang, tgt_lang, max_source_length, max_target_length)
    lengths = (max_source_length, max_target_length)
    tokenized, stats = {}, {}
    for split, dataset in corpus.items():
        if "translation" not in dataset.column_names:
            raise InputError(f"split {split!r} has no 'translation' column; columns: {dataset.column_names}")
        mapped = dataset.map(
            encode,
            batched=True,
            num_proc=num_proc,
            remove_columns=dataset.column_names,
            new_fingerprint=_tokenized_fingerprint(dataset, tokenizer, src_lang, tgt_lang, lengths),
            desc=f"tokenize {split}",
        )
        src_cut, tgt_cut = (mapped.with_format("arrow")[:][name] for name in ("src_cut", "tgt_cut"))
        stats[split] = TruncationStats(
            pairs=len(mapped),
            truncated_source=pc.sum(src_cut).as_py() or 0,
            truncated_target=pc.sum(tgt_cut).as_py() or 0,
            truncated_pairs=pc.sum(pc.or_(src_cut, tgt_cut)).as_py() or 0,
        )
        tokenized[split] = mapped.remove_columns(["src_cut", "tgt_cut"])
        logger.info(
            "%s %s->%s: %d of %d pairs truncated (%.2f%%; source %d, target %d)",
            split,
            src_lang,
            tgt_lang,
            stats[split].truncated_pairs,
            stats[split].pairs,
            100 * stats[split].rate,
            stats[split].truncated_source,
            stats[split].truncated_target,
        )
    return datasets.DatasetDict(tokenized), stats
