"""The package's own errors for bad input: the command line prints them as one line, with no traceback.

`InputError` is a `ValueError`, so code that catches `ValueError` around the package's calls keeps working; the
subclasses for a missing path, an existing or unwritable output and an unreachable server are also the `OSError`
a caller expects of those. Anything else that reaches the command line is a bug and keeps its traceback.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


class InputError(ValueError):
    """Input the package cannot use (a file, an option, a text, a download), with a message naming the problem."""


class InputNotFoundError(InputError, FileNotFoundError):
    """A file, folder or corpus the user named is not there."""


class OutputExistsError(InputError, FileExistsError):
    """An output the user named exists or is in use: the package overwrites nothing."""


class UnwritableError(InputError, OSError):
    """An output the user named cannot be written (a full disk, no permission)."""


class UnreachableError(InputError, ConnectionError):
    """A download or upload the user asked for cannot reach its server (offline, refused, cut off)."""


@contextmanager
def as_input_error(*kinds: type[Exception]) -> Iterator[None]:
    """Re-raise an error of `kinds` from the block as an InputError with the same message: around a library (or a
    shipped model file) reading what the user gave, whose refusals of a bad file are ValueErrors or OSErrors."""
    try:
        yield
    except InputError:
        raise
    except kinds as error:
        raise InputError(str(error)) from error


__all__ = [
    "InputError",
    "InputNotFoundError",
    "OutputExistsError",
    "UnreachableError",
    "UnwritableError",
    "as_input_error",
]
