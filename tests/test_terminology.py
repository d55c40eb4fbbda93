"""Terminology through the one Translator: glossary terms placed in every translation, a forced prefix, words to
avoid; the same options in `translate`, `evaluate`, the pipeline and the CTranslate2 engine (which takes a prefix and
words to avoid itself, and hands a glossary to torch or refuses it)."""

from __future__ import annotations

import logging
import sys

import pytest
from helpers import MODEL_TYPES, tiny_translator

from hf_bahdanau.cli import main
from hf_bahdanau.decoding.glossary import Glossary, term_used
from hf_bahdanau.decoding.translator import Translator
from hf_bahdanau.errors import InputError
from hf_bahdanau.models.pipelines import TASK

TEXTS = ["Zwei Hunde spielen im Schnee.", "Ein Mann fährt Fahrrad.", "Die Leute warten auf den Bus.", ""]
GLOSSARY = {"Hunde": "dogs", "im Schnee": "in the snow", "Mann": "boy", "Fahrrad": "bicycle"}


@pytest.fixture(scope="module", params=MODEL_TYPES)
def model(request, tokenizer):
    return tiny_translator(request.param, tokenizer, 3)


@pytest.fixture(scope="module")
def translator(model, tokenizer) -> Translator:
    return Translator(model, tokenizer)


def test_every_applicable_glossary_term_is_in_the_translation_and_other_texts_are_unchanged(translator):
    found = translator.translate(TEXTS, glossary=GLOSSARY, n_best=2)
    plain = translator.translate(TEXTS, n_best=2)
    assert [[term.target for term in translation.terms] for translation in found] == [
        ["dogs", "in the snow"], ["boy", "bicycle"], [], []
    ]  # fmt: skip
    for translation in found[:2]:  # the best hypothesis (an n-best list's others may be cut off at the bound)
        assert all(term_used(term.target, translation.text) for term in translation.terms), translation.text
    assert [h.text for h in found[2].hypotheses] == [h.text for h in plain[2].hypotheses]  # no term: no change
    assert found[3].text == "" and found[3].score is None


def test_a_prefix_starts_every_translation_and_avoided_words_never_appear(translator):
    plain = translator.translate(TEXTS[:3], num_beams=1)
    words = {word for translation in plain for word in translation.text.split() if word.isalpha()}
    assert words, "the tiny model writes words"
    for beams in (1, 3):
        found = translator.translate(TEXTS[:3], num_beams=beams, prefix="Two dogs", avoid=sorted(words))
        for translation in found:
            assert translation.text.startswith("Two dogs")
            assert not any(term_used(word, translation.text[len("Two dogs") :]) for word in words)
    per_text = translator.translate(TEXTS[:2], prefix=["A", "The man"])
    assert per_text[0].text.startswith("A") and per_text[1].text.startswith("The man")


def test_bad_terminology_options_are_one_line_errors_and_unwritable_terms_a_warning(translator, caplog):
    with pytest.raises(InputError, match="beam search"):
        translator.translate(TEXTS[:1], glossary=GLOSSARY, num_beams=1)
    with pytest.raises(InputError, match="one per text"):
        translator.translate(TEXTS[:2], prefix=["only one"])
    with pytest.raises(InputError, match="list of words"):
        translator.translate(TEXTS[:1], avoid="dogs")
    with caplog.at_level(logging.WARNING):
        found = translator.translate(["Zwei Hunde spielen."], glossary={"Hunde": "犬"})
    assert "cannot write" in caplog.text and found[0].text


def test_terms_that_cannot_fit_the_bound_give_a_warning_for_that_sentence(translator, caplog):
    long_term = " ".join(["bicycle"] * 12)
    with caplog.at_level(logging.WARNING):
        found = translator.translate(TEXTS[:2], glossary={"Mann": long_term}, max_new_tokens=6)
    assert "text 1: its glossary terms" in caplog.text and "text 0" not in caplog.text
    assert len(found) == 2


@pytest.mark.slow  # a pipeline loaded from the saved folder
def test_the_pipeline_takes_the_same_glossary_prefix_and_avoid_list(folder, translator):
    from transformers import pipeline

    translate = pipeline(TASK, model=str(folder))
    options = dict(glossary=GLOSSARY, avoid=["a"], num_beams=3)
    expected = [translation.text for translation in translator.translate(TEXTS, **options)]
    assert [row["translation_text"] for row in translate(TEXTS, **options)] == expected
    assert translate(TEXTS[0], prefix="Two")[0]["translation_text"].startswith("Two")


@pytest.mark.slow
def test_translate_and_evaluate_take_glossary_and_avoid_files(folder, translator, tmp_path, monkeypatch, capsys):
    glossary = tmp_path / "terms.tsv"
    glossary.write_text("# terms\nsource\ttarget\n" + "".join(f"{s}\t{t}\n" for s, t in GLOSSARY.items()))
    avoid = tmp_path / "avoid.txt"
    avoid.write_text("# words\na\n")
    assert main(["translate", "--model", str(folder), "--glossary", str(glossary), "--avoid", str(avoid),
                 "--prefix", "Two", *TEXTS[:3]]) == 0  # fmt: skip
    written = capsys.readouterr().out.splitlines()
    expected = translator.translate(TEXTS[:3], glossary=Glossary.from_file(glossary), avoid=["a"], prefix="Two")
    assert written == [translation.text for translation in expected]
    data = tmp_path / "pairs.tsv"
    data.write_text("".join(f"{text}\tTwo dogs.\n" for text in TEXTS[:3]) * 4)
    hypotheses = tmp_path / "hyp.txt"
    assert main(["evaluate", "--model", str(folder), "--data", str(data), "--src-lang", "de", "--tgt-lang", "en",
                 "--split", "train", "--glossary", str(glossary), "--output", str(hypotheses)]) == 0  # fmt: skip
    report = capsys.readouterr().out
    assert "glossary terms used:" in report and "(100.0%)" in report


def test_a_bad_glossary_file_is_a_one_line_error_naming_the_line(folder, tmp_path, caplog):
    glossary = tmp_path / "terms.tsv"
    glossary.write_text("Hund\tdog\nKatze cat\n")
    assert main(["translate", "--model", str(folder), "--glossary", str(glossary), "Ein Hund."]) == 1
    assert "line 2" in caplog.text and "Traceback" not in caplog.text


@pytest.mark.slow  # converts the model for CTranslate2
@pytest.mark.skipif("ctranslate2" not in sys.modules and not __import__("importlib").util.find_spec("ctranslate2"),
                    reason="CTranslate2 not installed")  # fmt: skip
def test_ctranslate2_takes_prefix_and_avoid_and_hands_a_glossary_to_torch_or_refuses_it(tokenizer, tmp_path, caplog):
    from hf_bahdanau.models.pipelines import save_for_pipeline

    model = tiny_translator("d2l_transformer", tokenizer, 3)
    save_for_pipeline(model, tokenizer, tmp_path / "model")
    torch_translator = Translator.from_folder(tmp_path / "model")
    engine = Translator.from_folder(tmp_path / "model", engine="ctranslate2")
    found = engine.translate(TEXTS[:3], prefix="Two dogs", avoid=["the", "a"])
    assert all(translation.text.startswith("Two dogs") for translation in found)
    assert not any(term_used(word, t.text) for t in found for word in ("the", "a", "The", "A"))
    with pytest.raises(InputError, match="CTranslate2 engine cannot place glossary terms"):
        engine.translate(TEXTS[:1], glossary=GLOSSARY)
    falling_back = Translator.from_folder(tmp_path / "model", engine="ctranslate2", torch_fallback=True)
    with caplog.at_level(logging.WARNING):
        found = falling_back.translate(TEXTS, glossary=GLOSSARY)
        again = falling_back.translate(TEXTS, glossary=GLOSSARY)
    assert caplog.text.count("the torch engine translates with a glossary") == 1
    assert (
        [t.text for t in found]
        == [t.text for t in again]
        == [t.text for t in torch_translator.translate(TEXTS, glossary=GLOSSARY)]
    )
    assert main(["translate", "--model", str(tmp_path / "model"), "--engine", "ctranslate2", "--glossary",
                 str(tmp_path / "missing.tsv"), "Ein Hund."]) == 1  # fmt: skip
    assert "--glossary needs --engine torch" in caplog.text
