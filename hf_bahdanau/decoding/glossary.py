"""A glossary (source term -> target term) and which of its terms apply to a sentence; phrase lists; term use.

Terms are NFC-normalised, their inner whitespace collapsed to one space and their ends stripped. A glossary file
(`Glossary.from_file`) is UTF-8 TSV, `source<TAB>target` a line:

- lines whose first non-space character is `#`, and blank lines, are skipped;
- the first other line is a header, and skipped, when its two fields are (case-insensitively) `source`/`target`,
  `src`/`tgt` or `source term`/`target term`, or two different lower-case language codes of 2-3 letters
  (`de<TAB>en`); a first term that looks like a pair of codes (`es<TAB>it`) therefore needs a header line above it;
- a source term given twice (compared as `terms_for` compares them) with one target is one term; with two targets
  it is an error naming both lines.

Which terms apply to a text (`Glossary.terms_for`): a term applies when its source occurs in the text as a whole,
case-insensitive match: the source's words, any run of whitespace between them, with no word character (`\\w`, in
Unicode's sense) right before or after. Case is compared by Unicode case folding (`str.casefold`), so `Straße`
matches `STRASSE`. Where matches of different terms overlap, the longest match wins, then the earliest; each term
is returned at most once, in the order of its first winning match in the text. Terms are indexed by their sequence
of word tokens, so a text costs a few dictionary lookups per word, whatever the glossary's size.

`term_used` is the term-use metric: an exact, case-sensitive whole-word match of a target term in an output.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hf_bahdanau.data.text_lines import decode_lines
from hf_bahdanau.errors import InputError

_WORD = re.compile(r"\w+")
_HEADERS = {("source", "target"), ("src", "tgt"), ("source term", "target term")}
_LANGUAGE_CODE = re.compile(r"[a-z]{2,3}")


def normalize_term(text: str) -> str:
    """`text` NFC-normalised, its whitespace runs collapsed to one space and its ends stripped."""
    return " ".join(unicodedata.normalize("NFC", text).split())


def fold(text: str) -> str:
    """The form in which `terms_for` compares a source term and a text: NFC, case-folded, NFC again."""
    return unicodedata.normalize("NFC", unicodedata.normalize("NFC", text).casefold())


@functools.lru_cache(maxsize=65536)
def phrase_pattern(phrase: str, ignore_case: bool = False) -> re.Pattern[str]:
    """`phrase` as a whole-word regular expression: its words escaped, any whitespace run between them, and no word
    character right before or after (`(?<!\\w)`, `(?!\\w)`)."""
    words = r"\s+".join(re.escape(word) for word in phrase.split())
    return re.compile(rf"(?<!\w){words}(?!\w)", re.IGNORECASE if ignore_case else 0)


@dataclass(frozen=True)
class Term:
    """A source term and the target term it translates to, normalised (see the module docstring)."""

    source: str
    target: str

    def __post_init__(self) -> None:
        for side in ("source", "target"):
            value = getattr(self, side)
            if not isinstance(value, str):
                raise InputError(f"a term's {side} must be a string, not {type(value).__name__} ({value!r})")
            normalized = normalize_term(value)
            if not normalized:
                raise InputError(f"a term's {side} is empty (source {self.source!r}, target {self.target!r})")
            object.__setattr__(self, side, normalized)


@dataclass(frozen=True)
class Glossary:
    """Terms whose sources are distinct (as `terms_for` compares them); see the module docstring for the rules."""

    terms: tuple[Term, ...]
    _index: dict[tuple[str, ...], list[int]] = field(init=False, repr=False, compare=False)
    _lengths: tuple[int, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        terms = _unique_terms((term, f"term {number}") for number, term in enumerate(self.terms, start=1))
        object.__setattr__(self, "terms", terms)
        index: dict[tuple[str, ...], list[int]] = {}  # word tokens of a folded source -> its term's position
        for position, term in enumerate(terms):
            index.setdefault(tuple(_WORD.findall(fold(term.source))), []).append(position)
        object.__setattr__(self, "_index", index)
        object.__setattr__(self, "_lengths", tuple(sorted({len(tokens) for tokens in index if tokens})))

    @classmethod
    def from_file(cls, path: str | Path) -> Glossary:
        """The glossary of a UTF-8 TSV file (`source<TAB>target` a line); InputError names the file and line of a
        problem."""
        return cls.from_lines(_read_lines(Path(path)), str(path))

    @classmethod
    def from_lines(cls, lines: Iterable[str], name: str) -> Glossary:
        """The glossary of TSV lines read as a file's (`from_file`); InputError names `name` and the line of a
        problem."""
        numbered: list[tuple[Term, str]] = []
        for number, fields in _tsv_fields(lines):
            if len(fields) != 2:
                raise InputError(
                    f"{name}: line {number} has {len(fields)} tab-separated fields, not 2 (source<TAB>target)"
                )
            if not numbered and _is_header(*fields):
                continue
            try:
                numbered.append((Term(*fields), f"line {number}"))
            except InputError as err:
                raise InputError(f"{name}: line {number}: {err}") from None
        if not numbered:
            raise InputError(f"{name}: no terms (a glossary file has one source<TAB>target term a line)")
        try:
            return cls(_unique_terms(numbered))
        except InputError as err:
            raise InputError(f"{name}: {err}") from None

    @classmethod
    def from_pairs(cls, pairs: Mapping[str, str] | Iterable[tuple[str, str]]) -> Glossary:
        """The glossary of a mapping `{source: target}` or of `(source, target)` pairs."""
        items = pairs.items() if isinstance(pairs, Mapping) else pairs
        if isinstance(items, str):
            raise InputError("a glossary's pairs must be a mapping or (source, target) pairs, not a string")
        numbered = []
        for number, pair in enumerate(items, start=1):
            if isinstance(pair, str) or not isinstance(pair, tuple | list) or len(pair) != 2:
                raise InputError(f"glossary pair {number} is {pair!r}, not a (source, target) pair")
            try:
                numbered.append((Term(*pair), f"pair {number}"))
            except InputError as err:
                raise InputError(f"glossary pair {number}: {err}") from None
        return cls(_unique_terms(numbered))

    def terms_for(self, text: str, *, overlapping: bool = False) -> list[Term]:
        """The terms that apply to `text`, in order of first occurrence (the rule is in the module docstring).

        With `overlapping`, every term whose source occurs, overlaps kept (the longest-match rule is not applied).
        """
        folded = fold(text)
        matches = sorted(self._matches(folded), key=lambda match: (match[0] - match[1], match[0]))  # longest first
        taken: list[tuple[int, int]] = []
        first_start: dict[int, int] = {}  # term position -> start of its first winning match
        for start, end, position in matches:
            if not overlapping and any(start < other_end and other_start < end for other_start, other_end in taken):
                continue
            taken.append((start, end))
            first_start[position] = min(start, first_start.get(position, start))
        return [self.terms[position] for position in sorted(first_start, key=first_start.__getitem__)]

    def _matches(self, folded: str) -> Iterator[tuple[int, int, int]]:
        """(start, end, term position) of every match of a term's source in the folded text."""
        tokens = _WORD.findall(folded)
        candidates = set(self._index.get((), ()))  # sources without a word character are always tried
        for start in range(len(tokens)):
            for length in self._lengths:
                if start + length > len(tokens):
                    break
                candidates.update(self._index.get(tuple(tokens[start : start + length]), ()))
        for position in candidates:
            for match in phrase_pattern(fold(self.terms[position].source)).finditer(folded):
                yield match.start(), match.end(), position


def read_phrases(path: str | Path) -> list[str]:
    """The words or phrases of a UTF-8 file, one a line (for `--avoid`), normalised, each once, in file order.

    Lines whose first non-space character is `#`, and blank lines, are skipped. A tab in a line is an error (a
    glossary TSV given where a phrase list belongs), as is a file without phrases.
    """
    phrases: dict[str, None] = {}
    for number, fields in _tsv_fields(_read_lines(Path(path))):
        if len(fields) > 1:
            raise InputError(f"{path}: line {number} has a tab; a phrase file has one word or phrase a line")
        phrases.setdefault(normalize_term(fields[0]), None)
    if not phrases:
        raise InputError(f"{path}: no phrases (a phrase file has one word or phrase a line)")
    return list(phrases)


def term_used(term_target: str, text: str) -> bool:
    """Whether `text` contains the target term exactly: case-sensitive, whole words, any whitespace run between
    them (both sides NFC-normalised)."""
    term = normalize_term(term_target)
    if not term:
        raise InputError("an empty target term cannot be looked for")
    return phrase_pattern(term).search(unicodedata.normalize("NFC", text)) is not None


def _read_lines(path: Path) -> list[str]:
    """The lines of a UTF-8 file (InputError where it cannot be read or is not UTF-8)."""
    try:
        with open(path, "rb") as file:
            return list(decode_lines(file, path))
    except OSError as err:
        raise InputError(f"{path}: cannot read ({err.strerror or err})") from None
    except ValueError as err:  # decode_lines names the line that is not UTF-8
        raise InputError(str(err)) from None


def _tsv_fields(lines: Iterable[str]) -> Iterator[tuple[int, list[str]]]:
    """(line number, tab-separated fields) of each line that is not blank or a `#` comment."""
    for number, line in enumerate(lines, start=1):
        line = line.rstrip("\r\n")
        if line.strip() and not line.lstrip().startswith("#"):
            yield number, line.split("\t")


def _is_header(source: str, target: str) -> bool:
    """Whether a first line's fields name the columns rather than give a term (see the module docstring)."""
    names = (normalize_term(source).casefold(), normalize_term(target).casefold())
    codes = [normalize_term(source), normalize_term(target)]
    return names in _HEADERS or (all(_LANGUAGE_CODE.fullmatch(code) for code in codes) and codes[0] != codes[1])


def _unique_terms(numbered: Iterable[tuple[Term, Any]]) -> tuple[Term, ...]:
    """The terms, each source once: a repeat with the same target is dropped, one with another target is an
    InputError naming where both come from (the second item of each pair)."""
    first: dict[str, tuple[Term, Any]] = {}  # folded source -> the first term with it, and where it came from
    for term, origin in numbered:
        key = fold(term.source)
        if key not in first:
            first[key] = (term, origin)
        elif first[key][0].target != term.target:
            earlier, earlier_origin = first[key]
            raise InputError(
                f"{origin} gives source term {term.source!r} the target {term.target!r}, but {earlier_origin} "
                f"gave {earlier.source!r} the target {earlier.target!r}"
            )
    return tuple(term for term, _ in first.values())


__all__ = ["Glossary", "Term", "fold", "normalize_term", "phrase_pattern", "read_phrases", "term_used"]
