"""A model folder's own code never runs: `translate` and `train` refuse a folder of a model type the package does not
have, whatever stdin answers, and edited code in a folder of our own type is not what runs."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

from helpers import TINY, error_of, logged_errors
from transformers import pipeline

import hf_bahdanau
from hf_bahdanau.cli import main

EVIL_CODE = """\
from pathlib import Path
Path({marker!r}).write_text("the folder's code ran")
from transformers import PretrainedConfig
class EvilConfig(PretrainedConfig):
    model_type = "evil_seq2seq"
"""


def make_evil_folder(saved: Path, marker: Path) -> Path:
    """`saved` with a config.json of a model type we do not have, whose `auto_map` names code that writes `marker`."""
    config = json.loads((saved / "config.json").read_text(encoding="utf-8"))
    config["model_type"] = "evil_seq2seq"
    config["auto_map"] = {"AutoConfig": "configuration_evil.EvilConfig",
                          "AutoModelForSeq2SeqLM": "configuration_evil.EvilConfig"}  # fmt: skip
    (saved / "config.json").write_text(json.dumps(config), encoding="utf-8")
    (saved / "configuration_evil.py").write_text(EVIL_CODE.format(marker=str(marker)), encoding="utf-8")
    (saved / "tokenizer_config.json").write_text(json.dumps({"auto_map": config["auto_map"]}), encoding="utf-8")
    return saved


def test_translate_refuses_an_unknown_model_type_whatever_stdin_answers(saved, tmp_path, monkeypatch, capsys, caplog):
    marker = tmp_path / "ran.txt"
    folder = make_evil_folder(saved, marker)
    monkeypatch.setattr(sys, "stdin", io.StringIO("y\ny\nHallo\n"))  # yes to any prompt, then a sentence
    last = error_of(["translate", "--model", str(folder)], caplog)
    assert capsys.readouterr().out == ""
    assert "model type 'evil_seq2seq'" in last and "bahdanau, d2l_transformer" in last
    assert not marker.exists()


def test_code_edited_in_a_folder_of_our_own_model_type_never_runs(saved, tmp_path, capsys):
    """A folder of a type we have, whose remote-code files were changed: the command line and the in-process
    pipeline use the package's classes, not the folder's files."""
    marker = tmp_path / "ran.txt"
    for name in ("modeling_bahdanau.py", "configuration_bahdanau.py", "pipelines.py"):
        code = (saved / name).read_text(encoding="utf-8")
        (saved / name).write_text(EVIL_CODE.split("from transformers")[0].format(marker=str(marker)) + code)
    assert main(["translate", "--model", str(saved), "i see the dog ."]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 1 and not marker.exists()
    translated = pipeline(hf_bahdanau.TASK, model=str(saved))("i see the dog .")
    assert "translation_text" in translated[0] and not marker.exists()


def test_train_from_a_folder_of_unknown_model_type_refuses_it(saved, tatoeba_tsv, tmp_path, caplog):
    marker = tmp_path / "ran.txt"
    folder = make_evil_folder(saved, marker)
    argv = ["train", "--model_name_or_path", str(folder), "--data", str(tatoeba_tsv), "--output-dir",
            str(tmp_path / "out"), *TINY[:4], "--max_steps", "1"]  # fmt: skip
    assert main(argv) == 1
    (error,) = logged_errors(caplog)
    assert "model type 'evil_seq2seq'" in error and not marker.exists() and not (tmp_path / "out").exists()
