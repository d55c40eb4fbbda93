"""Working folders beside a folder that is being replaced: each made fresh under a name no other folder has, so that
removing it can never remove a folder a user made, and the swap that puts a finished folder in the old one's place."""

from __future__ import annotations

import shutil
import tempfile
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


__all__ = ["fresh_sibling", "replace_with"]
