"""Command-line options and paths checked before any model or corpus is read or a run folder is locked, and the
top-level help."""

from __future__ import annotations

import pytest

from hf_bahdanau import cli
from hf_bahdanau.cli import main


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "x"])
def test_a_length_penalty_must_be_a_finite_number(value, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["translate", "--model", str(tmp_path), "--length-penalty", value])
    assert exit_info.value.code == 2
    assert "argument --length-penalty" in capsys.readouterr().err
    assert cli.build_parser().parse_args(["translate", "--model", "m", "--length-penalty", "0.6"]).length_penalty == 0.6


def test_the_top_level_help_names_every_command(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    description = capsys.readouterr().out.split("\n\n")[1]  # the paragraph after the usage line
    for command in ("train", "evaluate", "translate", "export", "publish", "demo"):
        assert command in description


@pytest.mark.parametrize(
    "options, refused",
    [
        (["--attention_heads", "2"], "--attention_heads is an option of transformer models, not of a bahdanau "
         "model: leave it out or pass --model_type transformer"),
        (["--model_type", "transformer", "--rnn_type", "lstm", "--decoder_type", "cgru"],
         "--decoder_type, --rnn_type are options of bahdanau models, not of a transformer model: leave them "
         "out or pass --model_type bahdanau"),
    ],
    ids=["a-transformer-option", "bahdanau-options"],
)  # fmt: skip
def test_an_option_of_the_other_model_type_is_refused_before_anything_is_read(options, refused, tmp_path, caplog):
    output = tmp_path / "runs" / "new"
    argv = ["train", "--data", str(tmp_path / "no-corpus"), "--src-lang", "de", "--tgt-lang", "en", "--output-dir",
            str(output), *options]  # fmt: skip
    assert main(argv) == 1
    assert caplog.records[-1].levelname == "ERROR" and caplog.records[-1].getMessage() == refused  # not the corpus
    assert not output.exists() and not list(tmp_path.rglob("*.lock"))  # no folder, and no lock for it


def test_a_mistyped_corpus_path_is_refused_before_the_folder_is_locked(tmp_path, caplog):
    output = tmp_path / "runs" / "new"
    argv = ["train", "--data", str(tmp_path / "pairs.tsv"), "--src-lang", "en", "--tgt-lang", "fr", "--output-dir",
            str(output)]  # fmt: skip
    assert main(argv) == 1
    assert caplog.records[-1].getMessage() == f"no such file or folder: {tmp_path / 'pairs.tsv'}"
    assert not (tmp_path / "runs").exists()  # neither the folder, nor its parent, nor a lock beside it
