"""A command's standard streams: lines typed at a prompt, stdin read as lines or in chunks as they come, and stdout
written at once, a reader that went away or a full disk ending the command as Unix tools end."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterable, Iterator

from hf_bahdanau.errors import UnwritableError

SIGPIPE_STATUS = 128 + signal.SIGPIPE  # the status of a Unix tool whose reader went away (`... | head -1`)


def write_out(text: str, what: str = "the translations") -> None:
    """Write `text` (`what` it is, for an error) to stdout, now. A reader that went away ends the command quietly,
    with SIGPIPE's status, as Unix tools end; stdout that cannot be written (a full disk) is a one-line error. Either
    way what is left unwritten is dropped, so that the interpreter's flush at exit does not fail again."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        drop_stdout()
        raise SystemExit(SIGPIPE_STATUS) from None
    except OSError as error:
        drop_stdout()
        raise UnwritableError(f"{what} cannot be written to stdout ({error.strerror or error})") from None


def drop_stdout() -> None:
    """Point stdout's file descriptor at /dev/null (a stand-in without one, such as io.StringIO, stays)."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


def interactive_lines(prompt: str) -> Iterable[str]:
    """Lines typed at a prompt, until end of input or `q` (like d2l's seed loop)."""
    while True:
        try:
            line = input(prompt)
        except EOFError:
            return
        if line.strip() == "q":
            return
        yield line


def stdin_lines() -> list[str]:
    """Lines of stdin as UTF-8; bad bytes become U+FFFD (a warning names the line), so the rest still translates."""
    from hf_bahdanau.data.text_lines import decode_lines

    stream = getattr(sys.stdin, "buffer", None)  # None for a text stand-in such as io.StringIO
    raw = stream if stream is not None else (line.encode("utf-8", "surrogateescape") for line in sys.stdin)
    return [line.rstrip("\r\n") for line in decode_lines(raw, "stdin", replace=True)]


def stdin_chunks(max_lines: int, pause: float = 0.05) -> Iterator[list[str]]:
    """The lines of stdin (as `stdin_lines` reads them) in chunks to translate: `max_lines` at a time, and what has
    come whenever the input pauses for `pause` seconds, so that a line typed into a pipe is translated at once. A
    stand-in without a file descriptor (io.StringIO) is one chunk."""
    import select

    from hf_bahdanau.data.text_lines import decode_lines

    try:
        fd = sys.stdin.buffer.fileno()
    except (AttributeError, OSError, ValueError):
        yield stdin_lines()
        return
    raw: list[bytes] = []
    pending, number, ended = b"", 1, False

    def taken(count: int) -> list[str]:
        nonlocal number
        chunk, raw[:count] = raw[:count], []
        lines = [line.rstrip("\r\n") for line in decode_lines(chunk, "stdin", replace=True, start=number)]
        number += len(chunk)
        return lines

    while not ended:
        if raw and not select.select([fd], [], [], pause)[0]:
            yield taken(len(raw))  # the input paused: translate what came
            continue
        data = os.read(fd, 1 << 16)
        ended = not data
        *lines, pending = (pending + data).split(b"\n") if data else (pending, b"")
        raw.extend(line + b"\n" for line in lines if data or line)
        while len(raw) >= max_lines:
            yield taken(max_lines)
    if raw:
        yield taken(len(raw))
