"""Export d2l Transformers to CTranslate2: the export, its cache and the guards on its folder.

`export_ctranslate2(model, output)` writes a CTranslate2 model folder (`model.bin`, its `config.json`, the shared
vocabulary) through the converter (`converter.py`, imported when an export is made: it needs torch). Beside it the
folder gets the tokenizer files, the generation config and `hf_bahdanau_export.json` (the model's config and a
fingerprint of the files it came from).

CTranslate2 has no RNN decoder: the `bahdanau` model type is refused. `decoding/ctranslate2.py` translates with
an export; what it needs of this module (the guards, the cache) imports neither torch nor transformers.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hf_bahdanau.choices import EXPORT_INFO
from hf_bahdanau.choices import EXPORT_QUANTIZATIONS as QUANTIZATIONS  # what `export --quantization` offers
from hf_bahdanau.errors import InputError, as_input_error
from hf_bahdanau.folders import fresh_sibling, replace_with
from hf_bahdanau.json_files import read_json

try:  # an optional extra: `pip install hf_bahdanau[ctranslate2]`
    import ctranslate2
except ImportError:  # `require_ctranslate2` says how to install it
    ctranslate2 = None

logger = logging.getLogger(__name__)

INSTALL_HINT = "pip install hf_bahdanau[ctranslate2]"
# Files of the model folder copied beside the CTranslate2 model (its own config.json is CTranslate2's).
COPIED_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json")
# Every file an export reads: a cached export is redone when one of them changes.
SOURCE_PATTERNS = ("config.json", "*.safetensors", "model.safetensors.index.json", *COPIED_FILES)
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


def is_export_folder(folder: str | os.PathLike) -> bool:
    """Whether `folder` holds an export of this package, of any format (its `hf_bahdanau_export.json`)."""
    return (Path(folder) / EXPORT_INFO).is_file()


def local_folder(model_dir_or_repo_id: str | os.PathLike) -> Path:
    """A local model folder, or the needed files of a Hub repo downloaded into the Hub cache."""
    folder = Path(model_dir_or_repo_id)
    if folder.is_dir():
        return folder
    if folder.exists() or str(model_dir_or_repo_id).count("/") != 1:
        raise InputError(f"{model_dir_or_repo_id} is neither a model folder nor a Hub repo id (OWNER/NAME)")
    from huggingface_hub import snapshot_download

    with as_input_error(OSError):  # offline, no such repo, no access
        return Path(snapshot_download(str(model_dir_or_repo_id), allow_patterns=list(SOURCE_PATTERNS)))


def source_fingerprint(folder: str | os.PathLike) -> str:
    """A sha256 over every file an export reads (config, weights, tokenizer, generation config)."""
    digest = hashlib.sha256()
    paths = sorted({path for pattern in SOURCE_PATTERNS for path in Path(folder).glob(pattern) if path.is_file()})
    for path in paths:
        digest.update(path.name.encode())
        with path.open("rb") as file:
            for block in iter(lambda: file.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def check_exportable(folder: Path, target: str, rnn_reason: str | None) -> dict[str, Any]:
    """The folder's config.json, or an InputError for a folder that cannot be exported to `target` (an RNN, for
    `rnn_reason`; None: an RNN exports too)."""
    config_file = folder / "config.json"
    if not config_file.is_file():
        raise InputError(f"{folder} is not a saved model folder (no config.json)")
    config = read_json(config_file)
    model_type = config.get("model_type")
    if model_type == "bahdanau" and rnn_reason is not None:
        raise InputError(f"{folder} holds an RNN encoder-decoder (model type bahdanau): {rnn_reason}")
    families = ("d2l_transformer",) if rnn_reason is not None else ("bahdanau", "d2l_transformer")
    if model_type not in families:
        raise InputError(f"{folder} holds a {model_type!r} model: only {' and '.join(families)} models export to "
                         f"{target}")  # fmt: skip
    check_tokenizer_file(folder)
    return config


def check_tokenizer_file(folder: Path) -> None:
    """An InputError naming the file when `folder` lacks the `tokenizer.json` an export reads and carries."""
    if not (folder / "tokenizer.json").is_file():
        raise InputError(f"{folder} has no tokenizer.json: save the model with its tokenizer (save_pretrained)")


def _model_folder_around(path: Path) -> Path | None:
    """The saved model folder that `path` is or lies in (an export is none), or None."""
    for folder in (path, *path.parents):
        if (folder / "config.json").is_file() and not is_export_folder(folder):
            return folder
    return None


def check_export_output(output: Path, folder: Path, overwrite: bool) -> None:
    """Refuse an export folder that would destroy something: the model folder (or a folder holding it), a file, a
    folder holding anything but an export this package made, an earlier export with files it did not write in it,
    or (without `overwrite`) an earlier export."""
    if folder.resolve().is_relative_to(output.resolve()):
        raise InputError(f"the export folder {output} would replace the model folder {folder}: choose another")
    if output.is_symlink() or (output.exists() and not output.is_dir()):
        raise InputError(f"{output} exists and is not a folder: choose another export folder")
    if not output.exists() or not any(output.iterdir()):
        return
    if not is_export_folder(output):
        raise InputError(
            f"{output} holds files that are not an export of this package (no {EXPORT_INFO}): export replaces only "
            "its own exports; choose another folder"
        )
    if not overwrite:
        raise InputError(f"{output} holds an earlier export: pass --overwrite to replace it")
    others = sorted(set(os.listdir(output)) - _written_files(output))
    if others:
        raise InputError(
            f"{output} holds files its export did not write ({', '.join(others)}): --overwrite replaces only an "
            "export's own files; move them away or choose another folder"
        )


def _written_files(export: Path) -> set[str]:
    """The names of the files export `export` wrote: those its info lists (an export made before they were listed:
    CTranslate2's model, config and vocabularies, the copied files and the info)."""
    listed = read_json(export / EXPORT_INFO).get("files")
    if isinstance(listed, list):
        return set(map(str, listed))
    vocabularies = {path.name for path in export.glob("*vocabulary*")}
    return {"model.bin", "config.json", *vocabularies, *COPIED_FILES, EXPORT_INFO}


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


def check_outside_model_folders(output: Path) -> None:
    """An InputError when the export folder `output` is or lies in a saved model folder."""
    inside = _model_folder_around(output.resolve())
    if inside is not None:
        raise InputError(f"the export folder {output} is in the model folder {inside}: choose a folder outside it")


def load_exportable(folder: Path) -> tuple[Any, Any]:
    """The `d2l_transformer` of `folder` (float32, eval mode) and its tokenizer, loaded as every front end loads a
    folder (`loading.load_translation_model`: never through the folder's own code, every weight found)."""
    from .loading import load_translation_model

    model, tokenizer = load_translation_model(str(folder))
    return model.float(), tokenizer


def write_export(output: Path, info: dict[str, Any], write: Callable[[Path], None]) -> Path:
    """`write(staging)` fills a fresh folder beside `output`; `info` and the list of the files written go into its
    `hf_bahdanau_export.json` (what `--overwrite` may replace), and it is moved into place at the end, so a failed
    export leaves no half-written folder. Returns `output`."""
    staging = fresh_sibling(output, "exporting")
    try:
        write(staging)
        files = sorted([*os.listdir(staging), EXPORT_INFO])
        (staging / EXPORT_INFO).write_text(json.dumps({**info, "files": files}, indent=2) + "\n", encoding="utf-8")
        replace_with(output, staging)
    finally:
        shutil.rmtree(staging, ignore_errors=True)  # made above; gone once moved into place
    return output


def _export(folder: Path, output: Path, quantization: str, overwrite: bool) -> Path:
    """`export_ctranslate2` once the place of `output` is allowed."""
    require_ctranslate2()
    from .converter import D2LTransformerConverter

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
    "check_exportable",
    "export_ctranslate2",
    "is_ctranslate2_folder",
    "published_export",
    "require_ctranslate2",
]
