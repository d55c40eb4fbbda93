"""Lines of UTF-8 text from bytes, with a one-line error (or warning) naming where a line does not decode.

Corpus files and `translate`'s standard input both read through it; it needs no corpus library.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from pathlib import Path

from hf_bahdanau.errors import InputError

logger = logging.getLogger(__name__)


def decode_lines(raw_lines: Iterable[bytes], where: str | Path, replace: bool = False, start: int = 1) -> Iterator[str]:
    """UTF-8 lines of `raw_lines` (line ends kept, numbered from `start`), without the byte order mark a first
    line may start with.

    Undecodable bytes raise an InputError naming `where` and the line; with `replace`, they become U+FFFD and a
    warning names the line instead.
    """
    for number, raw in enumerate(raw_lines, start=start):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as err:
            if not replace:
                raise InputError(f"{where}: line {number} is not valid UTF-8 ({err})") from err
            logger.warning("%s: line %d is not valid UTF-8 (%s); bad bytes replaced by U+FFFD", where, number, err)
            line = raw.decode("utf-8", errors="replace")
        yield line.removeprefix("\ufeff") if number == 1 else line
