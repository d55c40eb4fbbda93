"""A student that calls its teacher (`decoding.cascade`): exactly the sentences the student's estimator scores below
the threshold are re-translated by the teacher, in one call a batch, in input order; with either engine on either
side; and `translate --fallback TEACHER --min-quality Q` writes the cascade's translations."""

from __future__ import annotations

import json
import logging
import shutil
import sys
from pathlib import Path

import pytest
import sacrebleu
from test_quality import SOURCES, spoilt, tiny_folder

from hf_bahdanau.cli import main
from hf_bahdanau.decoding.calibration import calibrate
from hf_bahdanau.decoding.cascade import STUDENT, TEACHER, Cascade, Cascaded
from hf_bahdanau.decoding.translator import Translator
from hf_bahdanau.errors import InputError

TEXTS = [*SOURCES[:11], "", *SOURCES[11:20]]  # a blank one among them: no estimate, never re-translated


def calibrated_folder(tokenizer, root: Path) -> Path:
    """A tiny Transformer de->en folder with a quality estimator fitted on SOURCES (references: its own
    translations with every third word replaced)."""
    folder = tiny_folder(tokenizer, root / "student")
    references = [spoilt(translation.text) for translation in Translator.from_folder(folder).translate(SOURCES)]
    calibrate(Translator.from_folder(folder), folder, SOURCES, references, {"data": "tiny"})
    return folder


@pytest.fixture(scope="module")
def student_folder(tokenizer, tmp_path_factory) -> Path:
    return calibrated_folder(tokenizer, tmp_path_factory.mktemp("cascade"))


@pytest.fixture(scope="module")
def teacher_folder(tokenizer, tmp_path_factory) -> Path:
    """A tiny RNN de->en folder without an estimator: translations other than the student's."""
    return tiny_folder(tokenizer, tmp_path_factory.mktemp("teacher") / "model", "bahdanau")


def recorded(translator: Translator) -> list[list[str]]:
    """The texts of each `translate` call `translator` gets from now on."""
    calls: list[list[str]] = []
    translate = translator.translate

    def recording(texts, **options):
        calls.append(list(texts))
        return translate(texts, **options)

    translator.translate = recording
    return calls


def middle_threshold(student: Translator) -> float:
    """A threshold with student translations of TEXTS on both sides of it."""
    scores = sorted(t.quality.score for t in student.translate(TEXTS, quality=True) if t.quality is not None)
    return (scores[len(scores) // 2 - 1] + scores[len(scores) // 2]) / 2


@pytest.mark.parametrize("engine", ["torch", "ctranslate2"])
def test_the_teacher_re_translates_exactly_the_sentences_below_the_threshold_in_one_call_a_batch(
    student_folder, teacher_folder, engine
):
    if engine == "ctranslate2":
        pytest.importorskip("ctranslate2")
    options = {"quantize": "int8"} if engine == "ctranslate2" else {}
    student = Translator.from_folder(student_folder, engine=engine, batch_size=4, **options)
    teacher = Translator.from_folder(teacher_folder)
    estimated = student.translate(TEXTS, quality=True, num_beams=1)
    threshold = middle_threshold(student)
    low = [i for i, found in enumerate(estimated) if found.quality is not None and found.quality.score < threshold]
    assert 0 < len(low) < len(TEXTS) - 1

    chunks = [len(chunk) for chunk in student.translate_stream(TEXTS, quality=True, num_beams=1)]
    calls = recorded(teacher)
    cascade = Cascade(student, teacher, threshold)
    found = cascade.translate(TEXTS, num_beams=1)

    assert all(isinstance(translation, Cascaded) for translation in found)
    assert [i for i, translation in enumerate(found) if translation.made_by == TEACHER] == low
    expected_teacher = Translator.from_folder(teacher_folder).translate([TEXTS[i] for i in low])
    assert [found[i].text for i in low] == [translation.text for translation in expected_teacher]
    kept = [i for i in range(len(TEXTS)) if i not in low]
    assert [found[i].text for i in kept] == [estimated[i].text for i in kept]
    assert [found[i].made_by for i in kept] == [STUDENT] * len(kept) and found[11].text == ""
    assert [found[i].student_quality for i in range(len(TEXTS))] == [t.quality for t in estimated]
    assert all(translation.quality is None for translation in found)  # not asked for
    # one call a batch of the student's, the low ones of that batch in input order
    starts = [sum(chunks[:k]) for k in range(len(chunks))]
    per_chunk = [
        [TEXTS[i] for i in low if start <= i < start + size] for start, size in zip(starts, chunks, strict=True)
    ]
    assert calls == [texts for texts in per_chunk if texts] and len(calls) > 1
    assert cascade.retranslated == len(low) and cascade.estimated == len(TEXTS) - 1  # the blank one has no estimate


def test_a_threshold_of_0_keeps_every_translation_and_1_re_translates_all_but_blank_ones(
    student_folder, teacher_folder
):
    student, teacher = Translator.from_folder(student_folder), Translator.from_folder(teacher_folder)
    calls = recorded(teacher)
    assert {t.made_by for t in Cascade(student, teacher, 0.0).translate(TEXTS)} == {STUDENT} and calls == []
    found = Cascade(student, teacher, 1.0).translate(TEXTS, quality=True)
    assert [t.made_by for t in found] == [TEACHER] * 11 + [STUDENT] + [TEACHER] * 9
    assert all(t.quality is None for t in found)  # the teacher has no estimator: its translations are not estimated
    assert calls == [[text for text in TEXTS if text]]


def test_with_quality_each_translation_carries_the_estimate_of_the_model_that_made_it(student_folder, tmp_path):
    student = Translator.from_folder(student_folder)
    teacher = Translator.from_folder(shutil.copytree(student_folder, tmp_path / "teacher"))  # it has an estimator
    found = Cascade(student, teacher, 1.0, teacher_options={"num_beams": 1}).translate(SOURCES[:4], quality=True)
    expected = teacher.translate(SOURCES[:4], quality=True, num_beams=1)
    assert [t.quality for t in found] == [t.quality for t in expected]
    assert [t.student_quality for t in found] == [t.quality for t in student.translate(SOURCES[:4], quality=True)]


def test_a_student_without_an_estimator_and_a_teacher_of_another_pair_are_refused(
    teacher_folder, tokenizer, tmp_path, caplog
):
    teacher = Translator.from_folder(teacher_folder)
    with pytest.raises(InputError, match="no quality estimator"):
        Cascade(teacher, teacher, 0.5)
    assert main(["translate", "--model", str(teacher_folder), "--fallback", str(teacher_folder),
                 "--min-quality", "0.5", SOURCES[0]]) == 1  # fmt: skip
    assert "no quality estimator" in caplog.text and "Traceback" not in caplog.text
    student = calibrated_folder(tokenizer, tmp_path)
    config = json.loads((teacher_folder / "config.json").read_text())
    other = tmp_path / "en-de"
    shutil.copytree(teacher_folder, other)
    (other / "config.json").write_text(json.dumps({**config, "source_language": "en", "target_language": "de"}))
    with pytest.raises(InputError, match="translates de->en but its teacher en->de"):
        Cascade(Translator.from_folder(student), Translator.from_folder(other), 0.5)


@pytest.mark.parametrize(
    "options, message",
    [
        (["--fallback", "T"], "--fallback needs --min-quality"),
        (["--min-quality", "0.5"], "--min-quality needs --fallback"),
        (["--fallback", "T", "--min-quality", "1.5"], "expected a number from 0 to 1"),
        (["--fallback", "T", "--fallback", "U", "--min-quality", "0.5"], "one --fallback"),
    ],
)
def test_fallback_options_that_do_not_go_together_are_refused(teacher_folder, capsys, caplog, options, message):
    try:
        code = main(["translate", "--model", str(teacher_folder), *options, "Ein Hund."])
    except SystemExit as exit:  # argparse's own refusal of a value
        code = exit.code
    assert code in (1, 2) and message in caplog.text + capsys.readouterr().err


def main_reading(argv: list[str], lines: list[str], path: Path, monkeypatch: pytest.MonkeyPatch) -> int:
    """`main(argv)` with standard input read from a file of `lines` (not a terminal)."""
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    with path.open(encoding="utf-8") as stream, monkeypatch.context() as patched:
        patched.setattr(sys, "stdin", stream)
        return main(argv)


def test_translate_with_a_fallback_writes_the_cascade_s_lines_and_records(
    student_folder, teacher_folder, capsys, caplog, monkeypatch, tmp_path
):
    student, teacher = Translator.from_folder(student_folder), Translator.from_folder(teacher_folder)
    threshold = middle_threshold(student)
    expected = Cascade(student, teacher, threshold).translate(TEXTS, quality=True)
    fallback = ["--fallback", str(teacher_folder), "--min-quality", str(threshold)]

    argv = ["translate", "--model", str(student_folder), *fallback]
    caplog.set_level(logging.INFO, "hf_bahdanau")
    assert main_reading([*argv, "--quality"], TEXTS, tmp_path / "in.txt", monkeypatch) == 0
    lines = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    assert [fields[1] for fields in lines] == [t.text for t in expected]
    assert [fields[0] for fields in lines] == ["" if t.quality is None else f"{t.quality.score:.4f}" for t in expected]
    retranslated = sum(t.made_by == TEACHER for t in expected)
    estimated = sum(t.student_quality is not None for t in expected)
    assert f"the teacher re-translated {retranslated} of {estimated} sentences" in caplog.text

    records = [json.dumps({"text": text}) for text in TEXTS]
    assert main_reading([*argv, "--input-format", "jsonl"], records, tmp_path / "in.jsonl", monkeypatch) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["translation"] for r in records] == [t.text for t in expected]
    assert [r["retranslated"] for r in records] == [int(t.made_by == TEACHER) for t in expected]


def test_a_perfect_estimate_re_translates_the_weakest_sentences():
    from conftest import load_script

    benchmark = load_script("benchmark_cascade")
    references = ["a dog runs on the grass", "two men play chess", "a child eats an apple"]
    student = ["a dog runs on the grass", "men play", "a child eats an apple today"]
    teacher = ["a dog runs on grass", "two men play chess", "a child eats an apple"]
    assert benchmark.weakest(student, references, 1) == {1}  # chrF: 100, far lower, a little lower
    assert benchmark.weakest(student, references, 2) == {1, 2}
    mixed = ["a dog runs on the grass", "two men play chess", "a child eats an apple today"]
    assert benchmark.perfect_estimate_bleu(student, teacher, references, 1 / 3) == pytest.approx(
        sacrebleu.corpus_bleu(mixed, [references]).score
    )


@pytest.mark.slow
def test_the_benchmark_spans_the_student_at_q_0_and_the_teacher_at_q_1(student_folder, teacher_folder, tmp_path):
    from conftest import load_script

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for split in ("train", "val", "test_2016_flickr"):
        (corpus / f"{split}.de").write_text("\n".join(SOURCES[:12]) + "\n", encoding="utf-8")
        (corpus / f"{split}.en").write_text("\n".join(spoilt(text) for text in SOURCES[:12]) + "\n", encoding="utf-8")
    student = shutil.copytree(student_folder, tmp_path / "student")
    settings = {"data": str(corpus), "data_path": None, "src_lang": "de", "tgt_lang": "en",
                "test_split": "test_2016_flickr", "d2l_normalize": False}  # fmt: skip
    (student / "translation_data.json").write_text(json.dumps(settings), encoding="utf-8")
    output = tmp_path / "benchmark"
    load_script("benchmark_cascade").main([
        "--student", str(student), "--student-engine", "torch", "--student-quantize", "none", "--teacher",
        str(teacher_folder), "--teacher-beams", "2", "--thresholds", "0", "0.5", "1", "--batch-size", "4",
        "--output-dir", str(output),
    ])  # fmt: skip
    results = json.loads((output / "results.json").read_text(encoding="utf-8"))
    cascade = results["cascade"]
    assert 0 <= results["differing"] <= 12
    assert results["sentences"] == 12 and [cascade[q]["retranslated"] for q in ("0", "1")] == [0.0, 1.0]
    assert cascade["0"]["bleu"] == results["student"]["bleu"] == results["student, with estimates"]["bleu"]
    assert cascade["1"]["bleu"] == results["teacher"]["bleu"]
    assert cascade["0"]["perfect_estimate_bleu"] == results["student"]["bleu"]  # nothing re-translated
    assert cascade["1"]["perfect_estimate_bleu"] == results["teacher"]["bleu"]  # all
    assert "| cascade | 0.5 |" in (output / "table.md").read_text(encoding="utf-8")
    assert (output / "cascade.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
