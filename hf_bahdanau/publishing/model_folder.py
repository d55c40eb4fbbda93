"""Reading a trained model folder: its JSON files, and whether it holds a trained model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hf_bahdanau.errors import InputError


def read_json(path: Path) -> dict[str, Any]:
    """The JSON object in `path` ({} where there is no file); a one-line InputError naming the file otherwise."""
    if not path.is_file():
        return {}
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise InputError(f"{path} cannot be read ({error.strerror or error})") from None
    except RecursionError:
        raise InputError(f"{path} is nested too deeply to read: fix or remove it") from None
    except ValueError as error:
        raise InputError(f"{path} is not valid JSON ({error}): fix or remove it") from None
    if not isinstance(value, dict):
        raise InputError(f"{path} does not hold a JSON object: fix or remove it")
    return value


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
