"""Export d2l Transformers to CTranslate2: the export and its cache in the model folder.

`export_ctranslate2(model, output)` writes a CTranslate2 model folder (`model.bin`, its `config.json`, the shared
vocabulary) through the converter (`ctranslate2_converter.py`, imported when an export is made: it needs torch).
Beside it the folder gets the tokenizer files, the generation config and `hf_bahdanau_export.json` (the model's
config and a fingerprint of the files it came from).

CTranslate2 has no RNN decoder: the `bahdanau` model type is refused. `decoding/engines/ctranslate2.py` translates
with an export; what it needs of this module (the cache) imports neither torch nor transformers.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from hf_bahdanau.choices import EXPORT_INFO
from hf_bahdanau.choices import EXPORT_QUANTIZATIONS as QUANTIZATIONS  # what `export --quantization` offers
from hf_bahdanau.errors import InputError
from hf_bahdanau.json_files import read_json

from .folders import (
    COPIED_FILES,
    check_export_output,
    check_exportable,
    check_outside_model_folders,
    load_exportable,
    local_folder,
    source_fingerprint,
    write_export,
)

try:  # an optional extra: `pip install hf_bahdanau[ctranslate2]`
    import ctranslate2
except ImportError:  # `require_ctranslate2` says how to install it
    ctranslate2 = None

logger = logging.getLogger(__name__)

INSTALL_HINT = "pip install hf_bahdanau[ctranslate2]"
PUBLISHED_FOLDER = "ctranslate2"  # the repo's subfolder that `publish --with-ctranslate2` uploads
CACHE_PREFIX = "ctranslate2-"  # MODEL/ctranslate2-<quantization>/: the export `--engine ctranslate2` caches


def require_ctranslate2() -> Any:
    """The `ctranslate2` module, or an ImportError that says how to install it."""
    if ctranslate2 is None:
        raise ImportError(f"CTranslate2 is not installed: {INSTALL_HINT}")
    return ctranslate2


def check_ctranslate2() -> None:
    """An InputError that says how to install CTranslate2 where it is missing."""
    try:
        require_ctranslate2()
    except ImportError as error:
        raise InputError(str(error)) from None


def is_ctranslate2_folder(folder: str | os.PathLike) -> bool:
    """Whether `folder` holds a CTranslate2 model exported by `export_ctranslate2`."""
    return (Path(folder) / "model.bin").is_file() and (Path(folder) / EXPORT_INFO).is_file()


def export_ctranslate2(
    model_dir_or_repo_id: str | os.PathLike,
    output_dir: str | os.PathLike,
    quantization: str = "float32",
    overwrite: bool = False,
) -> Path:
    """Write the CTranslate2 export of a `d2l_transformer` folder (or Hub repo) to `output_dir`; its path.

    `quantization`: the stored weights, one of `QUANTIZATIONS` (`int8` computes in int8 on CPU). `output_dir` is a
    new or empty folder outside any model folder, or (with `overwrite`) an earlier export, recognised by its
    `hf_bahdanau_export.json`. The export is written into a fresh folder beside it and moved into place at the end,
    so a failed export leaves no half-written model.
    """
    require_ctranslate2()
    output = Path(output_dir)
    check_outside_model_folders(output)
    return _export(local_folder(model_dir_or_repo_id), output, quantization, overwrite)


def _export(folder: Path, output: Path, quantization: str, overwrite: bool) -> Path:
    """`export_ctranslate2` once the place of `output` is allowed."""
    require_ctranslate2()
    from .ctranslate2_converter import D2LTransformerConverter

    if quantization not in QUANTIZATIONS:
        raise InputError(f"quantization must be one of {', '.join(QUANTIZATIONS)}, got {quantization!r}")
    model_config = check_exportable(  # as saved: no local path in it (the export may be published)
        folder,
        "CTranslate2",
        "CTranslate2 has no RNN decoder, so only d2l_transformer models export; translate it with --engine torch",
    )
    check_export_output(output, folder, overwrite)
    fingerprint = source_fingerprint(folder)
    model, tokenizer = load_exportable(folder)

    def write(staging: Path) -> None:
        D2LTransformerConverter(model, tokenizer).convert(str(staging), quantization=quantization, force=True)
        for name in COPIED_FILES:
            if (folder / name).is_file():
                shutil.copy2(folder / name, staging / name)

    info = {"quantization": quantization, "source_fingerprint": fingerprint, "model_config": model_config}
    write_export(output, info, write)
    logger.info("exported %s to CTranslate2 (%s) in %s", folder, quantization, output)
    return output


def cached_export(model_dir: str | os.PathLike, quantization: str = "float32", folder: str | None = None) -> Path:
    """The CTranslate2 export kept in `model_dir` (`ctranslate2-<quantization>/`, or `folder`), exported now if
    it is missing or a file it was made from (config, weights, tokenizer, generation config) changed since."""
    model_dir = Path(model_dir)
    output = model_dir / (folder or f"{CACHE_PREFIX}{quantization}")
    if is_ctranslate2_folder(output):
        info = read_json(output / EXPORT_INFO)
        if info.get("quantization") == quantization and info.get("source_fingerprint") == source_fingerprint(model_dir):
            return output
        logger.info("the model in %s changed since its CTranslate2 export: exporting it again", model_dir)
    else:
        logger.info("exporting %s to CTranslate2 (%s) into %s, once", model_dir, quantization, output)
    return _export(model_dir, output, quantization, overwrite=True)


def published_export(model_dir: str | os.PathLike, dry_run: bool = False) -> list[str]:
    """The files of the float32 export that `publish --with-ctranslate2` uploads, as `ctranslate2/NAME` paths:
    exported into `model_dir/ctranslate2/` (kept while the model is unchanged), or, for a dry run, into a
    temporary folder that is removed (a dry run writes nothing in `model_dir`)."""
    require_ctranslate2()
    if not dry_run:
        return [
            f"{PUBLISHED_FOLDER}/{p.name}" for p in sorted(cached_export(model_dir, folder=PUBLISHED_FOLDER).iterdir())
        ]
    with tempfile.TemporaryDirectory(prefix="hf_bahdanau_export_") as scratch:
        export = export_ctranslate2(model_dir, Path(scratch) / PUBLISHED_FOLDER)
        return [f"{PUBLISHED_FOLDER}/{p.name}" for p in sorted(export.iterdir())]


__all__ = [
    "INSTALL_HINT",
    "QUANTIZATIONS",
    "cached_export",
    "check_ctranslate2",
    "export_ctranslate2",
    "is_ctranslate2_folder",
    "published_export",
    "require_ctranslate2",
]
