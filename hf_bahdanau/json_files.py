"""JSON files that hold one object (a model folder's config and records, a run's settings), read with a one-line
error naming the file."""

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


__all__ = ["read_json"]
