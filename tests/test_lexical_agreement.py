"""`translate`'s prefix, avoid list and glossary together: a glossary term or prefix that holds a phrase to avoid is
a one-line error, and a prefix with letters the model cannot write is warned of."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from helpers import error_of, tiny_translator

from hf_bahdanau.cli import main


@pytest.fixture(scope="module")
def model(tokenizer):
    return tiny_translator("bahdanau", tokenizer, beams=2, max_new_tokens=6)


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    """A glossary (Hunde -> dogs) and three avoid lists: one that bans the term's target, one that bans it only at
    the start of a sentence (upper-cased), one that bans another word."""
    paths = {name: tmp_path / name for name in ("terms.tsv", "dogs.txt", "Dogs-glossary.tsv", "cat.txt")}
    paths["terms.tsv"].write_text("Hunde\tdogs\n", encoding="utf-8")
    paths["Dogs-glossary.tsv"].write_text("Hunde\tDogs\n", encoding="utf-8")
    paths["dogs.txt"].write_text("dogs\n", encoding="utf-8")
    paths["cat.txt"].write_text("cat\n", encoding="utf-8")
    return paths


def translate(folder: Path, *options: str) -> list[str]:
    return ["translate", "--model", str(folder), "Zwei Hunde spielen im Schnee.", *options]


@pytest.mark.parametrize(("glossary", "phrase"), [("terms.tsv", "dogs"), ("Dogs-glossary.tsv", "Dogs")])
def test_a_glossary_term_that_holds_a_phrase_to_avoid_is_refused(folder, files, caplog, capsys, glossary, phrase):
    argv = translate(folder, "--glossary", str(files[glossary]), "--avoid", str(files["dogs.txt"]))
    target = "dogs" if glossary == "terms.tsv" else "Dogs"
    assert error_of(argv, caplog) == (
        f"the glossary term 'Hunde' -> '{target}' holds '{phrase}', a phrase to avoid: leave out one of the two"
    )
    assert capsys.readouterr().out == ""


def test_a_prefix_that_holds_a_phrase_to_avoid_is_refused(folder, files, caplog):
    argv = translate(folder, "--prefix", "Two dogs", "--avoid", str(files["dogs.txt"]))
    assert error_of(argv, caplog) == "the prefix 'Two dogs' holds 'dogs', a phrase to avoid: leave out one of the two"


def test_a_glossary_avoid_list_and_prefix_that_agree_translate(folder, files, capsys):
    argv = translate(folder, "--glossary", str(files["terms.tsv"]), "--avoid", str(files["cat.txt"]), "--prefix", "Two")
    assert main(argv) == 0
    assert capsys.readouterr().out.startswith("Two")


def test_a_prefix_with_letters_the_model_cannot_write_is_warned_of(folder, caplog, capsys):
    with caplog.at_level(logging.WARNING):
        assert main(translate(folder, "--prefix", "Zwei Ω")) == 0
    warnings = [record.getMessage() for record in caplog.records if record.levelname == "WARNING"]
    assert "the prefix 'Zwei Ω' has letters the model cannot write: translations start without them" in warnings
    assert capsys.readouterr().out.startswith("Zwei")
