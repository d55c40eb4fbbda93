"""Keeping what a user has: working folders beside a folder being replaced, each made fresh under a name no other
folder has (so removing it never removes a folder a user made), the swap that puts a finished folder in the old one's
place, and the files a command reads, by inode, so that no output lands on one of them through a link."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path


def fresh_sibling(target: Path, purpose: str) -> Path:
    """A new empty folder beside `target`, `.NAME.PURPOSE-<random>`: made here, so it is this process's alone."""
    target.parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f".{target.name}.{purpose}-", dir=target.parent))


def replace_with(target: Path, new: Path) -> None:
    """Put folder `new` in the place of `target` (a folder, or nothing); the old folder is removed once `new` is in
    place, from a fresh folder it was moved into (never a folder of another name that happened to exist)."""
    if not target.exists() and not target.is_symlink():
        new.rename(target)
        return
    aside = fresh_sibling(target, "replaced")
    target.rename(aside / target.name)
    new.rename(target)
    shutil.rmtree(aside)


def files_by_inode(paths: Iterable[str | os.PathLike | None]) -> dict[tuple[int, int], Path]:
    """Every file that is or lies under one of `paths` (symlinks followed), keyed by (device, inode): a hard link or
    a symlink to one of them has the same key."""
    found: dict[tuple[int, int], Path] = {}
    for path in map(Path, filter(None, paths)):
        files = path.rglob("*") if path.is_dir() else [path]
        for file in files:
            if file.is_file():
                stat = file.stat()
                found.setdefault((stat.st_dev, stat.st_ino), file)
    return found


def inode(path: Path) -> tuple[int, int] | None:
    """(device, inode) of the file `path` is (symlinks followed), or None where nothing is."""
    try:
        stat = path.stat()
    except OSError:
        return None
    return stat.st_dev, stat.st_ino


__all__ = ["files_by_inode", "fresh_sibling", "inode", "replace_with"]
