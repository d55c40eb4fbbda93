"""Documents and JSON lines for `translate --document` and `--input-format jsonl`.

- A plain-text document is cut into paragraphs at blank lines; a paragraph's lines are joined by a space (wrapped
  text) and split into sentences by `sentencex` (a maintained rule-based splitter of about 300 languages; a language
  it has no rules of falls back to a related language's, at last to English's). The translation of a paragraph is
  its sentences' translations joined by a space, on one line; blank lines stay where they were, as empty lines.
- JSON lines: each line an object with a string `text` field; the output line is that object with `translation`
  (and `score`) added. Blank lines stay blank lines.

Lines end at a line feed (or CR LF, CR) only: a form feed or U+2028 is text within a line, as JSON allows in a string.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Sequence
from typing import TypeVar

from hf_bahdanau.errors import InputError
from hf_bahdanau.json_files import parse_json

T = TypeVar("T")
LINE_END = re.compile(r"\r\n|\r|\n")
LANGUAGE_CODE = re.compile(r"^[a-z]{2,3}(-[a-z0-9]{2,8})*$", re.IGNORECASE)  # ISO 639 codes, BCP 47 subtags


def check_language(language: str | None) -> str:
    """The sentence splitter's language code, checked: an InputError names what is wrong (none, or not a code)."""
    if not language:
        raise InputError(
            "the sentence splitter needs the document's language and the model records no source language: pass "
            "--document-language CODE (e.g. de, en, fr)"
        )
    if not LANGUAGE_CODE.match(language):
        raise InputError(
            f"unknown language {language!r} for the sentence splitter (sentencex): give a language code such as "
            "de, en or fr"
        )
    return language


def text_lines(text: str) -> list[str]:
    """The lines of `text`, cut at line ends only (not at the form feeds, U+2028 and the like `str.splitlines` cuts
    at); a last line end starts no line."""
    lines = LINE_END.split(text)
    return lines[:-1] if lines[-1] == "" else lines


def split_sentences(text: str, language: str) -> list[str]:
    """The sentences of `text` (one paragraph), stripped, empty ones left out."""
    from sentencex import segment

    return [sentence.strip() for sentence in segment(language, text) if sentence.strip()]


def split_document(text: str, language: str) -> list[list[str]]:
    """The lines the translated document will have, each as the sentences to translate: a paragraph (lines up to a
    blank line, joined by a space) as its sentences, a blank line as none."""
    lines: list[list[str]] = []
    paragraph: list[str] = []
    for line in [*text_lines(text), ""]:  # a last blank line ends the last paragraph
        if line.strip():
            paragraph.append(line.strip())
            continue
        if paragraph:
            lines.append(split_sentences(" ".join(paragraph), language))
            paragraph = []
        lines.append([])
    return lines[:-1]  # less the blank line added above


def join_document(lines: Sequence[Sequence[str]], translations: Sequence[str]) -> str:
    """The translated document: `translations` (of the sentences of `lines`, in order) joined by a space within a
    line, the lines by newlines."""
    return "\n".join(" ".join(group) for group in grouped(map(len, lines), translations))


def grouped(counts: Iterable[int], items: Iterable[T]) -> Iterator[list[T]]:
    """`items` cut into consecutive groups of `counts` items (lazily: each group as soon as its items came)."""
    ahead = iter(items)
    for count in counts:
        yield [next(ahead) for _ in range(count)]


def _not_json(constant: str) -> None:
    raise InputError(f"{constant} is not a JSON number")


def jsonl_line(record: dict) -> str:
    """`record` as one line of JSON: text as is but for U+2028/U+2029, escaped (they end a line in JavaScript and
    in `str.splitlines` readers); a value JSON has no number for (NaN, infinities) is a ValueError."""
    line = json.dumps(record, ensure_ascii=False, allow_nan=False)
    return line.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029") + "\n"


def read_jsonl(lines: Iterable[str], source: str = "stdin") -> list[dict | None]:
    """The objects of JSON lines (None for a blank line); a ValueError names the line (from 1) of invalid JSON, a
    line that is not an object, or one without a string `text` field."""
    records: list[dict | None] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            records.append(None)
            continue
        record = parse_json(line, f"{source} line {number}", parse_constant=_not_json)
        if not isinstance(record, dict):
            raise InputError(f"{source} line {number}: expected a JSON object with a 'text' field")
        if "text" not in record:
            fields = ", ".join(map(repr, record)) or "none"
            raise InputError(f"{source} line {number}: no 'text' field (it has {fields})")
        if not isinstance(record["text"], str):
            kind = type(record["text"]).__name__
            raise InputError(f"{source} line {number}: the 'text' field is {kind}, not a string")
        records.append(record)
    return records


__all__ = [
    "check_language",
    "grouped",
    "join_document",
    "jsonl_line",
    "read_jsonl",
    "split_document",
    "split_sentences",
    "text_lines",
]
