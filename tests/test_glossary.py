"""decoding/glossary.py: glossary files and pairs, which terms apply to a sentence (checked against a brute-force
search over every term), phrase files for --avoid, and the term-use metric."""

from __future__ import annotations

import random
import re
import time
import unicodedata

import pytest

from hf_bahdanau.decoding.glossary import Glossary, Term, fold, read_phrases, term_used
from hf_bahdanau.errors import InputError

DECOMPOSED_MUELLER = "Mu\u0308ller"  # "Müller" as u + combining diaeresis (NFD)


def write(tmp_path, text: str, name: str = "glossary.tsv"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def pairs_of(terms: list[Term]) -> list[tuple[str, str]]:
    return [(term.source, term.target) for term in terms]


# --- glossary files ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "header", ["source\ttarget", "Source\tTarget", "src\ttgt", "SOURCE TERM\tTarget Term", "de\ten", "deu\teng"]
)
def test_a_first_line_naming_the_columns_or_two_language_codes_is_a_header(tmp_path, header):
    path = write(tmp_path, f"# a comment\n\n{header}\nHund\tdog\n")
    assert pairs_of(Glossary.from_file(path).terms) == [("Hund", "dog")]


@pytest.mark.parametrize("first", ["Ei\tegg", "es\tes", "Hund\tdog"])
def test_a_first_line_that_is_no_header_is_a_term(tmp_path, first):
    path = write(tmp_path, f"{first}\nKatze\tcat\n")
    assert pairs_of(Glossary.from_file(path).terms) == [tuple(first.split("\t")), ("Katze", "cat")]


def test_a_header_after_the_first_line_is_a_term(tmp_path):
    path = write(tmp_path, "Hund\tdog\nde\ten\n")
    assert pairs_of(Glossary.from_file(path).terms) == [("Hund", "dog"), ("de", "en")]


def test_terms_are_nfc_with_inner_whitespace_collapsed_and_comments_and_blank_lines_skipped(tmp_path):
    text = f"de\ten\n# Namen\n   \n{DECOMPOSED_MUELLER}\tmiller\n  roter   Ball \t red  ball\r\n  # eingerückt\n"
    glossary = Glossary.from_file(write(tmp_path, text))
    assert pairs_of(glossary.terms) == [("Müller", "miller"), ("roter Ball", "red ball")]
    assert unicodedata.is_normalized("NFC", glossary.terms[0].source)


def test_a_source_given_twice_with_one_target_is_one_term(tmp_path):
    glossary = Glossary.from_file(write(tmp_path, "Hund\tdog\nKatze\tcat\nHund\tdog\n"))
    assert pairs_of(glossary.terms) == [("Hund", "dog"), ("Katze", "cat")]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Hund\tdog\nKatze\n", r"glossary\.tsv: line 2 has 1 tab-separated fields, not 2"),
        ("Hund\tdog\tcanine\n", r"glossary\.tsv: line 1 has 3 tab-separated fields, not 2"),
        ("# c\nHund\t  \n", r"glossary\.tsv: line 2: a term's target is empty"),
        ("\tdog\n", r"glossary\.tsv: line 1: a term's source is empty"),
        (
            "Hund\tdog\nKatze\tcat\nhund\thound\n",
            r"glossary\.tsv: line 3 gives source term 'hund' the target 'hound', but line 1 gave 'Hund' the target "
            r"'dog'",
        ),
        ("# nur ein Kommentar\nde\ten\n\n", r"glossary\.tsv: no terms"),
        ("", r"glossary\.tsv: no terms"),
    ],
)
def test_a_bad_glossary_file_is_an_input_error_naming_file_line_and_problem(tmp_path, text, expected):
    with pytest.raises(InputError, match=expected):
        Glossary.from_file(write(tmp_path, text))


def test_a_missing_file_a_folder_and_invalid_utf8_are_input_errors_naming_the_file(tmp_path):
    with pytest.raises(InputError, match=r"missing\.tsv: cannot read"):
        Glossary.from_file(tmp_path / "missing.tsv")
    with pytest.raises(InputError, match=rf"{re.escape(str(tmp_path))}: cannot read"):
        Glossary.from_file(tmp_path)
    path = tmp_path / "latin1.tsv"
    path.write_bytes("Hund\tdog\nMädchen\tgirl\n".encode("latin-1"))
    with pytest.raises(InputError, match=r"latin1\.tsv: line 2 is not valid UTF-8"):
        Glossary.from_file(path)


# --- glossary pairs ---------------------------------------------------------------------------------------------


def test_pairs_come_from_a_mapping_or_an_iterable_and_are_normalised_like_a_file():
    from_mapping = Glossary.from_pairs({DECOMPOSED_MUELLER: "miller", " roter  Ball": "red ball "})
    from_pairs = Glossary.from_pairs([("Müller", "miller"), ["roter Ball", "red ball"]])
    assert from_mapping == from_pairs
    assert pairs_of(from_pairs.terms) == [("Müller", "miller"), ("roter Ball", "red ball")]
    assert Glossary.from_pairs({}).terms_for("ein roter Ball") == []


@pytest.mark.parametrize(
    ("pairs", "expected"),
    [
        ({"Hund": ""}, r"glossary pair 1: a term's target is empty"),
        ([("Hund", "dog"), (" ", "cat")], r"glossary pair 2: a term's source is empty"),
        ({"Hund": 3}, r"glossary pair 1: a term's target must be a string, not int"),
        ([(None, "dog")], r"glossary pair 1: a term's source must be a string, not NoneType"),
        ([("Hund", "dog", "canine")], r"glossary pair 1 is \('Hund', 'dog', 'canine'\), not a \(source, target\)"),
        (["ab"], r"glossary pair 1 is 'ab', not a \(source, target\) pair"),
        ("Hund", r"not a string"),
        ({"Hund": "dog", " hund ": "hound"}, r"pair 2 gives source term 'hund' the target 'hound', but pair 1"),
    ],
)
def test_bad_pairs_are_input_errors(pairs, expected):
    with pytest.raises(InputError, match=expected):
        Glossary.from_pairs(pairs)


# --- which terms apply to a text --------------------------------------------------------------------------------


def test_a_source_applies_as_a_whole_word_in_any_case():
    glossary = Glossary.from_pairs({"Hund": "dog", "Bär": "bear", "Straße": "street", "Müller": "miller"})
    assert pairs_of(glossary.terms_for("Der HUND bellt.")) == [("Hund", "dog")]
    assert glossary.terms_for("Das Hundefutter, der Haushund, die Bären") == []
    assert pairs_of(glossary.terms_for("(bär)")) == [("Bär", "bear")]
    assert pairs_of(glossary.terms_for("HAUPTSTRASSE 5, STRASSE 7")) == [("Straße", "street")]  # casefold: ß = ss
    assert pairs_of(glossary.terms_for(f"Herr {DECOMPOSED_MUELLER.upper()}")) == [("Müller", "miller")]  # NFC


def test_a_multi_word_source_matches_across_any_whitespace_run_and_keeps_its_punctuation():
    glossary = Glossary.from_pairs({"roter Ball": "red ball", "E-Mail": "email", "C++": "C++", "&": "and"})
    assert pairs_of(glossary.terms_for("ein ROTER\n\t  Ball")) == [("roter Ball", "red ball")]
    assert glossary.terms_for("ein roter-Ball, eine E Mail, C+") == []
    assert pairs_of(glossary.terms_for("C++ & E-Mail")) == [("C++", "C++"), ("&", "and"), ("E-Mail", "email")]


def test_the_longest_overlapping_match_wins_then_the_earliest_and_each_term_comes_once_in_text_order():
    glossary = Glossary.from_pairs(
        {"Ball": "ball", "roter Ball": "red ball", "a b": "AB", "b c": "BC", "Hund": "dog", "Katze": "cat"}
    )
    assert pairs_of(glossary.terms_for("Katze, roter Ball, Hund, Katze")) == [
        ("Katze", "cat"),
        ("roter Ball", "red ball"),
        ("Hund", "dog"),
    ]
    assert pairs_of(glossary.terms_for("a b c")) == [("a b", "AB")]  # equal length: the earliest wins
    # a term that loses one overlap still applies where it wins; the order is that of first winning matches
    assert pairs_of(glossary.terms_for("roter Ball und Hund und Ball")) == [
        ("roter Ball", "red ball"),
        ("Hund", "dog"),
        ("Ball", "ball"),
    ]
    assert pairs_of(glossary.terms_for("roter Ball", overlapping=True)) == [
        ("roter Ball", "red ball"),
        ("Ball", "ball"),
    ]


def _brute_force_terms(glossary: Glossary, text: str, overlapping: bool) -> list[Term]:
    """The rule of the module docstring, by trying every term's regular expression on the whole text."""
    folded = fold(text)
    matches = []
    for term in glossary.terms:
        words = r"\s+".join(re.escape(word) for word in fold(term.source).split())
        matches += [(m.start(), m.end(), term) for m in re.finditer(rf"(?<!\w){words}(?!\w)", folded)]
    matches.sort(key=lambda match: (match[0] - match[1], match[0]))
    kept: list[tuple[int, int, Term]] = []
    for start, end, term in matches:
        if overlapping or all(end <= other[0] or other[1] <= start for other in kept):
            kept.append((start, end, term))
    order: dict[Term, int] = {}
    for start, _, term in sorted(kept, key=lambda match: match[0]):
        order.setdefault(term, start)
    return list(order)


@pytest.mark.parametrize("overlapping", [False, True])
def test_terms_for_agrees_with_a_brute_force_search_over_every_term(overlapping):
    rng = random.Random(0)
    vocabulary = ["Haus", "haus", "boot", "Boot", "See", "seE", "blau", "Bär", "Straße", "STRASSE", "x-y", "a", "é"]
    phrases = [" ".join(rng.choices(vocabulary, k=rng.randint(1, 3))) for _ in range(150)]
    sources = {fold(phrase): phrase for phrase in phrases}.values()  # one spelling of each source
    glossary = Glossary.from_pairs({source: f"t{number}" for number, source in enumerate(sources)})
    for _ in range(300):
        words = rng.choices([*vocabulary, "Hausboot", ",", "  ", "\n"], k=rng.randint(0, 12))
        text = " ".join(words).replace(" ,", ",")
        assert glossary.terms_for(text, overlapping=overlapping) == _brute_force_terms(glossary, text, overlapping)


@pytest.mark.slow  # builds a 100k-term glossary
def test_a_glossary_of_100k_terms_gives_the_terms_of_thousands_of_sentences_in_seconds():
    rng = random.Random(0)
    words = [f"wort{number}" for number in range(50_000)]
    glossary = Glossary.from_pairs(
        {" ".join(rng.sample(words, rng.randint(1, 3))): f"term{number}" for number in range(100_000)}
    )
    sentences = [" ".join(rng.sample(words, 15)) for _ in range(3000)]
    started = time.perf_counter()
    found = [glossary.terms_for(sentence) for sentence in sentences]
    elapsed = time.perf_counter() - started
    assert elapsed < 30, f"{elapsed:.1f} s for 3000 sentences"  # a regular expression per term takes hours
    assert sum(map(len, found)) > 0
    for sentence, terms in zip(sentences[:20], found[:20], strict=True):
        assert all(re.search(rf"(?<!\w){re.escape(term.source)}(?!\w)", sentence) for term in terms)


# --- phrase files and term use ----------------------------------------------------------------------------------


def test_a_phrase_file_gives_each_normalised_phrase_once_in_file_order(tmp_path):
    path = write(tmp_path, f"# zu vermeiden\nguy\n\n  a   fellow \n{DECOMPOSED_MUELLER}\nguy\n", "avoid.txt")
    assert read_phrases(path) == ["guy", "a fellow", "Müller"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("guy\nman\tdude\n", r"avoid\.txt: line 2 has a tab"),
        ("# only a comment\n\n", r"avoid\.txt: no phrases"),
    ],
)
def test_a_bad_phrase_file_is_an_input_error_naming_file_and_line(tmp_path, text, expected):
    with pytest.raises(InputError, match=expected):
        read_phrases(write(tmp_path, text, "avoid.txt"))
    with pytest.raises(InputError, match=r"nothing\.txt: cannot read"):
        read_phrases(tmp_path / "nothing.txt")


def test_a_term_is_used_when_its_target_occurs_exactly_as_whole_words():
    assert term_used("red ball", "A boy throws a red  ball.")
    assert term_used("red ball", "A boy throws a red\nball")
    assert not term_used("red ball", "A boy throws a Red ball.")  # case-sensitive
    assert not term_used("ball", "A boy plays basketball.")
    assert not term_used("bear", "Two bears.")
    assert term_used("Müller", f"Herr {DECOMPOSED_MUELLER} kommt.")
    assert not term_used("Müll", "Herr Müller kommt.")  # ü is a word character
    with pytest.raises(InputError, match="empty target term"):
        term_used("  ", "text")
