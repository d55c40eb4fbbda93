"""What `evaluate` refuses: an --output that is a file it reads (a glossary, an avoid list, a model or corpus file,
through a link too) or lies in either model folder, checked before anything is written; a model scored in another
direction than it translates. Scores it cannot print end it as a Unix tool ends."""

from __future__ import annotations

import errno
import gzip
import io
import os
import shutil
import sys
from pathlib import Path

import pytest
from helpers import tiny_translator

from hf_bahdanau.cli import main

PAIRS = [("Ein Mann fährt Fahrrad.", "A man is riding a bicycle."), ("Zwei Hunde spielen.", "Two dogs play.")]


@pytest.fixture(scope="module")
def model(tokenizer):
    return tiny_translator("bahdanau", tokenizer, beams=1, max_new_tokens=4, source_language="de",
                           target_language="en")  # fmt: skip


@pytest.fixture
def models(folder: Path, tmp_path: Path) -> tuple[Path, Path]:
    """Two copies of the tiny de->en model folder, to evaluate and to compare."""
    return Path(shutil.copytree(folder, tmp_path / "model")), Path(shutil.copytree(folder, tmp_path / "other"))


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    """A corpus folder of gzipped `train`, `val` and `test` files, German and English."""
    folder = tmp_path / "corpus"
    folder.mkdir()
    for stem in ("train", "val", "test"):
        for index, lang in enumerate(("de", "en")):
            with gzip.open(folder / f"{stem}.{lang}.gz", "wt", encoding="utf-8") as file:
                file.write("".join(pair[index] + "\n" for pair in PAIRS))
    return folder


def _evaluate(model: Path, corpus: Path, *extra: str) -> int:
    return main(["evaluate", "--model", str(model), "--data", str(corpus), "--test-split", "test", *extra])


def _contents(*folders: Path) -> dict[Path, bytes]:
    return {path: path.read_bytes() for folder in folders for path in folder.rglob("*") if path.is_file()}


def test_evaluate_output_is_never_a_file_it_reads_through_a_link(models, corpus, tmp_path, caplog):
    model, other = models
    os.link(corpus / "test.de.gz", tmp_path / "corpus-link.txt")
    os.link(model / "model.safetensors", tmp_path / "weights-link.txt")
    (tmp_path / "symlink.txt").symlink_to(other / "config.json")
    before = _contents(model, other, corpus)
    for name in ("corpus-link.txt", "weights-link.txt"):
        assert _evaluate(model, corpus, "--compare", str(other), "--output", str(tmp_path / name)) == 1
        assert "which evaluate reads: choose another" in caplog.records[-1].getMessage()
    for output in (tmp_path / "symlink.txt", other / "model.safetensors"):
        assert _evaluate(model, corpus, "--compare", str(other), "--output", str(output)) == 1
        assert f"would overwrite part of the model folder {other}" in caplog.records[-1].getMessage()
    assert _contents(model, other, corpus) == before


@pytest.fixture
def read_files(tmp_path: Path) -> dict[str, Path]:
    """A glossary and an avoid list that evaluate reads."""
    files = {"glossary": tmp_path / "terms.tsv", "avoid": tmp_path / "banned.txt"}
    files["glossary"].write_text("Hunde\tdogs\n")
    files["avoid"].write_text("bicycle\n")
    return files


def _reading(files: dict[str, Path], other: Path) -> list[str]:
    return ["--num-beams", "2", "--glossary", str(files["glossary"]), "--avoid", str(files["avoid"]), "--compare",
            str(other)]  # fmt: skip


@pytest.mark.parametrize("read", ["glossary", "avoid", "compare model"])
@pytest.mark.parametrize("link", ["same path", "hard link", "symlink"])
def test_evaluate_output_is_never_another_file_it_reads(models, corpus, read_files, tmp_path, caplog, read, link):
    model, other = models
    target = read_files.get(read, other / "config.json")
    output = target if link == "same path" else tmp_path / "hyp.txt"
    if link == "hard link":
        output.hardlink_to(target)
    elif link == "symlink":
        output.symlink_to(target)
    before = _contents(model, other, corpus, tmp_path)
    assert _evaluate(model, corpus, *_reading(read_files, other), "--output", str(output)) == 1
    message = caplog.records[-1].getMessage()
    assert message.startswith(f"--output {output}") and ("evaluate reads" in message or "model folder" in message)
    assert _contents(model, other, corpus, tmp_path) == before


def test_the_compare_output_is_checked_before_anything_is_written(models, corpus, read_files, tmp_path, caplog):
    model, other = models
    (tmp_path / "hyp.compare.txt").symlink_to(read_files["avoid"])
    before = _contents(model, other, corpus, tmp_path)
    assert _evaluate(model, corpus, *_reading(read_files, other), "--output", str(tmp_path / "hyp.txt")) == 1
    assert "which evaluate reads" in caplog.records[-1].getMessage()
    assert _contents(model, other, corpus, tmp_path) == before and not (tmp_path / "hyp.txt").exists()


def test_evaluate_output_may_be_a_new_file_or_an_earlier_hypotheses_file(models, corpus, tmp_path):
    model, _ = models
    assert _evaluate(model, corpus, "--output", str(tmp_path / "hyp.txt")) == 0
    earlier = model / "hypotheses.test.de-en.txt"
    earlier.write_text("old\n")
    assert _evaluate(model, corpus, "--output", str(earlier)) == 0
    assert len(earlier.read_text().splitlines()) == len(PAIRS)


def test_evaluate_refuses_the_direction_the_model_does_not_translate(models, corpus, caplog):
    model, _ = models
    assert _evaluate(model, corpus, "--src-lang", "en", "--tgt-lang", "de") == 1
    assert f"--model {model} translates de->en, not en->de" in caplog.records[-1].getMessage()
    assert not (model / "eval_results.json").exists()


def test_evaluate_prints_its_scores_before_saying_a_corrupt_record_was_not_updated(models, corpus, capsys, caplog):
    model, _ = models
    (model / "eval_results.json").write_text("{not json")
    assert _evaluate(model, corpus) == 1
    assert capsys.readouterr().out.startswith("BLEU = ")
    message = caplog.records[-1].getMessage()
    assert message.startswith("the scores above were not stored: ") and f"{model / 'eval_results.json'}" in message
    assert (model / "eval_results.json").read_text() == "{not json"


class FailingStdout(io.StringIO):
    """A stdout whose every write fails with `error`."""

    def __init__(self, error: OSError) -> None:
        super().__init__()
        self.error = error

    def write(self, text: str) -> int:
        raise self.error


def test_evaluate_ends_as_unix_tools_when_its_scores_cannot_be_printed(models, corpus, monkeypatch, caplog):
    model, _ = models
    monkeypatch.setattr(sys, "stdout", FailingStdout(OSError(errno.ENOSPC, "No space left on device")))
    assert _evaluate(model, corpus) == 1
    assert caplog.records[-1].getMessage() == "the scores cannot be written to stdout (No space left on device)"
    monkeypatch.setattr(sys, "stdout", FailingStdout(BrokenPipeError(errno.EPIPE, "Broken pipe")))  # `| head -1`
    with pytest.raises(SystemExit) as ended:
        _evaluate(model, corpus)
    assert ended.value.code == 141
