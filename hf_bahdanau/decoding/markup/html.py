"""HTML translated a sentence at a time, its inline elements put back on the words they were aligned to.

    document = HtmlDocument.parse('<p>Ein <b>großer</b> Hund.</p>', "de")
    found = translator.translate(document.sentences, alignments="source")
    document.rebuild([(t.text, t.alignment) for t in found])   # '<p>A <b>big</b> dog.</p>'

The standard library's `html.parser` reads the document (a quoted attribute value may hold `<` or `>`; each tag,
comment and run of text is the source between two of the parser's positions, so what is kept is kept byte for byte).
Block elements, `<br>` and whatever cannot be moved (a declaration, an inline element holding a block) cut the text
into segments and stay where they are; an end tag that closes nothing is dropped, as an HTML parser ignores it. In a
segment the inline elements (`<b>`, `<a href>`, `<span>`, ...) are taken out, the plain text (character references
read: `&amp;` -> `&`) is split into sentences (`documents.split_sentences`) and each sentence is translated whole;
then each element goes back around the target words aligned to its source words (`markup_projection`), and the text
is escaped again (`&`, `<`, `>`). An element with no words (`<img>`, `<b></b>`), a comment, and `<code>` or an
inline element with `translate="no"` (or class `notranslate`) are kept whole at the aligned gap. `<script>`,
`<style>`, `<pre>`, `<textarea>` and block elements with `translate="no"` are kept as they are, as boundaries. An
inline element left unclosed is closed at the end of its segment. A translation without an alignment (None: an
engine that gives none) puts the elements at the same relative positions. A segment's leading and trailing
whitespace is kept; the sentences of a segment are joined by a space.
"""

from __future__ import annotations

import html
import re
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from hf_bahdanau.decoding.documents import check_language, grouped, split_sentences

from .parsing import parse_units, tokens
from .projection import Element, layout, parse_links, project, relative_links

WORD = re.compile(r"\S+")
ALIGNMENT = "source"  # the Translator's alignments that tags are put back by (`alignment.source_pharaoh`)


@dataclass
class Segment:
    """Text between boundaries: its plain text (`text`) and source (`raw`); its inline elements as character spans
    `(start, end, parent, atomic)` in source order, with their opening and closing source; its words' character
    spans, and its sentences with the words of each."""

    text: str = ""
    raw: str = ""
    spans: list[tuple[int, int, int | None, bool]] = field(default_factory=list)
    opening: list[str] = field(default_factory=list)
    closing: list[str] = field(default_factory=list)
    whole: list[str] = field(default_factory=list)  # each element's source, content and all
    words: list[tuple[int, int]] = field(default_factory=list)
    sentences: list[str] = field(default_factory=list)
    counts: list[int] = field(default_factory=list)
    word_starts: list[int] = field(default_factory=list)
    word_ends: list[int] = field(default_factory=list)

    def elements(self) -> list[Element]:
        """The inline elements over words: the words a span's characters touch, or a gap (an atomic element, or a
        span that holds no word: written whole, with what it holds) before the first word at or after it."""
        starts, ends = self.word_starts, self.word_ends
        found: list[Element] = []
        for start, end, parent, atomic in self.spans:
            first, last = bisect_right(ends, start), bisect_left(starts, end)  # words [first, last) touch it
            if not atomic and first < last and (parent is None or not found[parent].atomic):
                found.append(Element(first, last, parent))
            else:
                gap = bisect_left(starts, start)
                found.append(Element(gap, gap, parent, True))
        return found

    def markup(self, elements: list[Element], k: int) -> str:
        """What an atomic element writes: its source whole (nothing inside one written whole)."""
        parent = elements[k].parent
        return "" if parent is not None and elements[parent].atomic else self.whole[k]

    def punctuation_outside(self, k: int) -> tuple[bool, bool]:
        """Whether span element k leaves out the punctuation before its first word (`(<b>Hund</b>`) and after its
        last (`<a>hier</a>.`): the translation's is kept out of it too."""
        start, end, _, atomic = self.spans[k]
        starts, ends = self.word_starts, self.word_ends
        first, last = bisect_right(ends, start), bisect_left(starts, end)  # the words [first, last) it touches
        if atomic or first >= last:
            return False, False
        first, last = starts[first], ends[last - 1]
        before, after = self.text[first:start], self.text[end:last]
        return bool(before) and not any(c.isalnum() for c in before), bool(after) and not any(
            c.isalnum() for c in after
        )

    def spaced_after(self, k: int) -> bool:
        """Whether element k ends where whitespace follows."""
        return self.text[self.spans[k][1] : self.spans[k][1] + 1].isspace()

    def glued(self, k: int) -> bool:
        """Whether element k follows a word with no whitespace between (it is written before the space)."""
        start = self.spans[k][0]
        return start > 0 and not self.text[start - 1].isspace()


class HtmlDocument:
    """An HTML text as what is kept and the sentences to translate: `parse`, translate `sentences`, `rebuild`."""

    def __init__(self, parts: list[str | Segment]) -> None:
        self.parts = parts
        self.segments = [part for part in parts if isinstance(part, Segment)]
        self.sentences = [sentence for segment in self.segments for sentence in segment.sentences]

    @classmethod
    def parse(cls, text: str, language: str) -> HtmlDocument:
        """The document of `text`; its sentences split by the rules of `language`."""
        units = parse_units(tokens(text))
        parts: list[str | Segment] = []
        segment = Segment()
        texts: list[str] = []  # the segment's text and source, in pieces (joined when it ends)
        raws: list[str] = []
        length = 0  # of its text so far
        open_elements: list[tuple[int, int]] = []  # (element, where it closes: `Unit.close`)

        def close_to(position: int) -> None:  # the elements that end at unit `position`, innermost first
            while open_elements and open_elements[-1][1] in (position, -1 - position):
                element, end = open_elements.pop()
                start, _, parent, atomic = segment.spans[element]
                segment.spans[element] = (start, length, parent, atomic)
                tag = re.match(r"<([^\s/>]+)", segment.opening[element]).group(1)
                segment.closing[element] = units[end].raw if end >= 0 else f"</{tag}>"
                segment.whole[element] = "".join(raws[segment.whole[element] :]) + segment.closing[element]

        def flush() -> None:
            nonlocal segment, texts, raws, length
            close_to(len(units))
            if raws:
                segment.text, segment.raw = "".join(texts), "".join(raws)
                parts.append(_finish(segment, language))
            segment, texts, raws, length = Segment(), [], [], 0

        for i, unit in enumerate(units):
            close_to(i)
            if unit.boundary:
                flush()
                parts.append(unit.raw)
                continue
            parent = open_elements[-1][0] if open_elements else None
            if unit.kind == "start" and unit.close is not None:
                open_elements.append((len(segment.spans), unit.close))
                segment.spans.append((length, length, parent, False))
                segment.whole.append(len(raws))  # where it starts, until it closes
            elif unit.kind not in ("text", "end"):  # an empty element, a comment, an element kept whole
                segment.spans.append((length, length, parent, True))
                segment.whole.append(unit.raw)
            if unit.kind not in ("text", "end"):
                segment.opening.append(unit.raw)
                segment.closing.append("")
            raws.append(unit.raw)
            if unit.kind == "text":
                texts.append(html.unescape(unit.raw))
                length += len(texts[-1])
        flush()
        return cls(parts)

    def rebuild(self, translations: Sequence[tuple[str, str | None]]) -> str:
        """The document with each sentence's translation (its text, and its Pharaoh alignment or None) in place."""
        ahead = iter(translations)
        return "".join(part if isinstance(part, str) else _render(part, [next(ahead) for _ in part.sentences])
                       for part in self.parts)  # fmt: skip


def translate_html(translator: Any, texts: Sequence[str], language: str | None = None, **options: Any) -> list[str]:
    """Each HTML text translated a sentence at a time by `translator` (the `Translator` whose `translate_html` calls
    this; `options`: its `translate`'s), the inline tags put back through the alignments (an engine without them: at
    the same relative positions); `language`: the sentence splitter's (default: the model's source language)."""
    language = check_language(language or translator.config.source_language)
    documents = [HtmlDocument.parse(text, language) for text in texts]
    sentences = [sentence for document in documents for sentence in document.sentences]
    found = translator.translate(sentences, alignments=ALIGNMENT if translator.engine == "torch" else False, **options)
    aligned = [(translation.text, translation.alignment) for translation in found]
    groups = grouped((len(document.sentences) for document in documents), aligned)
    return [document.rebuild(group) for document, group in zip(documents, groups, strict=True)]


def _finish(segment: Segment, language: str) -> Segment | str:
    """The segment with its words and sentences; one with no words is kept as it is (its source)."""
    segment.words = [match.span() for match in WORD.finditer(segment.text)]
    segment.word_starts, segment.word_ends = [s for s, _ in segment.words], [e for _, e in segment.words]
    if not segment.words:
        return segment.raw
    start, end = segment.words[0][0], segment.words[-1][1]
    core = segment.text[start:end]
    sentences, counts, cursor = split_sentences(core, language), [], start
    starts = segment.word_starts
    for sentence in sentences:
        found = segment.text.find(sentence, cursor)
        if found < 0:  # the splitter changed the text: the segment is one sentence
            sentences, counts = [core], [len(segment.words)]
            break
        cursor = found + len(sentence)
        counts.append(bisect_left(starts, cursor) - bisect_left(starts, found))
    if sum(counts) != len(segment.words):  # words between sentences the splitter left out
        sentences, counts = [core], [len(segment.words)]
    segment.sentences, segment.counts = [" ".join(sentence.split()) for sentence in sentences], counts
    return segment


def _render(segment: Segment, translations: list[tuple[str, str | None]]) -> str:
    """The segment's translation with its elements put back; its leading and trailing whitespace kept."""
    target: list[str] = []
    links: list[tuple[int, int]] = []
    offset = 0
    for (text, alignment), count in zip(translations, segment.counts, strict=True):
        words = text.split()
        pairs = parse_links(alignment) if alignment is not None else relative_links(count, len(words))
        links.extend((i + offset, j + len(target)) for i, j in pairs if i < count and j < len(words))
        target.extend(words)
        offset += count
    elements = segment.elements()
    events = layout(elements, project(elements, len(segment.words), len(target), links), len(target))
    pieces: list[tuple[bool, str]] = []  # (text to escape, or markup as it is)
    gap: list[tuple[str, int | str]] = []  # the events since the last word
    for kind, k in [*events, ("word", -1)]:
        if kind != "word":
            gap.append((kind, k))
            continue
        word = target[k] if k >= 0 else ""
        closes = next((n for n, (kind, _) in enumerate(gap) if kind != "close"), len(gap))
        if closes and pieces and pieces[-1][0] and all(segment.punctuation_outside(e)[1] for _, e in gap[:closes]):
            stem, mark = _split_punctuation(pieces.pop()[1], end=True)  # `<a>here</a>.`
            pieces.append((True, stem))
            gap.insert(closes, ("text", mark))
        split = 1 + max((n for n, (kind, _) in enumerate(gap) if kind in ("close", "text")), default=-1)
        if pieces and word:  # between two words: closing tags, the space, opening tags; what was glued stays so
            while split < len(gap) and gap[split][0] == "atomic" and segment.glued(gap[split][1]):
                split += 1
            gap.insert(split, ("text", " "))
        elif pieces and split < len(gap) and gap[split][0] == "atomic" and not segment.glued(gap[split][1]):
            gap.insert(split, ("text", " "))  # after the last word
        last = next((n for n in range(len(gap) - 1, -1, -1) if gap[n][0] != "open"), -1)
        if word and last >= 0 and gap[last][0] == "atomic" and segment.spaced_after(gap[last][1]):
            gap.insert(last + 1, ("text", " "))  # an element between spaces keeps them
        opening = len(gap) - next((n for n, (kind, _) in enumerate(reversed(gap)) if kind != "open"), len(gap))
        if word and opening < len(gap) and all(segment.punctuation_outside(e)[0] for _, e in gap[opening:]):
            mark, word = _split_punctuation(word, end=False)  # `(<b>dog`
            gap.insert(opening, ("text", mark))
        for kind, element in gap:
            if kind == "text":
                pieces.append((True, element))
            else:
                markup = {"close": segment.closing, "open": segment.opening}.get(kind)
                pieces.append((False, markup[element] if markup else segment.markup(elements, element)))
        gap = []
        if word:
            pieces.append((True, word))
    lead = segment.text[: min([segment.words[0][0], *(start for start, *_ in segment.spans)])]
    trail = segment.text[max([segment.words[-1][1], *(end for _, end, *_ in segment.spans)]) :]
    body = "".join(html.escape(piece, quote=False) if text else piece for text, piece in pieces)
    return html.escape(lead, quote=False) + body + html.escape(trail, quote=False)


def _split_punctuation(word: str, end: bool) -> tuple[str, str]:
    """`word` as (stem, trailing punctuation) when `end`, else as (leading punctuation, stem); the punctuation is
    empty where the word is all punctuation or has none."""
    match = re.search(r"[^\w]+$" if end else r"^[^\w]+", word)
    if match is None or len(match.group()) == len(word):
        return (word, "") if end else ("", word)
    return (word[: match.start()], match.group()) if end else (match.group(), word[match.end() :])


__all__ = ["ALIGNMENT", "HtmlDocument", "Segment", "translate_html"]
