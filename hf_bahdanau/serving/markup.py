"""HTML (`format=html`): the text between tags is translated, the tags, comments and the insides of `<script>` and
`<style>` are kept as they were. Character references are read as characters (`&amp;` -> `&`) before translating
and the translation is escaped again."""

from __future__ import annotations

import html
import re

# a comment, CDATA, or a tag (`<` followed by a letter, `/`, `!` or `?`: a lone `a < b` stays text)
_TAG = re.compile(r"<!--.*?-->|<!\[CDATA\[.*?\]\]>|<[A-Za-z/!?][^>]*>", re.DOTALL)
_RAW_START = re.compile(r"<(script|style)\b", re.IGNORECASE)


def split_markup(text: str) -> list[tuple[bool, str]]:
    """`text` as consecutive pieces `(translate, piece)`: `translate` is True for text between tags (unescaped),
    False for what is kept as it is (tags, comments, script and style contents, whitespace-only text)."""
    pieces: list[tuple[bool, str]] = []
    position = 0
    raw_until: str | None = None  # inside <script> or <style>: kept until its end tag
    for match in _TAG.finditer(text):
        between = text[position : match.start()]
        if between:
            keep = raw_until is not None or not between.strip()
            pieces.append((False, between) if keep else (True, html.unescape(between)))
        tag = match.group()
        if raw_until is None and (start := _RAW_START.match(tag)):
            raw_until = f"</{start.group(1).lower()}"
        elif raw_until is not None and tag.lower().startswith(raw_until):
            raw_until = None
        pieces.append((False, tag))
        position = match.end()
    rest = text[position:]
    if rest:
        pieces.append((False, rest) if raw_until is not None or not rest.strip() else (True, html.unescape(rest)))
    return pieces


def join_markup(pieces: list[tuple[bool, str]], translations: list[str]) -> str:
    """The document again: each text piece replaced by the next of `translations` (escaped), keeping the piece's
    leading and trailing whitespace."""
    ahead = iter(translations)
    parts = []
    for translate, piece in pieces:
        if not translate:
            parts.append(piece)
            continue
        lead = piece[: len(piece) - len(piece.lstrip())]
        trail = piece[len(piece.rstrip()) :]
        parts.append(lead + html.escape(next(ahead), quote=False) + trail)
    return "".join(parts)


__all__ = ["join_markup", "split_markup"]
