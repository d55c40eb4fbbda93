"""The package's own error for bad input: the command line prints it as one line, with no traceback.

`InputError` is a `ValueError`, so code that catches `ValueError` around the package's calls keeps working.
Anything else that reaches the command line is a bug and keeps its traceback.
"""

from __future__ import annotations


class InputError(ValueError):
    """Input the package cannot use (a file, an option, a text), with a message naming the problem."""


__all__ = ["InputError"]
