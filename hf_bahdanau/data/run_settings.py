"""The corpus settings file a training run writes into its model folder, read without any corpus library.

`translate` reads it at start-up (the longest source the model was trained on), so it stays free of `datasets`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hf_bahdanau.json_files import read_json

DATA_SETTINGS_FILE = "translation_data.json"  # written by `train`, read back by `evaluate` and the model card


def corpus_id(data: str) -> str:
    """How a run records its corpus: an existing path absolute (valid from any folder), a name as given."""
    return str(Path(data).resolve()) if Path(data).exists() else data


def read_data_settings(model_dir: str | Path) -> dict[str, Any]:
    """The corpus settings a model folder was trained with (empty for a folder not made by `train`)."""
    return read_json(Path(model_dir) / DATA_SETTINGS_FILE)
