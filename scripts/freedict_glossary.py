"""A WMT-terminology-style glossary for Multi30k test_2016_flickr De->En, from FreeDict's German-English dictionary.

The dictionary is Debian's `dict-freedict-deu-eng` (dictd format: a `.index` of `headword<TAB>offset<TAB>length`,
numbers in dictd's base 64, and a `.dict.dz`, which is gzip). An entry reads

    Hund /hˈʊnt/ <masc, n, sg>                  headword, pronunciation, grammar
     [zool.] dog <n>, dawg <n>                  translations: domain labels, alternatives split at `,` and `;`
             Note: used to represent ...        notes, examples (`"..."  - ...`), synonyms and `see:` references,
          "einen Hund abrichten"  - train a dog  which are not translations
       Synonyms: {...}

Translation lines may start with a sense number (`1. `); grammar tags (`<n>`), what is glued to them (abbreviations
with their pronunciation, `<n>Rd,  /.../`), `[...]` labels and pronunciations are removed from them.

A pair (German, English) of the dictionary is a candidate unless it is trivial: each side is words of letters (no
digits, `sth.`, slashes or brackets) joined by single spaces, hyphens or apostrophes, with at least 3 letters; no
side is, starts or ends with a word of the small stop lists below; the German entry is not tagged as an article,
pronoun, preposition, conjunction, particle, numeral or interjection.

For each test sentence, a candidate applies when its German side occurs in the source (`Glossary.terms_for`'s
rule, overlaps kept) and its English side occurs in the reference (the same whole-word rule, case-insensitive). Each
German side keeps the English side that applies in most sentences (ties: dictionary order), spelt as the references
spell it most often, so that `term_used` counts it; a German side whose English side is in the references of fewer
than half (`--min-share`) of the sentences whose source has it (`springt` -> `leaps`, where most say `jumps`) is
left out. The glossary's terms that apply to a source (`terms_for`, the longest match winning) are listed per
sentence, each with whether the reference uses it (`term_used`).

    HF_BAHDANAU_DATA_DIR=../shared/data python scripts/freedict_glossary.py --install

writes `outputs/freedict-glossary/glossary.tsv` (a `de<TAB>en` header, for `Glossary.from_file`) and
`outputs/freedict-glossary/test_2016_flickr.terms.jsonl` (one line a sentence: index, source, reference, terms) and
prints a summary. An existing output file is never replaced without `--overwrite`.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import NamedTuple

from hf_bahdanau.decoding.glossary import Glossary, Term, fold, normalize_term, phrase_pattern, term_used

PACKAGE = "dict-freedict-deu-eng"
INSTALLED = Path("/usr/share/dictd/freedict-deu-eng")  # + .index, .dict.dz
_BASE64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
_FUNCTION_TAGS = {"art", "pron", "prep", "conj", "ptcl", "num", "int", "inter", "rel", "pers"}
GERMAN_STOP_WORDS = set(
    "der die das den dem des ein eine einen einem einer eines und oder aber mit von vor auf aus bei für über unter "
    "zu zum zur im ins in am an ist sind war hat haben wird werden sich ihr ihre ihren sein seine seinen er sie es "
    "man nicht auch als wie dass noch nach durch gegen ohne um bis hinter neben zwischen dieser diese dieses jeder "
    "jede alle etwas einige viele andere sehr hier dort da so dabei".split()
)
ENGLISH_STOP_WORDS = set(
    "the and with for that this these those are was were has have had his her its their they them from into onto "
    "who which while one two some other others out off not but all there here you our very any each his him she "
    "what where when how been being does did can could will would about over under".split()
)
_LITERAL = re.compile(r"[^\W\d_]+(?:[ '’-][^\W\d_]+)*")  # words of letters joined by a space, hyphen or apostrophe
_ANNOTATION = re.compile(r"(Note:|Synonyms?:|see:)")
_SENSE_NUMBER = re.compile(r"\d+[.)]\s+")
_GLUED_TO_TAG = re.compile(r"(<[^<>]*>)[^\s,;<]+")  # `<n>Rd`: an abbreviation (or symbol) written after a tag
_LABELS = re.compile(r"<[^<>]*>|\[[^\[\]]*\]|\{[^{}]*\}")
_PRONUNCIATION = re.compile(r"/[^/\s][^/]*/")


class Entry(NamedTuple):
    """One dictionary entry: its German headword, grammar tags and English translations."""

    headword: str
    grammar: tuple[str, ...]
    translations: tuple[str, ...]


def dictd_number(text: str) -> int:
    """A number written in dictd's base 64 (`A`=0 ... `/`=63, most significant digit first)."""
    value = 0
    for character in text:
        value = value * 64 + _BASE64.index(character)
    return value


def split_top_level(text: str, separators: str = ",;") -> list[str]:
    """`text` split at `separators` that are outside (), [], <> and {}."""
    parts, depth, start = [], 0, 0
    for position, character in enumerate(text):
        depth += (character in "([<{") - (character in ")]>}")
        if character in separators and depth <= 0:
            parts.append(text[start:position])
            start = position + 1
    return [*parts, text[start:]]


def parse_entry(text: str) -> Entry:
    """An entry's headword line and translation lines (the lines before the first note, example, synonym or
    reference)."""
    lines = text.split("\n")
    head = lines[0]
    pronunciation = re.search(r"\s/(?=\S)", head)
    grammar = re.search(r"<([^<>]*)>\s*$", head)
    headword = head[: pronunciation.start()] if pronunciation else head[: grammar.start() if grammar else None]
    translations: list[str] = []
    for line in lines[1:]:
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        if not stripped or _ANNOTATION.match(stripped) or (indent >= 2 and stripped.startswith('"')):
            break
        line = _GLUED_TO_TAG.sub(r"\1", _SENSE_NUMBER.sub("", stripped, count=1))
        for alternative in split_top_level(line):
            alternative = normalize_term(_PRONUNCIATION.sub(" ", _LABELS.sub(" ", alternative)))
            if alternative and alternative not in translations:
                translations.append(alternative)
    tags = tuple(tag.strip() for tag in grammar.group(1).split(",")) if grammar else ()
    return Entry(normalize_term(headword), tags, tuple(translations))


def read_dictionary(index_path: Path, dict_path: Path) -> list[Entry]:
    """The entries of a dictd dictionary, each once (index lines may share one), in the order of the .dict file."""
    spans = set()
    with open(index_path, encoding="utf-8") as index:
        for number, line in enumerate(index, start=1):
            fields = line.rstrip("\n").split("\t")
            if len(fields) != 3:
                raise ValueError(f"{index_path}: line {number} is not headword<TAB>offset<TAB>length")
            if not fields[0].startswith(("00database", "00-database")):  # dictd's own records: name, info, url
                spans.add((dictd_number(fields[1]), dictd_number(fields[2])))
    opener = gzip.open if dict_path.suffix in (".dz", ".gz") else open
    with opener(dict_path, "rb") as dictionary:
        data = dictionary.read()
    return [parse_entry(data[offset : offset + length].decode("utf-8")) for offset, length in sorted(spans)]


def dictionary_files(path: Path | None, install: bool) -> tuple[Path, Path]:
    """(.index, .dict[.dz|.gz]) of `path` (either file, or their common stem), else of the installed package,
    installed with apt-get first when `install` is set."""
    stem = INSTALLED if path is None else Path(re.sub(r"\.(index|dict(\.dz|\.gz)?)$", "", str(path)))
    if path is None and install and not stem.with_name(stem.name + ".index").exists():
        if subprocess.run(["apt-get", "install", "-y", PACKAGE]).returncode != 0:
            raise FileNotFoundError(f"apt-get install -y {PACKAGE} failed (its output is above)")
    index = stem.with_name(stem.name + ".index")
    dicts = [stem.with_name(stem.name + suffix) for suffix in (".dict.dz", ".dict.gz", ".dict")]
    found = [candidate for candidate in dicts if candidate.exists()]
    if not index.exists() or not found:
        hint = " (pass --install, or --dictionary PATH)" if path is None else ""
        raise FileNotFoundError(f"no dictd dictionary {stem}.index + {stem}.dict[.dz]{hint}")
    return index, found[0]


def nontrivial(text: str, stop_words: set[str]) -> bool:
    """Whether `text` can be a term: words of letters, at least 3 letters, no stop word alone, first or last."""
    words = fold(text).replace("-", " ").split()
    return (
        _LITERAL.fullmatch(text) is not None
        and sum(character.isalpha() for character in text) >= 3
        and words[0] not in stop_words
        and words[-1] not in stop_words
    )


def candidates(entries: list[Entry]) -> dict[str, list[tuple[str, str]]]:
    """{folded German side: [(headword, English side), ...] in dictionary order} of the non-trivial pairs."""
    pairs: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for entry in entries:
        if _FUNCTION_TAGS & set(entry.grammar) or not nontrivial(entry.headword, GERMAN_STOP_WORDS):
            continue
        key = fold(entry.headword)
        for english in entry.translations:
            if nontrivial(english, ENGLISH_STOP_WORDS) and fold(english) not in {fold(e) for _, e in pairs[key]}:
                pairs[key].append((entry.headword, english))
    return {key: found for key, found in pairs.items() if found}


def choose_terms(
    pairs: dict[str, list[tuple[str, str]]], sentences: list[tuple[str, str]], min_share: float = 0.5
) -> tuple[Glossary, int]:
    """The glossary: each German side that applies in some sentence with the English side that applies in most
    sentences, spelt as the references spell it most often, unless that English side is in the references of
    fewer than `min_share` of the sentences whose source has the German side (module docstring); and the number of
    German sides left out for that."""
    german = Glossary.from_pairs((spellings[0][0], key) for key, spellings in pairs.items())
    occurrences: Counter = Counter()  # German key -> sentences whose source has it
    sentence_counts: dict[str, Counter] = defaultdict(Counter)  # German key -> English key -> sentences
    spellings: dict[tuple[str, str], Counter] = defaultdict(Counter)  # (German, English key) -> reference spellings
    for source, reference in sentences:
        for term in german.terms_for(source, overlapping=True):
            occurrences[term.target] += 1
            for headword, english in pairs[term.target]:
                match = phrase_pattern(english, ignore_case=True).search(reference)
                if match:
                    sentence_counts[term.target][fold(english)] += 1
                    spellings[term.target, fold(english)][(headword, normalize_term(match.group()))] += 1
    terms = []
    for key, counts in sorted(sentence_counts.items()):
        order = [fold(english) for _, english in pairs[key]]
        best = max(counts, key=lambda english: (counts[english], -order.index(english)))
        if counts[best] >= min_share * occurrences[key]:
            headword, target = spellings[key, best].most_common(1)[0][0]
            terms.append(Term(headword, target))
    return Glossary(tuple(terms)), len(sentence_counts) - len(terms)


def annotations(glossary: Glossary, sentences: list[tuple[str, str]]) -> list[dict]:
    """Per sentence: its index, source, reference and the glossary's terms that apply, each marked with whether
    the reference uses it."""
    rows = []
    for index, (source, reference) in enumerate(sentences):
        terms = [
            {"source": term.source, "target": term.target, "in_reference": term_used(term.target, reference)}
            for term in glossary.terms_for(source)
        ]
        rows.append({"index": index, "source": source, "reference": reference, "terms": terms})
    return rows


def test_sentences(data_dir: Path | None, test_split: str) -> list[tuple[str, str]]:
    """(German source, English reference) of Multi30k's test split, read as `hf-bahdanau evaluate` reads it."""
    from hf_bahdanau.data.corpora import load_parallel_corpus

    source = data_dir / "multi30k" if data_dir is not None else "multi30k"
    if data_dir is not None and not source.is_dir():
        raise FileNotFoundError(f"no folder {source} (--data-dir holds multi30k/)")
    test = load_parallel_corpus(source, "de", "en", test_split=test_split, splits=("test",))["test"]
    return [(row["de"], row["en"]) for row in test["translation"]]


def write_new(path: Path, text: str) -> None:
    """Write `path` through a `.part` file, so that a complete-looking file is complete."""
    part = path.with_name(path.name + ".part")
    part.write_text(text, encoding="utf-8")
    part.replace(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dictionary", type=Path, help=f"A dictd .index or .dict[.dz] (default: {INSTALLED}.*).")
    parser.add_argument("--install", action="store_true", help=f"apt-get install {PACKAGE} when it is missing.")
    parser.add_argument("--data-dir", type=Path, help="The folder holding multi30k/ (default $HF_BAHDANAU_DATA_DIR).")
    parser.add_argument("--test-split", default="test_2016_flickr")
    parser.add_argument("--output-dir", type=Path, default=Path("outputs/freedict-glossary"))
    parser.add_argument(
        "--min-share",
        type=float,
        default=0.5,
        help="Keep a German side when its target is in the references of at least this share of its sentences.",
    )
    parser.add_argument("--overwrite", action="store_true", help="Replace existing output files.")
    args = parser.parse_args()
    glossary_path = args.output_dir / "glossary.tsv"
    terms_path = args.output_dir / f"{args.test_split}.terms.jsonl"
    for path in (glossary_path, terms_path):
        if path.exists() and not args.overwrite:
            parser.error(f"{path} exists: pass --overwrite to replace it")
    try:  # the inputs: a missing or malformed dictionary or corpus is named in one line
        index, dictionary = dictionary_files(args.dictionary, args.install)
        entries = read_dictionary(index, dictionary)
        sentences = test_sentences(args.data_dir, args.test_split)
    except (OSError, ValueError) as err:
        parser.error(str(err))
    pairs = candidates(entries)
    glossary, left_out = choose_terms(pairs, sentences, args.min_share)
    rows = annotations(glossary, sentences)

    args.output_dir.mkdir(parents=True, exist_ok=True)
    header = f"# {dictionary.name} and Multi30k {args.test_split} ({Path(__file__).name})\nde\ten\n"
    write_new(glossary_path, header + "".join(f"{term.source}\t{term.target}\n" for term in glossary.terms))
    write_new(terms_path, "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))
    assert Glossary.from_file(glossary_path) == glossary  # the file reads back as the glossary it was made from

    counts = [len(row["terms"]) for row in rows]
    confirmed = [sum(term["in_reference"] for term in row["terms"]) for row in rows]
    with_terms = sum(count > 0 for count in counts)
    print(
        f"dictionary: {len(entries)} entries, {sum(len(e.translations) for e in entries)} translations ({dictionary})"
    )
    print(f"candidates: {sum(map(len, pairs.values()))} non-trivial pairs, {len(pairs)} German sides")
    print(
        f"glossary: {len(glossary.terms)} terms -> {glossary_path} ({left_out} German sides left out: their target "
        f"is in the references of fewer than {args.min_share:.0%} of their sentences)"
    )
    print(f"sentences: {len(rows)}, with at least one term {with_terms} ({with_terms / len(rows):.1%})")
    print(
        f"terms per sentence: {sum(counts) / len(rows):.2f} (max {max(counts)}), "
        f"{sum(counts) / max(with_terms, 1):.2f} in sentences with a term; {sum(confirmed)} of {sum(counts)} "
        f"({sum(confirmed) / max(sum(counts), 1):.1%}) used by the reference -> {terms_path}"
    )


if __name__ == "__main__":
    sys.exit(main())
