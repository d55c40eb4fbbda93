"""The named corpora (`multi30k`, `tatoeba-fra-eng`): where each is read from, and its one-time download.

A named corpus is read from `$HF_BAHDANAU_DATA_DIR/<name>` when that folder exists, else downloaded once into
`$HF_BAHDANAU_CACHE/<name>` (`~/.cache/hf_bahdanau`): each file written through a `.part` file, its sha256 checked
when pinned, and nothing partial (file or empty folder) left behind by a failed or interrupted download.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path

from hf_bahdanau.errors import InputError, UnreachableError

logger = logging.getLogger(__name__)

DATA_DIR_ENV = "HF_BAHDANAU_DATA_DIR"
CACHE_DIR_ENV = "HF_BAHDANAU_CACHE"


@dataclass(frozen=True)
class _RemoteFile:
    url: str
    # sha256 of the downloaded file. None = not pinned yet: these were written on a machine without internet,
    # so no checksum could be computed. The downloader verifies pinned sums and logs the sum it computed,
    # so a maintainer can pin it here after a first trusted download.
    sha256: str | None = None


_MULTI30K_URL = "https://github.com/multi30k/dataset/raw/master/data/task1/raw/{name}"
NAMED_CORPORA: dict[str, dict[str, _RemoteFile]] = {
    "multi30k": {
        f"{split}.{lang}.gz": _RemoteFile(_MULTI30K_URL.format(name=f"{split}.{lang}.gz"))
        for split in ("train", "val", "test_2016_flickr")
        for lang in ("en", "de", "fr")
    },
    # d2l's copy of the manythings.org/Tatoeba English-French pairs; `fra-eng/fra.txt` inside the zip.
    "tatoeba-fra-eng": {"fra-eng.zip": _RemoteFile("http://d2l-data.s3-accelerate.amazonaws.com/fra-eng.zip")},
}
_NAMED_CORPUS_FILE = {"tatoeba-fra-eng": "fra-eng.tsv"}  # corpora that are one file in their folder


def _cache_root() -> Path:
    return Path(os.environ.get(CACHE_DIR_ENV, Path.home() / ".cache" / "hf_bahdanau"))


def _part_file(target: Path) -> Path:
    """Where `target` is written until it is complete (then renamed), so a complete-looking file is complete."""
    return target.with_name(target.name + ".part")


def _download(url: str, target: Path) -> None:
    """Fetch `url` into `target` (written atomically through a `.part` file)."""
    part = _part_file(target)
    with urllib.request.urlopen(url, timeout=60) as response, open(part, "wb") as out:
        shutil.copyfileobj(response, out)
    part.replace(target)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def resolve_corpus(name: str) -> Path:
    """Local folder of a named corpus: `$HF_BAHDANAU_DATA_DIR/<name>` if present, else a cached download."""
    if name not in NAMED_CORPORA:
        raise InputError(f"unknown corpus {name!r}; named corpora: {sorted(NAMED_CORPORA)}")
    data_dir = os.environ.get(DATA_DIR_ENV)
    if data_dir and (Path(data_dir) / name).exists():
        return Path(data_dir) / name
    folder = _cache_root() / name
    created = [path for path in (folder, *folder.parents) if not path.exists()]  # deepest first
    folder.mkdir(parents=True, exist_ok=True)
    target = folder
    try:
        for file_name, remote in NAMED_CORPORA[name].items():
            target = folder / file_name
            if not target.exists():
                _fetch(name, remote, target)
        target = folder / _NAMED_CORPUS_FILE.get(name, "")
        if name == "tatoeba-fra-eng" and not target.exists():
            with zipfile.ZipFile(folder / "fra-eng.zip") as archive:
                _part_file(target).write_bytes(archive.read("fra-eng/fra.txt"))
            _part_file(target).replace(target)
    except BaseException:  # also Ctrl-C: leave no partial file, and no empty folder made here
        _part_file(target).unlink(missing_ok=True)
        for path in created:
            if path.is_dir() and not any(path.iterdir()):
                path.rmdir()
        raise
    return folder


def _fetch(name: str, remote: _RemoteFile, target: Path) -> None:
    """Download one file of corpus `name` to `target` and check its sha256 (when pinned)."""
    logger.info("downloading %s to %s", remote.url, target)
    try:
        _download(remote.url, target)
    except OSError as err:
        raise UnreachableError(
            f"could not download corpus {name!r} from {remote.url} ({err}). On an offline machine, "
            f"put the corpus in a folder <DIR>/{name} and set {DATA_DIR_ENV}=<DIR>."
        ) from err
    digest = _sha256(target)
    if remote.sha256 is not None and digest != remote.sha256:
        target.unlink()
        raise InputError(f"checksum mismatch for {remote.url}: got {digest}, expected {remote.sha256}")
    logger.info("sha256 of %s: %s", target, digest)


def named_corpus_path(source: str | os.PathLike[str]) -> str | None:
    """The absolute file or folder a named corpus is read from (resolving, so maybe downloading, it now); None
    for a source that is no corpus name (an existing path of that name takes precedence over the name)."""
    name = str(source)
    if name not in NAMED_CORPORA or Path(source).exists():
        return None
    return str((resolve_corpus(name) / _NAMED_CORPUS_FILE.get(name, "")).resolve())


__all__ = ["CACHE_DIR_ENV", "DATA_DIR_ENV", "NAMED_CORPORA", "named_corpus_path", "resolve_corpus"]
