"""An export folder and the guards on it, for every format (CTranslate2, ONNX, standard transformers, web).

An export is written into a fresh folder beside its place and moved there at the end (`write_export`), so a failed
export leaves no half-written folder; its `hf_bahdanau_export.json` lists the files it wrote, the only ones
`--overwrite` may replace. `check_export_output` refuses a place that would destroy something a user made.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hf_bahdanau.choices import EXPORT_INFO
from hf_bahdanau.errors import InputError, as_input_error
from hf_bahdanau.folders import fresh_sibling, replace_with
from hf_bahdanau.json_files import read_json

# Files of the model folder an export carries beside its own model files.
COPIED_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json")
# Every file an export reads: a cached export is redone when one of them changes.
SOURCE_PATTERNS = ("config.json", "*.safetensors", "model.safetensors.index.json", *COPIED_FILES)


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


def check_outside_model_folders(output: Path) -> None:
    """An InputError when the export folder `output` is or lies in a saved model folder."""
    inside = _model_folder_around(output.resolve())
    if inside is not None:
        raise InputError(f"the export folder {output} is in the model folder {inside}: choose a folder outside it")


def load_exportable(folder: Path) -> tuple[Any, Any]:
    """The `d2l_transformer` of `folder` (float32, eval mode) and its tokenizer, loaded as every front end loads a
    folder (`loading.load_translation_model`: never through the folder's own code, every weight found)."""
    from hf_bahdanau.decoding.loading import load_translation_model

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
