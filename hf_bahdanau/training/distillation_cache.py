"""The distillation cache on disk: one folder a key, `ROOT/KEY/`, that holds `dataset/` and `info.json` once the
teacher has translated the corpus, and `chunks-of-N/NNNNN/` while it translates.

One process at a time works on a key: it holds `ROOT/KEY.lock` (an fcntl lock, through `filelock`), and a second
process waits for it, then reuses what it made. Each chunk, and the finished dataset, appears by one rename of a
complete folder written beside it. A chunk or dataset that cannot be read (a file cut short or deleted, a bad
`info.json`) is translated again with a warning, so any part of the cache can be deleted at any time.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import datasets
from filelock import FileLock, Timeout

from hf_bahdanau.errors import UnwritableError
from hf_bahdanau.folders import fresh_sibling

logger = logging.getLogger(__name__)

INFO_FILE = "info.json"
DATASET_FOLDER = "dataset"
CHUNK_COLUMNS = ("translation", "seconds")
DATASET_COLUMNS = ("source", "translation", "reference")
# What reading a damaged cache folder raises: datasets' and pyarrow's errors (ArrowInvalid is a ValueError,
# ArrowIOError an OSError), a bad JSON file, a missing key.
DAMAGE = (OSError, ValueError, KeyError, TypeError)


@contextlib.contextmanager
def locked(folder: Path) -> Iterator[None]:
    """Hold the lock of cache folder `folder` (`folder.lock` beside it), waiting for another process that holds it;
    the cache root made where missing (a one-line error where it cannot be)."""
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        lock = FileLock(folder.with_name(f"{folder.name}.lock"))
        try:
            lock.acquire(timeout=0)
        except Timeout:
            logger.info("another run is translating into %s: waiting for it to finish", folder)
            lock.acquire()
    except OSError as error:
        raise UnwritableError(
            f"the distillation cache {folder.parent} cannot be written ({error.strerror or error}): choose another "
            "with --distillation-cache"
        ) from None
    try:
        _remove_unfinished(folder)
        yield
    finally:
        lock.release()


def _remove_unfinished(folder: Path) -> None:
    """Remove the folders a run cut off while writing left under `folder` (this process holds its lock)."""
    for unfinished in [*folder.glob(".*.writing-*"), *folder.glob("chunks-of-*/.*.writing-*")]:
        shutil.rmtree(unfinished, ignore_errors=True)


def commit(dataset: datasets.Dataset, target: Path) -> None:
    """Save `dataset` as folder `target` (which must not exist): written into a fresh folder beside it and renamed
    into place once complete."""
    staging = fresh_sibling(target, "writing")
    try:
        dataset.save_to_disk(str(staging))
        staging.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)  # gone once renamed


def write_info(folder: Path, info: dict[str, Any]) -> None:
    """Write `info.json` into `folder` whole (through a file renamed into place; this process holds the lock)."""
    partial = folder / f".{INFO_FILE}.writing"
    partial.write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    os.replace(partial, folder / INFO_FILE)


def read_chunk(folder: Path, number: int, rows: int) -> tuple[list[str], list[float]] | None:
    """The translations and seconds of chunk `number` in `folder` (of `rows` sentences), or None where it is not
    there; a chunk that cannot be read is removed, with a warning, to be translated again."""
    if not folder.exists():
        return None
    try:
        chunk = datasets.load_from_disk(str(folder))
        if len(chunk) != rows or tuple(chunk.column_names) != CHUNK_COLUMNS:
            raise ValueError(f"{len(chunk)} rows of {', '.join(chunk.column_names)}, not {rows} of translations")
        return list(chunk["translation"]), list(chunk["seconds"])
    except DAMAGE as error:
        logger.warning("recomputing chunk %d: %s cannot be read (%s)", number, folder, _reason(error))
        shutil.rmtree(folder, ignore_errors=True)
        return None


def read_translations(folder: Path, key: str, rows: int) -> tuple[datasets.Dataset, dict[str, Any]] | None:
    """The finished translations in cache folder `folder` and its info, or None where there are none; a dataset or
    `info.json` that cannot be read is removed, with a warning, to be made again."""
    dataset_dir = folder / DATASET_FOLDER
    if not dataset_dir.exists():
        return None
    try:
        info = json.loads((folder / INFO_FILE).read_text(encoding="utf-8"))
        if not isinstance(info, dict) or info.get("key") != key or info.get("pairs") != rows:
            raise ValueError(f"{INFO_FILE} is not this cache's record")
        dataset = datasets.load_from_disk(str(dataset_dir))
        if len(dataset) != rows or tuple(dataset.column_names) != DATASET_COLUMNS:
            raise ValueError(f"{len(dataset)} rows of {', '.join(dataset.column_names)}, not {rows} of translations")
        return dataset, info
    except DAMAGE as error:
        logger.warning("the cached translations in %s cannot be read (%s): making them again", folder, _reason(error))
        shutil.rmtree(dataset_dir, ignore_errors=True)
        (folder / INFO_FILE).unlink(missing_ok=True)
        return None


def _reason(error: Exception) -> str:
    """An error's first line, with its kind."""
    return f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}".rstrip(": ")


__all__ = ["INFO_FILE", "commit", "locked", "read_chunk", "read_translations", "write_info"]
