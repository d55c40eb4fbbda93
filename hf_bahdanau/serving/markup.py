"""HTML (`format=html`): the text between tags is translated, the tags, comments and the insides of `<script>` and
`<style>` are kept as they were. The standard library's `html.parser` finds where each tag, comment, declaration
and run of text starts (a quoted attribute value may hold `<` or `>`); each piece is the source between two starts.
Character references are read as characters (`&amp;` -> `&`) before translating and the translation is escaped
again, quotes included."""

from __future__ import annotations

import html
import re
from html.parser import HTMLParser

_RAW = ("script", "style")  # elements whose content is not text to translate


class _Starts(HTMLParser):
    """Records where each piece starts, and whether it is text to translate."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.line_starts = [0, *(match.end() for match in re.finditer("\n", text))]  # as `getpos` counts lines
        self.starts: list[tuple[int, bool]] = []  # (offset in the text, translate)
        self.raw: str | None = None  # inside <script> or <style>: its name

    def _start(self, translate: bool) -> None:
        line, column = self.getpos()
        offset = self.line_starts[line - 1] + column
        if not (self.starts and self.starts[-1][1] and translate):  # runs of text are one piece
            self.starts.append((offset, translate))

    def handle_starttag(self, tag: str, attrs: list) -> None:
        self._start(False)
        if tag in _RAW:
            self.raw = tag

    def handle_startendtag(self, tag: str, attrs: list) -> None:
        self._start(False)

    def handle_endtag(self, tag: str) -> None:
        self._start(False)
        if tag == self.raw:
            self.raw = None

    def handle_data(self, data: str) -> None:
        self._start(self.raw is None)

    def handle_comment(self, data: str) -> None:
        self._start(False)

    def handle_decl(self, decl: str) -> None:
        self._start(False)

    def handle_pi(self, data: str) -> None:
        self._start(False)

    def unknown_decl(self, data: str) -> None:
        self._start(False)


def split_markup(text: str) -> list[tuple[bool, str]]:
    """`text` as consecutive pieces `(translate, piece)`: `translate` is True for text between tags (unescaped),
    False for what is kept as it is (tags, comments, script and style contents, whitespace-only text)."""
    parser = _Starts(text)
    parser.feed(text)
    parser.close()
    offsets = [offset for offset, _ in parser.starts] + [len(text)]
    pieces = []
    for (start, translate), end in zip(parser.starts, offsets[1:], strict=True):
        piece = text[start:end]
        if piece:
            pieces.append((True, html.unescape(piece)) if translate and piece.strip() else (False, piece))
    return pieces


def join_markup(pieces: list[tuple[bool, str]], translations: list[str]) -> str:
    """The document again: each text piece replaced by the next of `translations` (escaped, quotes included),
    keeping the piece's leading and trailing whitespace."""
    ahead = iter(translations)
    parts = []
    for translate, piece in pieces:
        if not translate:
            parts.append(piece)
            continue
        lead = piece[: len(piece) - len(piece.lstrip())]
        trail = piece[len(piece.rstrip()) :]
        parts.append(lead + html.escape(next(ahead), quote=True) + trail)
    return "".join(parts)


__all__ = ["join_markup", "split_markup"]
