"""JSON files that hold one object (a model folder's config and records, a run's settings), read with a one-line
error naming the file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hf_bahdanau.errors import InputError


def parse_json(text: str, where: str, **options: Any) -> Any:
    """`json.loads(text, **options)`; a one-line InputError starting with `where` for invalid or too deeply nested
    JSON (a `parse_constant` option that refuses a constant raises a ValueError, named the same way)."""
    try:
        return json.loads(text, **options)
    except json.JSONDecodeError as error:
        place = f"column {error.colno}" if error.lineno == 1 else f"line {error.lineno}, column {error.colno}"
        raise InputError(f"{where}: invalid JSON ({error.msg} at {place})") from None
    except RecursionError:
        raise InputError(f"{where}: JSON nested too deeply to read") from None
    except ValueError as error:
        raise InputError(f"{where}: invalid JSON ({error})") from None


def read_json(path: Path) -> dict[str, Any]:
    """The JSON object in `path` ({} where there is no file); a one-line InputError naming the file otherwise."""
    if not path.is_file():
        return {}
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise InputError(f"{path} cannot be read ({error.strerror or error})") from None
    except ValueError as error:  # not UTF-8
        raise InputError(f"{path}: not UTF-8 text ({error}): fix or remove it") from None
    try:
        value = parse_json(text, str(path))
    except InputError as error:
        raise InputError(f"{error}: fix or remove it") from None
    if not isinstance(value, dict):
        raise InputError(f"{path} does not hold a JSON object: fix or remove it")
    return value


__all__ = ["parse_json", "read_json"]
