"""Readers of parallel text: a Multi30k-style folder, a TSV, JSON lines / CSV file, a named corpus or a Hub dataset.

Each reader returns `{split: Dataset with string columns "src" and "tgt"}`, its split names those of
`splitting.SPLITS` or "all" (a source without splits). Files go through `datasets`' own builders (`text`, `csv`,
`json`) into memory-mapped Arrow in the datasets cache; the Python readers only run to name the line of a file a
builder refused (or, for the rare file a builder cannot read but they can, such as a JSON array after blank lines,
to read it).
"""

from __future__ import annotations

import collections
import csv
import difflib
import gzip
import itertools
import json
import logging
import os
import re
import zlib
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import datasets
import pyarrow as pa
import pyarrow.compute as pc

from hf_bahdanau.data.cache import NAMED_CORPORA, named_corpus_path
from hf_bahdanau.data.text_lines import decode_lines
from hf_bahdanau.errors import InputError, InputNotFoundError, UnreachableError

logger = logging.getLogger(__name__)

_SPLIT_ALIASES = {
    "train": "train",
    "val": "validation",
    "valid": "validation",
    "dev": "validation",
    "validation": "validation",
}
# manythings.org / Tatoeba file names use ISO 639-3 codes ("fra-eng"); English is always column 0 there.
_ISO3_TO_ISO1 = {
    "eng": "en",
    "fra": "fr",
    "deu": "de",
    "spa": "es",
    "ita": "it",
    "por": "pt",
    "nld": "nl",
    "rus": "ru",
    "tur": "tr",
    "jpn": "ja",
    "cmn": "zh",
}

_FILE_SUFFIXES = (".tsv", ".txt", ".jsonl", ".json", ".csv", ".gz")


class BuilderRefused(InputError):
    """A `datasets` builder could not read a file in which the Python reader found nothing wrong."""


# What a builder raises on a file it cannot read (wrapped in DatasetGenerationError, or not, by where it fails).
_BUILDER_ERRORS = (datasets.exceptions.DatasetGenerationError, ValueError, TypeError, KeyError, pa.ArrowException)
GZIP_ERRORS = (EOFError, gzip.BadGzipFile, zlib.error)  # what reading a cut-off or corrupt .gz file raises


def _read_lines(path: Path, keep_ends: bool = False) -> Iterator[str]:
    """Lines of a UTF-8 (optionally gzipped) text file, by default without line ends; bad bytes name file and line."""
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as f:
            for line in decode_lines(f, path):
                yield line if keep_ends else line.rstrip("\r\n")
    except GZIP_ERRORS as error:
        raise InputError(f"{path} is cut off or not valid gzip ({error or type(error).__name__})") from None


def _build(builder: str, path: Path, diagnose: Callable[[], Iterable[Any]], **config: Any) -> datasets.Dataset:
    """`path` read by the `datasets` packaged `builder` (cached as Arrow by its path and modification time).

    When the builder fails, `diagnose` (a Python reader of the file) runs to raise the error that names the line;
    when it finds nothing wrong, the builder's error stands.
    """
    try:
        return datasets.load_dataset(builder, data_files=str(path.resolve()), split="train", **config)
    except _BUILDER_ERRORS as err:
        collections.deque(diagnose(), maxlen=0)  # raises the InputError naming the line, if it finds one
        raise BuilderRefused(f"{path}: {builder} reader failed ({err.__cause__ or err})") from err


def _text_lines(path: Path) -> datasets.Dataset:
    """The lines of a UTF-8 (optionally gzipped) text file as a `text` column, the byte order mark removed."""
    return _build("text", path, lambda: _read_lines(path), encoding="utf-8-sig")


def folder_files(folder: Path, src_lang: str, tgt_lang: str, test_split: str) -> dict[str, tuple[Path, Path]]:
    """`{split: (source file, target file)}` of a Multi30k-style folder of `{stem}.{lang}[.gz]` files."""
    files: dict[str, dict[str, Path]] = {}  # split file stem -> lang -> path
    for path in sorted(folder.iterdir()):
        name = path.name[: -len(".gz")] if path.name.endswith(".gz") else path.name
        stem, dot, lang = name.rpartition(".")
        if dot and path.is_file():
            files.setdefault(stem, {})[lang] = path
    split_of = {stem: _SPLIT_ALIASES.get(stem) for stem in files}
    if test_split not in files:
        raise InputNotFoundError(
            f"no test split {test_split!r} in {folder}; file stems found: {sorted(files)} (set test_split=)"
        )
    split_of[test_split] = "test"
    languages = sorted({lang for stem, langs in files.items() if split_of[stem] for lang in langs})
    result: dict[str, tuple[Path, Path]] = {}
    for stem, split in split_of.items():
        if split is None:
            continue
        for lang in (src_lang, tgt_lang):
            if lang not in files[stem]:
                raise InputNotFoundError(f"no {stem}.{lang}[.gz] in {folder}; languages available: {languages}")
        result[split] = (files[stem][src_lang], files[stem][tgt_lang])
    return result


def _read_folder(
    folder: Path, src_lang: str, tgt_lang: str, test_split: str, splits: Collection[str] | None = None
) -> dict[str, datasets.Dataset]:
    result: dict[str, datasets.Dataset] = {}
    for split, (src_path, tgt_path) in folder_files(folder, src_lang, tgt_lang, test_split).items():
        if splits is not None and split not in splits:
            continue
        src, tgt = _text_lines(src_path), _text_lines(tgt_path)
        if len(src) != len(tgt):
            raise InputError(
                f"parallel files differ in length: {src_path} has {len(src)} lines, {tgt_path} has {len(tgt)}"
            )
        # The two files zipped by line: columns side by side, both memory-mapped.
        result[split] = datasets.concatenate_datasets(
            [src.rename_column("text", "src"), tgt.rename_column("text", "tgt")], axis=1
        )
    return result


def _tsv_columns(path: Path, src_lang: str, tgt_lang: str) -> tuple[str, str]:
    """Default column languages of a TSV: `fra-eng.tsv` (manythings) is English first, else (src, tgt)."""
    match = re.fullmatch(r"([a-z]{3})-([a-z]{3})", path.name.split(".")[0])
    if match and "eng" in match.groups():
        other = match.group(1) if match.group(2) == "eng" else match.group(2)
        return "en", _ISO3_TO_ISO1.get(other, other)
    return src_lang, tgt_lang


def _read_tsv(path: Path, src_lang: str, tgt_lang: str, columns: Sequence[str] | None) -> dict[str, datasets.Dataset]:
    """A TSV file of pairs: its lines through the `text` builder, split at tabs by a batched map."""
    columns = tuple(columns) if columns else _tsv_columns(path, src_lang, tgt_lang)
    for lang in (src_lang, tgt_lang):
        if lang not in columns:
            raise InputError(f"language {lang!r} not in {path}; its columns are {list(columns)} (set columns=)")
    i, j = columns.index(src_lang), columns.index(tgt_lang)

    def split_fields(batch: dict[str, list[str]], indices: list[int]) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {"src": [], "tgt": []}
        for line, index in zip(batch["text"], indices, strict=True):
            if not line.strip():
                continue
            fields = line.split("\t")  # a manythings attribution column after the last language is ignored
            if len(fields) < len(columns):
                raise InputError(
                    f"{path}: line {index + 1} has {len(fields)} tab-separated fields, expected {len(columns)}"
                )
            out["src"].append(fields[i])
            out["tgt"].append(fields[j])
        return out

    lines = _text_lines(path)
    pairs = lines.map(split_fields, batched=True, with_indices=True, remove_columns=["text"], desc="split TSV")
    return {"all": pairs}


def _check_languages(available: Collection[str], src_lang: str, tgt_lang: str, where: str) -> None:
    if src_lang not in available or tgt_lang not in available:
        raise InputError(
            f"{where}: needs languages {src_lang!r} and {tgt_lang!r}; languages available: {sorted(available)}"
        )


def _pair_from_row(row: Any, src_lang: str, tgt_lang: str, where: str) -> tuple[str, str]:
    if not isinstance(row, dict):
        raise InputError(f"{where}: expected an object of languages or {{'translation': ...}}, got {row!r:.60}")
    fields = row.get("translation", row)
    _check_languages(fields if isinstance(fields, dict) else [], src_lang, tgt_lang, where)
    return str(fields[src_lang] or ""), str(fields[tgt_lang] or "")


def _iter_csv(path: Path, src_lang: str, tgt_lang: str) -> Iterator[tuple[str, str]]:
    """The pairs of a CSV file whose header names the languages, read by Python's csv module (names a bad line)."""
    # The lines keep their ends, as with a file opened with newline="": line breaks inside quotes survive.
    reader = csv.reader(_read_lines(path, keep_ends=True))
    header = next(reader, [])
    _check_languages(header, src_lang, tgt_lang, f"{path}: line 1 (header)")
    i, j = header.index(src_lang), header.index(tgt_lang)
    first_line = reader.line_num + 1
    for row in reader:
        number, first_line = first_line, reader.line_num + 1  # a row spanning lines is named by its first line
        if not row:  # a blank line
            continue
        if len(row) != len(header):
            raise InputError(f"{path}: line {number} has {len(row)} comma-separated fields, the header {len(header)}")
        yield row[i], row[j]


def _read_csv(path: Path, src_lang: str, tgt_lang: str) -> dict[str, datasets.Dataset]:
    """A CSV file whose header row names the language of each column; a quoted field may span lines.

    The `csv` builder (pandas) fills a row's missing fields silently, so one streaming pass of Python's csv
    module checks the rows first (constant memory); the builder then reads the file into Arrow.
    """
    header = next(csv.reader(itertools.islice(_read_lines(path, keep_ends=True), 1)), [])
    _check_languages(header, src_lang, tgt_lang, f"{path}: line 1 (header)")
    collections.deque(_iter_csv(path, src_lang, tgt_lang), maxlen=0)  # raises the InputError naming a bad line
    features = datasets.Features({name: datasets.Value("string") for name in header})
    table = _build(
        "csv",
        path,
        lambda: _iter_csv(path, src_lang, tgt_lang),
        encoding="utf-8-sig",
        na_filter=False,
        features=features,
    )
    table = table.select_columns([src_lang, tgt_lang])
    return {"all": table.rename_columns({src_lang: "src", tgt_lang: "tgt"})}


def _iter_json(path: Path, src_lang: str, tgt_lang: str) -> Iterator[tuple[str, str]]:
    """The pairs of a JSON lines file or JSON array, read by Python's json module (names a bad line or item)."""
    expected = "expected JSON lines (one object a line) or one JSON array of objects"
    lines = _read_lines(path)
    head: list[str] = []  # up to the first line that is not blank
    for line in lines:
        head.append(line)
        if line.strip():
            break
    if head and head[-1].lstrip().startswith("["):
        try:
            rows = json.loads("\n".join(itertools.chain(head, lines)))
        except json.JSONDecodeError as err:
            raise InputError(f"{path}: line {err.lineno} is not valid JSON ({err.msg}); {expected}") from err
        for number, row in enumerate(rows, 1):
            yield _pair_from_row(row, src_lang, tgt_lang, f"{path}: JSON array item {number}")
        return
    for number, line in enumerate(itertools.chain(head, lines), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise InputError(f"{path}: line {number} is not valid JSON ({err.msg}); {expected}") from err
        yield _pair_from_row(row, src_lang, tgt_lang, f"{path}: line {number}")


def _pairs_dataset(pairs: Iterable[tuple[str, str]]) -> datasets.Dataset:
    """A few pairs read in Python (a file no builder reads), as a `src`/`tgt` dataset."""
    src, tgt = zip(*pairs, strict=True) if pairs else ((), ())
    return datasets.Dataset.from_dict({"src": list(src), "tgt": list(tgt)})


def _languages_of(dataset: datasets.Dataset) -> list[str]:
    """The languages of a dataset in the translation format, or its columns."""
    feature = dataset.features.get("translation")
    if isinstance(feature, datasets.Translation):
        return list(feature.languages)
    return list(feature) if isinstance(feature, dict) else dataset.column_names


def _src_tgt(dataset: datasets.Dataset, src_lang: str, tgt_lang: str, missing: str | None = None) -> datasets.Dataset:
    """`src`/`tgt` string columns from rows in the translation format or with a column per language (a missing
    or null side becomes `missing`)."""
    names = set(dataset.column_names)

    def pick(batch: dict[str, list[Any]]) -> dict[str, list[str | None]]:
        rows = len(next(iter(batch.values())))
        out: dict[str, list[str | None]] = {"src": [], "tgt": []}
        for n in range(rows):
            fields = batch["translation"][n] if "translation" in names else None
            fields = (
                fields if isinstance(fields, dict) else {lang: batch[lang][n] for lang in names & {src_lang, tgt_lang}}
            )
            for side, lang in (("src", src_lang), ("tgt", tgt_lang)):
                value = fields.get(lang)
                out[side].append(missing if value is None else str(value))
        return out

    features = datasets.Features({"src": datasets.Value("string"), "tgt": datasets.Value("string")})
    return dataset.map(pick, batched=True, remove_columns=dataset.column_names, features=features, desc="pairs")


def _read_json(path: Path, src_lang: str, tgt_lang: str) -> dict[str, datasets.Dataset]:
    """JSON lines, or one JSON array, through the `json` builder; each row in the translation format or with one
    key a language."""
    diagnose = lambda: _iter_json(path, src_lang, tgt_lang)  # noqa: E731
    try:
        table = _src_tgt(_build("json", path, diagnose, encoding="utf-8-sig"), src_lang, tgt_lang)
    except BuilderRefused:  # diagnose found the file sound (a JSON array after blank lines): read it in Python
        return {"all": _pairs_dataset(list(diagnose()))}
    if table.num_rows and (
        pc.any(pc.is_null(table.data.column("src"))).as_py() or pc.any(pc.is_null(table.data.column("tgt"))).as_py()
    ):
        # A row without a language, or not an object: the Python reader names it (or reads null values as "").
        return {"all": _pairs_dataset(list(diagnose()))}
    return {"all": table}


def _read_hub(name: str, src_lang: str, tgt_lang: str, hub_config: str | None) -> dict[str, datasets.Dataset]:
    """Splits of a Hub dataset; a train split alone is returned as "all" (to be split)."""
    try:
        loaded = datasets.load_dataset(name, hub_config)
    except (ConnectionError, FileNotFoundError) as err:  # offline, unreachable, or no such dataset
        close = difflib.get_close_matches(name, NAMED_CORPORA, n=1)
        offline = " (offline mode is on: HF_HUB_OFFLINE)" if datasets.config.HF_HUB_OFFLINE else ""
        message = (
            f"{name!r} is not a file, folder or named corpus (named corpora: {', '.join(sorted(NAMED_CORPORA))}"
            f"{f'; did you mean {close[0]!r}?' if close else ''}), and loading it from the Hub failed{offline}: {err}"
        )
        raise (UnreachableError if isinstance(err, ConnectionError) else InputNotFoundError)(message) from err
    except ValueError as err:  # e.g. a dataset of several configs, none chosen
        raise InputError(f"{name}: {err}") from err
    result: dict[str, datasets.Dataset] = {}
    for split_name, split in loaded.items():
        key = "test" if split_name == "test" else _SPLIT_ALIASES.get(split_name)
        if key is None:
            logger.warning("ignoring split %r of %s", split_name, name)
            continue
        _check_languages(_languages_of(split), src_lang, tgt_lang, f"{name} ({split_name})")
        table = _src_tgt(split, src_lang, tgt_lang, missing="")
        result[key] = table
    return {"all": result["train"]} if list(result) == ["train"] else result


def read_source(
    source: str | os.PathLike[str],
    src_lang: str,
    tgt_lang: str,
    test_split: str,
    columns: Sequence[str] | None,
    hub_config: str | None,
    splits: Collection[str] | None = None,
) -> dict[str, datasets.Dataset]:
    """The splits of `source` (see `load_parallel_corpus`), read by the reader of its kind."""
    path = Path(named_corpus_path(source) or source)
    if path.is_dir():
        return _read_folder(path, src_lang, tgt_lang, test_split, splits)
    if path.is_file():
        suffixes = [s.lower() for s in path.suffixes if s.lower() != ".gz"]
        if suffixes and suffixes[-1] == ".csv":
            return _read_csv(path, src_lang, tgt_lang)
        if suffixes and suffixes[-1] in (".jsonl", ".json"):
            return _read_json(path, src_lang, tgt_lang)
        return _read_tsv(path, src_lang, tgt_lang, columns)
    check_local_source(source)  # a path, not a Hub name
    return _read_hub(str(source), src_lang, tgt_lang, hub_config)


def check_local_source(source: str | os.PathLike[str]) -> None:
    """Raise a one-line InputNotFoundError for a corpus written as a path (`./x`, `/x`, `~/x`, a file suffix) that does
    not exist; a named corpus or a Hub dataset name passes (found or downloaded when read)."""
    if Path(source).exists() or (isinstance(source, str) and source in NAMED_CORPORA):
        return
    if not isinstance(source, str) or re.match(r"[~./\\]", source) or Path(source).suffix.lower() in _FILE_SUFFIXES:
        raise InputNotFoundError(f"no such file or folder: {source}")
