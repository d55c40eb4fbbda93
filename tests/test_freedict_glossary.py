"""scripts/freedict_glossary.py: the dictd reader on a hand-made dictionary, the trivial-pair rules, the choice of
each German side's target against hand-checked sentences, and the script's files and guards."""

from __future__ import annotations

import gzip
import json
import sys

import pytest
from conftest import load_script

from hf_bahdanau.decoding.glossary import Glossary, Term

freedict = load_script("freedict_glossary")

# entries as the FreeDict German-English dictionary writes them (dictfmt's text), and dictd's own records
ENTRIES = {
    "00databaseshort": "German - English Ding/FreeDict dictionary ver. 1.9-fd1\n",
    "hund": (
        "Hund /hˈʊnt/ <masc, n, sg>\n [zool.] dog <n>, dawg <n>\n         Note: used to represent American speech\n"
        '      "einen Hund abrichten"  - train a dog\n see: {Hunde}, {Haushund}\n\n'
    ),
    "straße": (
        "Straße /ʃtɾˈɑːsə/ (Str. /ˌɛstˌeːˈɛɾ/) <fem, n, sg>\nstreet <n>St,  /ˌɛstˈeː/ , road <n>Rd,  /ˌɛɾdˈeː/\n"
        '      "auf der Straße"  - on the road, in (on) the street\n'
    ),
    "mann": "Mann /mˈan/ <masc, n, sg>\n1. husband <n>; man <n> [Br.]\n2. male <n>\n   Synonym: {Ehemann}\n\n",
    "der": "der /dˈeːɐ/ <art>\nthe <art>\n",
    "spielen": "spielen /ʃpˈiːlən/ <v>\n [art] perform sth. <v>, play <v>\n",
}


def dictd_digits(number: int) -> str:
    """`number` in dictd's base 64, as dictzip writes it (the inverse of the reader's `dictd_number`)."""
    digits = ""
    while True:
        digits = freedict._BASE64[number % 64] + digits
        number //= 64
        if not number:
            return digits


@pytest.fixture
def dictionary(tmp_path):
    """A dictd pair (.index, .dict.gz) of ENTRIES; "hündin" is a second index line of Hund's entry."""
    data, index = b"", []
    for headword, text in ENTRIES.items():
        encoded = text.encode("utf-8")
        index.append(f"{headword}\t{dictd_digits(len(data))}\t{dictd_digits(len(encoded))}\n")
        data += encoded
    index.append(index[1].replace("hund", "hündin"))
    (tmp_path / "tiny.index").write_text("".join(sorted(index)), encoding="utf-8")
    with gzip.open(tmp_path / "tiny.dict.gz", "wb") as file:
        file.write(data)
    return tmp_path / "tiny"


def test_dictd_numbers_are_base_64_with_the_most_significant_digit_first():
    assert freedict.dictd_number("A") == 0
    assert freedict.dictd_number("B0") == 1 * 64 + 52
    assert freedict.dictd_number("GHAt") == 6 * 64**3 + 7 * 64**2 + 0 * 64 + 45
    assert freedict.dictd_number(dictd_digits(16_759_449)) == 16_759_449


def test_a_dictd_dictionary_gives_each_entry_once_with_headword_grammar_and_translations(dictionary):
    index, dict_file = freedict.dictionary_files(dictionary.with_suffix(".index"), install=False)
    assert (index.name, dict_file.name) == ("tiny.index", "tiny.dict.gz")
    assert freedict.read_dictionary(index, dict_file) == [
        freedict.Entry("Hund", ("masc", "n", "sg"), ("dog", "dawg")),
        freedict.Entry("Straße", ("fem", "n", "sg"), ("street", "road")),
        freedict.Entry("Mann", ("masc", "n", "sg"), ("husband", "man", "male")),
        freedict.Entry("der", ("art",), ("the",)),
        freedict.Entry("spielen", ("v",), ("perform sth.", "play")),
    ]


def test_the_dictionary_files_are_found_from_either_file_or_their_stem_and_a_missing_one_is_named(dictionary):
    expected = (dictionary.with_suffix(".index"), dictionary.with_suffix(".dict.gz"))
    for given in (dictionary, dictionary.with_suffix(".dict.gz"), dictionary.with_suffix(".index")):
        assert freedict.dictionary_files(given, install=False) == expected
    with pytest.raises(FileNotFoundError, match=r"no dictd dictionary .*other\.index"):
        freedict.dictionary_files(dictionary.with_name("other"), install=False)


@pytest.mark.parametrize(
    ("text", "stop_words", "expected"),
    [
        ("dog", freedict.ENGLISH_STOP_WORDS, True),
        ("red ball", freedict.ENGLISH_STOP_WORDS, True),
        ("T-shirt", freedict.ENGLISH_STOP_WORDS, True),
        ("egg", freedict.ENGLISH_STOP_WORDS, True),
        ("ox", freedict.ENGLISH_STOP_WORDS, False),  # fewer than 3 letters
        ("the", freedict.ENGLISH_STOP_WORDS, False),  # a stop word
        ("the dog", freedict.ENGLISH_STOP_WORDS, False),  # starts with one
        ("perform sth.", freedict.ENGLISH_STOP_WORDS, False),  # a placeholder, not text
        ("breakdown/degradation", freedict.ENGLISH_STOP_WORDS, False),
        ("behavio(u)r", freedict.ENGLISH_STOP_WORDS, False),
        ("R2D2", freedict.ENGLISH_STOP_WORDS, False),
        ("Straße", freedict.GERMAN_STOP_WORDS, True),
        ("einem", freedict.GERMAN_STOP_WORDS, False),
        ("Mann und", freedict.GERMAN_STOP_WORDS, False),
    ],
)
def test_a_side_is_a_term_when_it_is_words_of_letters_and_no_stop_word(text, stop_words, expected):
    assert freedict.nontrivial(text, stop_words) is expected


def test_each_german_side_keeps_the_target_that_most_references_use_spelt_as_they_spell_it():
    entries = [
        freedict.Entry("Hund", ("n",), ("dog", "hound")),
        freedict.Entry("Mann", ("n",), ("husband", "man")),
        freedict.Entry("mann", (), ("male",)),  # the same German side: its translations join Mann's
        freedict.Entry("der", ("art",), ("the",)),
        freedict.Entry("roter Ball", ("n",), ("red ball",)),
        freedict.Entry("Ball", ("n",), ("ball",)),
        freedict.Entry("Katze", ("n",), ("cat",)),  # never in a source
        freedict.Entry("springt", (), ("leaps",)),
    ]
    pairs = freedict.candidates(entries)
    assert pairs == {
        "hund": [("Hund", "dog"), ("Hund", "hound")],
        "mann": [("Mann", "husband"), ("Mann", "man"), ("mann", "male")],
        "roter ball": [("roter Ball", "red ball")],
        "ball": [("Ball", "ball")],
        "katze": [("Katze", "cat")],
        "springt": [("springt", "leaps")],
    }
    sentences = [
        ("Ein Mann mit einem Hund.", "A man with a dog."),
        ("Der Mann wirft einen roten Ball.", "Man throws a red ball."),  # "roten": not the side "roter Ball"
        ("Ein Hund und ein MANN.", "A hound and a man."),
        ("Ein Hundefutter und ein roter  Ball.", "Dog food and a red ball."),
        ("Ein Reh springt.", "A deer jumps."),
        ("Ein Hirsch springt.", "A stag leaps."),
        ("Ein Pferd springt.", "A horse jumps."),
    ]
    glossary, left_out = freedict.choose_terms(pairs, sentences, min_share=0.5)
    # Hund: dog in 1 sentence, hound in 1 -> dictionary order, 1 of its 2 sentences is half; Mann: man in 3 of 3
    # (spelt "man" twice, "Man" once); springt: leaps in 1 of its 3 sentences -> left out
    assert left_out == 1
    assert glossary.terms == (
        Term("Ball", "ball"),
        Term("Hund", "dog"),
        Term("Mann", "man"),
        Term("roter Ball", "red ball"),
    )
    rows = freedict.annotations(glossary, sentences)
    assert [[(t["source"], t["target"], t["in_reference"]) for t in row["terms"]] for row in rows] == [
        [("Mann", "man", True), ("Hund", "dog", True)],
        [("Mann", "man", False), ("Ball", "ball", True)],  # the reference writes "Man"
        [("Hund", "dog", False), ("Mann", "man", True)],
        [("roter Ball", "red ball", True)],  # the longest match wins over "Ball"
        [],
        [],
        [],
    ]
    assert [row["index"] for row in rows] == list(range(7))
    assert freedict.choose_terms(pairs, sentences, min_share=0.3)[0].terms_for("Ein Reh springt.") == [
        Term("springt", "leaps")
    ]


def run_main(monkeypatch, *argv: str) -> None:
    monkeypatch.setattr(sys, "argv", ["freedict_glossary.py", *argv])
    freedict.main()


def test_the_script_explains_its_options(monkeypatch, capsys):
    with pytest.raises(SystemExit) as exit_info:
        run_main(monkeypatch, "--help")
    assert exit_info.value.code == 0
    printed = capsys.readouterr().out
    assert "FreeDict" in printed and "--dictionary" in printed and "--overwrite" in printed


def test_the_script_refuses_to_replace_an_existing_output_in_one_line(tmp_path, dictionary, capsys, monkeypatch):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "glossary.tsv").write_text("mine\tmine\n")
    with pytest.raises(SystemExit) as exit_info:
        run_main(monkeypatch, "--dictionary", str(dictionary), "--output-dir", str(tmp_path / "out"))
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].endswith("exists: pass --overwrite to replace it")
    assert (tmp_path / "out" / "glossary.tsv").read_text() == "mine\tmine\n"
    assert not (tmp_path / "out" / "test_2016_flickr.terms.jsonl").exists()


def test_the_script_writes_a_glossary_file_and_the_terms_of_each_test_sentence(
    tmp_path, dictionary, capsys, monkeypatch
):
    data = tmp_path / "data" / "multi30k"
    data.mkdir(parents=True)
    (data / "test_2016_flickr.de").write_text("Ein Hund auf der Straße.\nEin Mann will spielen.\nZwei Katzen.\n")
    (data / "test_2016_flickr.en").write_text("A dog on the road.\nA man wants to play.\nTwo cats.\n")
    output = tmp_path / "out"
    argv = ["--dictionary", str(dictionary), "--data-dir", str(tmp_path / "data"), "--output-dir", str(output)]
    run_main(monkeypatch, *argv)
    glossary = Glossary.from_file(output / "glossary.tsv")
    assert glossary.terms == (Term("Hund", "dog"), Term("Mann", "man"), Term("spielen", "play"), Term("Straße", "road"))
    rows = [json.loads(line) for line in (output / "test_2016_flickr.terms.jsonl").read_text().splitlines()]
    assert [[term["source"] for term in row["terms"]] for row in rows] == [["Hund", "Straße"], ["Mann", "spielen"], []]
    summary = capsys.readouterr().out
    assert "dictionary: 5 entries" in summary and "glossary: 4 terms" in summary
    assert "with at least one term 2 (66.7%)" in summary


def test_a_missing_corpus_folder_is_named_in_one_line(tmp_path, dictionary, capsys, monkeypatch):
    with pytest.raises(SystemExit) as exit_info:
        run_main(
            monkeypatch,
            *("--dictionary", str(dictionary), "--data-dir", str(tmp_path / "nowhere")),
            *("--output-dir", str(tmp_path / "out")),
        )
    assert exit_info.value.code == 2
    assert (
        capsys.readouterr()
        .err.strip()
        .splitlines()[-1]
        .endswith(f"no folder {tmp_path / 'nowhere' / 'multi30k'} (--data-dir holds multi30k/)")
    )
