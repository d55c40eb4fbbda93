"""Loading a parallel corpus as a `datasets.DatasetDict` of train/validation/test splits in the Hub translation format.

`load_parallel_corpus` reads a source (`readers`), cleans its pairs (`cleaning`), splits a source without splits
(`splitting`) and returns splits whose rows look like `{"translation": {"en": "...", "fr": "..."}}`.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Collection, Sequence

import datasets

from hf_bahdanau.data.cleaning import clean_pairs
from hf_bahdanau.data.readers import read_source
from hf_bahdanau.data.run_settings import read_data_settings
from hf_bahdanau.data.splitting import SPLITS, grouped_split
from hf_bahdanau.errors import InputError

logger = logging.getLogger(__name__)


def load_parallel_corpus(
    source: str | os.PathLike[str],
    src_lang: str,
    tgt_lang: str,
    *,
    test_split: str = "test_2016_flickr",
    columns: Sequence[str] | None = None,
    max_pairs: int | None = None,
    max_length: int | None = None,
    drop_empty: bool = True,
    normalize: bool = False,
    split_ratios: Sequence[float] = (0.9, 0.05, 0.05),
    seed: int = 0,
    hub_config: str | None = None,
    splits: Collection[str] | None = None,
) -> datasets.DatasetDict:
    """Load a parallel corpus as train/validation/test splits of `{"translation": {src_lang: .., ..}}`.

    Files are read by `datasets`' builders (`text` for folders and TSV files, `csv`, `json`) into memory-mapped
    Arrow in the datasets cache (`HF_DATASETS_CACHE`); the cleaning and splitting are Arrow operations cached beside
    them, so a corpus larger than memory loads, and loads again from the cache.

    Args:
        source: one of
            - a folder of `{split}.{lang}[.gz]` files, line N of each language aligned (Multi30k layout):
              `train` -> train, `val`/`valid`/`dev` -> validation, the file stem `test_split` -> test;
            - a TSV file of pairs, one pair a line. `columns` names the language of each column; by default
              a manythings/Tatoeba name `xxx-eng.tsv` means English first (`fra-eng.tsv`: ("en", "fr")),
              any other name means `(src_lang, tgt_lang)`. Extra columns (attribution) are ignored;
            - a `.jsonl`/`.json` file (JSON lines, or one JSON array) whose rows are in the translation format
              or have one field per language, or a `.csv` file whose header row names the language of each
              column (every row has the header's number of fields; quoted fields may span lines);
            - a corpus name, `multi30k` or `tatoeba-fra-eng`: read from `$HF_BAHDANAU_DATA_DIR/<name>`
              when that exists, else downloaded once into `$HF_BAHDANAU_CACHE` (`~/.cache/hf_bahdanau`);
            - otherwise a Hub dataset name for `datasets.load_dataset(source, hub_config)`.
            Sources without splits (TSV, JSON lines, CSV, single-split Hub sets) are split with
            `split_ratios` by a `seed`-ed shuffle of the distinct source sentences, so every copy of one
            source sentence lands in the same split, and each split is in a `seed`-ed shuffled order
            (folders and Hub splits keep their order).
        src_lang, tgt_lang: language codes, as in the file names, columns or fields.
        max_pairs: keep at most this many pairs per split (the first ones in split order, after filtering).
        max_length: drop pairs with more than this many whitespace-separated words on either side.
        drop_empty: drop pairs in which either side is empty or whitespace only.
        normalize: apply d2l's normalisation (`normalize_d2l`) to both sides; lines are always stripped.
        seed: seed of the split and order of unsplit sources.
        splits: read only these splits of a folder (None: all; `train --streaming` streams the train files).

    Raises:
        ConnectionError: a named corpus that is neither in `$HF_BAHDANAU_DATA_DIR` nor downloadable, or a name
            that is no file, folder or named corpus while the Hub is unreachable (the named corpora are listed).
        FileNotFoundError: a missing file, split or language file (the available ones are listed), or a name
            that is neither a named corpus nor a Hub dataset.
        ValueError: a missing language, parallel files of different lengths, undecodable bytes (file and
            line), malformed lines, or no pair left after filtering.
    """
    raw = read_source(source, src_lang, tgt_lang, test_split, columns, hub_config, splits)
    raw = {split: clean_pairs(pairs, max_length, drop_empty, normalize) for split, pairs in raw.items()}
    if "all" in raw:
        raw.update(grouped_split(raw.pop("all"), split_ratios, seed))
    loaded = {}
    for split in SPLITS:
        if split not in raw:
            continue
        pairs = raw[split].select(range(min(len(raw[split]), max_pairs))) if max_pairs is not None else raw[split]
        if not len(pairs):
            logger.warning("split %r of %s is empty after filtering; left out", split, source)
            continue
        loaded[split] = _translation_format(pairs, src_lang, tgt_lang)
    if "train" not in loaded and (splits is None or "train" in splits):
        raise InputError(f"no training pair left in {source} ({src_lang}-{tgt_lang}) after filtering")
    logger.info("%s %s-%s: %s", source, src_lang, tgt_lang, {name: len(ds) for name, ds in loaded.items()})
    return datasets.DatasetDict(loaded)


def folder_split(
    model_dir: str | os.PathLike[str], split: str, max_pairs: int | None = None
) -> tuple[list[str], list[str]]:
    """The sources and references of `split` of the corpus a model folder was trained on, read as training read it
    (its recorded path, languages, test split and normalisation)."""
    settings = read_data_settings(model_dir)
    src, tgt = settings["src_lang"], settings["tgt_lang"]
    corpus = load_parallel_corpus(settings.get("data_path") or settings["data"], src, tgt,
                                  test_split=settings["test_split"], normalize=settings.get("d2l_normalize", False),
                                  splits=(split,), max_pairs=max_pairs)[split]  # fmt: skip
    return [row[src] for row in corpus["translation"]], [row[tgt] for row in corpus["translation"]]


def _translation_format(pairs: datasets.Dataset, src_lang: str, tgt_lang: str) -> datasets.Dataset:
    """`src`/`tgt` columns as one `translation` column `{src_lang: .., tgt_lang: ..}` (the Hub's format)."""

    def to_rows(batch: dict[str, list[str]]) -> dict[str, list[dict[str, str]]]:
        return {"translation": [{src_lang: s, tgt_lang: t} for s, t in zip(batch["src"], batch["tgt"], strict=True)]}

    features = datasets.Features({"translation": datasets.Translation(languages=[src_lang, tgt_lang])})
    return pairs.map(to_rows, batched=True, remove_columns=["src", "tgt"], features=features, desc="translation")
