"""Language names by code, for the model card and the server's `/languages` (standard library only)."""

from __future__ import annotations

LANGUAGE_NAMES = {"de": "German", "en": "English", "fr": "French", "cs": "Czech", "es": "Spanish"}


def language_name(code: str) -> str:
    """A language's English name where known, else its code."""
    return LANGUAGE_NAMES.get(code, code)


__all__ = ["LANGUAGE_NAMES", "language_name"]
