"""The check that a folder holds a trained model."""

from __future__ import annotations

from pathlib import Path

from hf_bahdanau.errors import InputError
from hf_bahdanau.json_files import read_json


def check_model_folder(folder: str | Path) -> Path:
    """`folder` as a Path if it holds a trained model (config, safetensors weights, tokenizer), else InputError."""
    folder = Path(folder)
    config = read_json(folder / "config.json")
    if not config.get("model_type"):
        raise InputError(f"{folder} is not a trained model folder (no config.json with a model_type)")
    if not any(folder.glob("*.safetensors")):
        raise InputError(f"{folder} is not a trained model folder (no safetensors weights)")
    if not (folder / "tokenizer_config.json").is_file():
        raise InputError(f"{folder} is not a trained model folder (no tokenizer)")
    return folder
