"""Corpus files that cannot be read give one-line errors naming them, read whole or streamed: a cut-off `.gz` file and
parallel files of unequal length."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from hf_bahdanau.data.corpora import load_parallel_corpus
from hf_bahdanau.data.streaming import LengthBucketedBatches, stream_train_pairs, tokenized_stream
from hf_bahdanau.data.tokenization import train_tokenizer

LINES = [f"sentence number {n}" for n in range(400)]


def _corpus(folder: Path, train_de: list[str]) -> Path:
    """A corpus folder: gzipped train files (German `train_de`, English `LINES`), plain val and test files."""
    folder.mkdir()
    for lang, lines in (("de", train_de), ("en", LINES)):
        with gzip.open(folder / f"train.{lang}.gz", "wt", encoding="utf-8") as file:
            file.write("".join(f"{line}\n" for line in lines))
        for stem in ("val", "test"):
            (folder / f"{stem}.{lang}").write_text("a\nb\n", encoding="utf-8")
    return folder


def _cut(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:-30])  # the end of the gzip stream lost, as by a copy cut off


def _stream(folder: Path) -> LengthBucketedBatches:
    tokenizer = train_tokenizer(LINES, 60, min_freq=1)
    pairs = stream_train_pairs(str(folder), "de", "en", test_split="test")
    return LengthBucketedBatches(tokenized_stream(pairs, tokenizer, "de", "en", 16, 16), 8, 40, source=str(folder))


def test_a_cut_off_gz_corpus_file_is_named(tmp_path):
    folder = _corpus(tmp_path / "corpus", LINES)
    _cut(folder / "train.de.gz")
    with pytest.raises(ValueError, match=r"train\.de\.gz is cut off or not valid gzip"):
        load_parallel_corpus(str(folder), "de", "en", test_split="test")
    with pytest.raises(ValueError, match="a train file of .*corpus is cut off or not valid gzip"):
        list(_stream(folder))


def test_streamed_files_of_unequal_length_are_named(tmp_path):
    folder = _corpus(tmp_path / "corpus", LINES[:-5])
    with pytest.raises(ValueError, match=r"parallel files differ in length: .*train\.de\.gz and .*train\.en\.gz"):
        list(_stream(folder))
