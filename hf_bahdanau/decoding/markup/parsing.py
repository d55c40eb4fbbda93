"""HTML read for `markup`: the standard library's `html.parser` events, each with its source, and the units a
document is cut at: tags, runs of text, comments, and elements kept whole (`<script>`, `<code>`, `translate="no"`),
each marked a boundary between segments or not. An inline element is moved with the text only where it holds no
boundary; an end tag that closes no moved element stays where it is, and one that closes nothing is dropped."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from html.parser import HTMLParser

INLINE = frozenset(
    "a abbr acronym b bdi bdo big cite code data del dfn em font i img ins kbd label mark q s samp small span strike "
    "strong sub sup time tt u var wbr".split()
)  # elements that sit inside a sentence; any other element (and <br>) separates segments
VOID = frozenset("area base br col embed hr img input link meta param source track wbr".split())
KEPT = frozenset("script style pre code textarea".split())  # elements kept as they are, content and all


@dataclass
class _Token:
    """One parser event: `kind` start, end, empty (`<x/>`), text or other (a comment, a declaration); `raw`: its
    source."""

    kind: str
    tag: str = ""
    attrs: list = field(default_factory=list)
    raw: str = ""


class _Tokens(HTMLParser):
    """The document as `_Token`s, each with the source between its start and the next one's."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.events: list[tuple[int, int, _Token]] = []  # (line, column, token)

    def _add(self, token: _Token) -> None:
        line, column = self.getpos()
        if token.kind == "text" and self.events and self.events[-1][2].kind == "text":
            return  # one run of text
        self.events.append((line, column, token))

    def handle_starttag(self, tag: str, attrs: list) -> None:
        self._add(_Token("start", tag, attrs))

    def handle_startendtag(self, tag: str, attrs: list) -> None:
        self._add(_Token("empty", tag, attrs))

    def handle_endtag(self, tag: str) -> None:
        self._add(_Token("end", tag))

    def handle_data(self, data: str) -> None:
        self._add(_Token("text"))

    def handle_comment(self, data: str) -> None:
        self._add(_Token("comment"))

    def handle_decl(self, decl: str) -> None:
        self._add(_Token("other"))

    def handle_pi(self, data: str) -> None:
        self._add(_Token("other"))

    def unknown_decl(self, data: str) -> None:
        self._add(_Token("other"))


def tokens(text: str) -> list[_Token]:
    """The parser's events over `text`, each with its source (`raw`); together they are `text` again."""
    parser = _Tokens()
    parser.feed(text)
    parser.close()
    line_starts = [0, *(match.end() for match in re.finditer("\n", text))]
    offsets = [line_starts[line - 1] + column for line, column, _ in parser.events]
    found = [token for _, _, token in parser.events]
    if not offsets or offsets[0] > 0:  # (the parser starts at 0; kept whole should it not)
        found.insert(0, _Token("text"))
        offsets.insert(0, 0)
    for token, start, end in zip(found, offsets, [*offsets[1:], len(text)], strict=True):
        token.raw = text[start:end]
    return [token for token in found if token.raw]


def _kept_whole(token: _Token) -> bool:
    """Whether an element is kept as it is, its content untranslated."""
    attrs = dict(token.attrs)
    return (token.tag in KEPT or (attrs.get("translate") or "").strip().lower() == "no"
            or "notranslate" in (attrs.get("class") or "").split())  # fmt: skip


def _closers(found: list[_Token]) -> list[int | None]:
    """For each start token, the index of its end tag, or `-1 - i` where it is left unclosed (i: the token that closes
    it implicitly, or the end of the document); None for other tokens."""
    closer: list[int | None] = [None] * len(found)
    stack: list[int] = []
    for i, token in enumerate(found):
        if token.kind == "start" and token.tag not in VOID:
            stack.append(i)
            closer[i] = -1 - len(found)
        elif token.kind == "end" and any(found[j].tag == token.tag for j in stack):
            while True:
                j = stack.pop()
                if found[j].tag == token.tag:
                    closer[j] = i
                    break
                closer[j] = -1 - i
    return closer


@dataclass
class Unit:
    """A token, or an element kept whole (`raw`: its source); `close`: where a moved element's end is (its end tag's
    unit, or `-1 - i` left unclosed); `boundary`: separates segments."""

    kind: str
    tag: str
    raw: str
    close: int | None = None
    boundary: bool = False


def parse_units(found: list[_Token]) -> list[Unit]:
    """The tokens with elements kept whole merged into one unit each, and each unit marked a boundary or not."""
    closer = _closers(found)
    units: list[Unit] = []
    index: dict[int, int] = {}  # token -> unit
    starts: list[int] = []  # unit -> its (first) token
    i = 0
    while i < len(found):
        token = found[i]
        index[i] = len(units)
        starts.append(i)
        if token.kind == "start" and token.tag not in VOID and _kept_whole(token):
            last = closer[i] if closer[i] >= 0 else -2 - closer[i]  # its end tag, or the token before its closer
            units.append(Unit("whole", token.tag, "".join(t.raw for t in found[i : last + 1])))
            i = last + 1
            continue
        units.append(Unit(token.kind, token.tag, token.raw))
        i += 1
    index[len(found)] = len(units)
    for unit, first in zip(units, starts, strict=True):
        if unit.kind == "start" and unit.tag in INLINE and unit.tag not in VOID:
            close = closer[first]
            unit.close = index[close] if close >= 0 else -1 - index[-1 - close]
        unit.boundary = unit.kind not in ("text", "comment") and (unit.tag not in INLINE or unit.kind == "other")
    closed = {unit.close for unit in units if unit.close is not None and unit.close >= 0}
    ends = {end for end in closer if end is not None and end >= 0}  # the tokens that close an element
    for i, unit in enumerate(units):
        if unit.kind == "end" and starts[i] not in ends:  # it closes nothing: dropped, as an HTML parser ignores it
            unit.raw, unit.boundary = "", False
        elif unit.kind == "end" and i not in closed:  # it closes an element that does not move: it stays
            unit.boundary = True
    nearest = len(units)  # the first boundary after the unit at hand
    for i in range(len(units) - 1, -1, -1):  # an element holding a boundary cannot move: it is one too
        unit = units[i]
        if unit.close is not None and not unit.boundary:
            end = unit.close if unit.close >= 0 else -1 - unit.close
            if nearest < end:
                unit.boundary = True
                if unit.close >= 0:
                    units[unit.close].boundary = True
        if unit.boundary:
            nearest = i
    return units


__all__ = ["INLINE", "KEPT", "VOID", "Unit", "parse_units", "tokens"]
