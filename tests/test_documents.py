"""translate --document and --input-format jsonl: paragraphs split into sentences and written back with
their blank lines, JSON lines with a `text` field, and their errors."""

from __future__ import annotations

import io
import json
import logging
import os
import signal
import sys

import pytest
from helpers import tiny_translator

from hf_bahdanau.cli import main
from hf_bahdanau.decoding.documents import (
    check_language,
    grouped,
    join_document,
    read_jsonl,
    split_document,
    text_lines,
)
from hf_bahdanau.decoding.translator import Translator

CORPUS = [
    "Ein Mann fährt Fahrrad.", "A man is riding a bicycle.", "Zwei Hunde spielen im Schnee.",
    "Two dogs are playing in the snow.", "Eine Frau liest ein Buch im Park.", "A woman is reading a book in the park.",
    "Herr Dr. Müller kam um drei Uhr.", "Mr. Smith came at three.", "Er war z. B. müde!", "He was tired.",
]  # fmt: skip
DOCUMENT = (
    "\n"  # a blank line first: kept
    "Herr Dr. Müller kam um drei Uhr. Er war z. B. müde!\n"
    "Zwei Hunde spielen im Schnee.\n"  # a wrapped line of the same paragraph
    "\n"
    "   \n"  # blank lines between paragraphs, one of spaces: kept, as empty lines
    "\n"
    "Eine Frau liest ein Buch im Park.\n"
)
SENTENCES = [  # the document's sentences (sentencex, German: "Dr." and "z. B." do not end one)
    ["Herr Dr. Müller kam um drei Uhr.", "Er war z. B. müde!", "Zwei Hunde spielen im Schnee."],
    ["Eine Frau liest ein Buch im Park."],
]


def test_split_document_gives_each_output_line_its_sentences():
    assert split_document(DOCUMENT, "de") == [[], SENTENCES[0], [], [], [], SENTENCES[1]]
    assert split_document("", "de") == [] and split_document("\n", "de") == [[]]
    assert split_document("A b.\n\n", "en") == [["A b."], []]  # a last blank line stays; a last newline ends a line
    # French and English abbreviations, quotes and URLs stay inside their sentence
    assert split_document("Il a dit : « Viens. » Puis il est parti.", "fr") == [
        ["Il a dit : « Viens. »", "Puis il est parti."]
    ]
    assert split_document('Dr. Smith said "Stop." See https://x.org/a?b=1 for more. U.S. troops left.', "en") == [
        ['Dr. Smith said "Stop."', "See https://x.org/a?b=1 for more.", "U.S. troops left."]
    ]


def test_join_document_and_grouped_rebuild_the_lines_in_order():
    lines = [["a", "b"], [], ["c"]]
    assert join_document(lines, ["A", "B", "C"]) == "A B\n\nC"
    assert [list(group) for group in grouped([2, 0, 1], iter("xyz"))] == [["x", "y"], [], ["z"]]


def test_check_language_and_read_jsonl_name_the_problem():
    assert check_language("de") == "de" and check_language("pt-BR") == "pt-BR"
    with pytest.raises(ValueError, match="records no source language: pass --document-language CODE"):
        check_language(None)
    with pytest.raises(ValueError, match=r"unknown language 'german!' for the sentence splitter \(sentencex\)"):
        check_language("german!")
    lines = ['{"text": "a", "id": 1}', "", '{"text": "b"}']
    assert read_jsonl(lines) == [{"text": "a", "id": 1}, None, {"text": "b"}]
    with pytest.raises(ValueError, match=r"^in.jsonl line 2: invalid JSON \(Expecting .* at column \d+\)$"):
        read_jsonl(['{"text": "a"}', '{"text": "b"'], "in.jsonl")
    with pytest.raises(ValueError, match=r"^stdin line 3: no 'text' field \(it has 'src', 'id'\)$"):
        read_jsonl(['{"text": "a"}', "", '{"src": "b", "id": 2}'])
    with pytest.raises(ValueError, match=r"^stdin line 1: expected a JSON object with a 'text' field$"):
        read_jsonl(['["text"]'])
    with pytest.raises(ValueError, match=r"^stdin line 1: the 'text' field is int, not a string$"):
        read_jsonl(['{"text": 3}'])


@pytest.fixture(scope="module")
def model(tokenizer):
    return tiny_translator("d2l_transformer", tokenizer, 2, max_new_tokens=12, source_language="de")


def alone(model, tokenizer, sentence: str):
    """The sentence translated by itself (no batch, no sorting)."""
    return Translator(model, tokenizer).translate([sentence], num_beams=2)[0]


@pytest.mark.slow
def test_translate_document_writes_paragraphs_back_with_their_blank_lines(folder, model, tokenizer, tmp_path, capsys):
    path = tmp_path / "letter.de.txt"
    path.write_text(DOCUMENT, encoding="utf-8")
    assert main(["translate", "--model", str(folder), "--document", str(path), "--batch-tokens", "30"]) == 0
    output = capsys.readouterr().out
    paragraphs = [" ".join(alone(model, tokenizer, sentence).text for sentence in group) for group in SENTENCES]
    assert output == f"\n{paragraphs[0]}\n\n\n\n{paragraphs[1]}\n"  # each sentence as translated alone
    assert all(paragraphs)  # nothing empty that would hide a lost sentence
    path.write_text("\ufeff" + DOCUMENT, encoding="utf-8")  # a byte-order mark, as Windows editors write it
    assert main(["translate", "--model", str(folder), "--document", str(path), "--batch-tokens", "30"]) == 0
    assert capsys.readouterr().out == output


def test_an_interrupted_jsonl_translation_keeps_the_whole_records_it_wrote(folder, monkeypatch, capsys, caplog):
    """SIGTERM once the second batch is translated, before it is written: the records of the first stay, each whole,
    as the uninterrupted run writes them, and the error line counts them."""
    texts = ["Eine Frau liest ein Buch.", "Ein Mann fährt Fahrrad.", "Zwei Hunde spielen.", "He is calm.", "I ran.",
             "Go."]  # fmt: skip
    stdin = "".join(json.dumps({"id": i, "text": text}) + "\n" for i, text in enumerate(texts))  # longest first
    command = ["translate", "--model", str(folder), "--input-format", "jsonl", "--batch-size", "2"]
    monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    assert main(command) == 0
    whole = capsys.readouterr().out.splitlines()
    stream = Translator.translate_stream

    def interrupted(self, *args, **kwargs):
        for number, batch in enumerate(stream(self, *args, **kwargs)):
            if number == 1:
                os.kill(os.getpid(), signal.SIGTERM)
            yield batch

    monkeypatch.setattr(Translator, "translate_stream", interrupted)
    monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    with caplog.at_level(logging.ERROR):
        assert main(command) == 130
    written = capsys.readouterr().out.splitlines()
    assert 0 < len(written) < len(texts) and written == whole[: len(written)]
    assert caplog.records[-1].getMessage() == f"interrupted: wrote {len(written)} of {len(texts)} lines"


@pytest.mark.slow
def test_translate_jsonl_adds_translation_and_score_to_each_record(folder, model, tokenizer, monkeypatch, capsys):
    records = ['{"id": 7, "text": "Zwei Hunde spielen im Schnee."}', "", '{"text": "", "lang": "de"}']
    monkeypatch.setattr(sys, "stdin", io.StringIO("".join(f"{line}\n" for line in records)))
    assert main(["translate", "--model", str(folder), "--input-format", "jsonl", "--scores"]) == 0
    lines = capsys.readouterr().out.split("\n")
    assert len(lines) == 4 and lines[1] == "" and lines[3] == ""  # a blank line stays; each record one line
    expected = alone(model, tokenizer, "Zwei Hunde spielen im Schnee.")
    first = json.loads(lines[0])
    assert first["id"] == 7 and first["text"] == "Zwei Hunde spielen im Schnee."  # the record's own fields kept
    assert first["translation"] == expected.text and first["score"] == pytest.approx(expected.score, abs=1e-4)
    assert json.loads(lines[2]) == {"text": "", "lang": "de", "translation": "", "score": None}  # null: no score
    # --document: each text a document, its score the mean of its sentences'
    text = "Herr Dr. Müller kam um drei Uhr. Er war z. B. müde!\n\nEine Frau liest ein Buch im Park."
    monkeypatch.setattr(sys, "stdin", io.StringIO(json.dumps({"text": text}) + "\n"))
    assert main(["translate", "--model", str(folder), "--input-format", "jsonl", "--document", "-", "--scores"]) == 0
    record = json.loads(capsys.readouterr().out)
    found = [alone(model, tokenizer, sentence) for sentence in [*SENTENCES[0][:2], *SENTENCES[1]]]
    assert record["translation"] == f"{found[0].text} {found[1].text}\n\n{found[2].text}"
    assert record["score"] == pytest.approx(sum(h.score for h in found) / 3, abs=1e-4)
    # a document with no sentences has no score: null, not 0.0 (certain), which a filter on the score would keep
    blank = ['{"text": "", "id": 1}', '{"text": "  \\n\\n ", "id": 2}']
    monkeypatch.setattr(sys, "stdin", io.StringIO("".join(f"{line}\n" for line in blank)))
    assert main(["translate", "--model", str(folder), "--input-format", "jsonl", "--document", "-", "--scores"]) == 0
    written = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["id"], r["score"]) for r in written] == [(1, None), (2, None)]
    assert written[1]["translation"].strip() == ""


@pytest.mark.parametrize(
    "argv, stdin, message",
    [
        (["--input-format", "jsonl"], '{"text": "a"}\n{"text": "b"\n', "stdin line 2: invalid JSON"),
        (["--input-format", "jsonl"], '{"text": "a"}\n{"source": "b"}\n', "stdin line 2: no 'text' field"),
        (["--document", "-", "--document-language", "de_DE!"], "Ein Hund.\n", "unknown language 'de_DE!'"),
        (["--document", "-", "--scores"], "", "--scores with --document needs --input-format jsonl"),
        (["--document", "-", "--n-best", "2"], "", "--document takes no --n-best: translate sentences a line"),
        (["--document", "-", "--n-best", "2", "--alignments"], "", "--document takes no --n-best or --alignments"),
        (["--input-format", "html", "--quality"], "<p>Ein Hund.</p>", "--quality does not apply to --input-format"),
        (["--input-format", "html", "--scores"], "<p>Ein Hund.</p>", "--scores does not apply to --input-format"),
        (["--input-format", "jsonl", "Ein Hund."], "", "--input-format jsonl reads stdin: leave out the sentences"),
        pytest.param(
            ["--input-format", "jsonl"],
            '{"text": "a", "n": NaN}\n',
            "stdin line 1: invalid JSON (NaN is not a JSON",
            id="NaN",
        ),
        pytest.param(
            ["--input-format", "jsonl"],
            "[" * 100_000 + "\n",
            "stdin line 1: JSON nested too deeply to read",
            id="nested",
        ),
    ],
)
def test_document_and_jsonl_errors_are_one_line(folder, monkeypatch, caplog, argv, stdin, message):
    monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    assert main(["translate", "--model", str(folder), *argv]) == 1
    (error,) = [record.getMessage() for record in caplog.records if record.levelname == "ERROR"]
    assert message in error and "\n" not in error


def test_a_document_that_is_not_utf8_is_named(folder, tmp_path, caplog):
    path = tmp_path / "latin1.txt"
    path.write_bytes("Müller.\n".encode("latin-1"))
    assert main(["translate", "--model", str(folder), "--document", str(path)]) == 1
    assert f"{path} is not UTF-8 text (byte 1)" in caplog.text


@pytest.mark.slow
def test_odd_paragraphs_stay_bounded_and_blank_lines_stay_blank(folder, tokenizer, tmp_path, capsys):
    from hf_bahdanau.decoding.sources import length_bound

    odd = ["-", "...", "😀😀", "12345 678", "https://example.com/a?b=1&c=2", "- - -"]
    path = tmp_path / "odd.txt"
    path.write_text("\n\n".join(odd) + "\n\n", encoding="utf-8")  # a blank line after each
    assert main(["translate", "--model", str(folder), "--document", str(path), "--document-language", "en"]) == 0
    lines = capsys.readouterr().out.split("\n")[:-1]
    assert lines[1::2] == [""] * len(odd) and len(lines) == 2 * len(odd)  # each blank line kept, the last too
    for source, translation in zip(odd, lines[::2], strict=True):
        sentences = split_document(source, "en")[0]
        bound = sum(length_bound(len(tokenizer(sentence)["input_ids"])) for sentence in sentences)
        assert len(tokenizer(translation, add_special_tokens=False)["input_ids"]) <= bound, (source, translation)


def test_a_form_feed_line_of_a_document_stays_one_line():
    assert text_lines("Ein Hund.\n\f\r\nZwei\u2028Hunde.\n") == ["Ein Hund.", "\f", "Zwei\u2028Hunde."]
    assert len(split_document("Ein Hund.\n\f\nZwei Hunde.\n", "de")) == 3  # a paragraph, a blank line, a paragraph


@pytest.mark.slow
def test_jsonl_keeps_a_u2028_inside_a_string_and_writes_it_escaped(folder, monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", io.StringIO('{"id": 1, "text": "Zwei Hunde\u2028spielen."}\n'))
    assert main(["translate", "--model", str(folder), "--input-format", "jsonl"]) == 0
    output = capsys.readouterr().out
    assert "\u2028" not in output and output.count("\n") == 1 and "\\u2028" in output
    assert json.loads(output)["text"] == "Zwei Hunde\u2028spielen."
