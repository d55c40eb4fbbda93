"""Errors by kind: the package's own input errors end `hf-bahdanau` with one line and exit status 1; anything else
is a bug, and leaves `main` with its traceback (so none may be left on a path a user can take: a run that logged
no loss is saved, without curves)."""

import logging

import pytest
from helpers import TINY, error_of, make_model

from hf_bahdanau import cli
from hf_bahdanau.cli import main
from hf_bahdanau.cli.arguments import UsageError
from hf_bahdanau.errors import (
    InputError,
    InputNotFoundError,
    OutputExistsError,
    UnreachableError,
    UnwritableError,
    as_input_error,
)

TOKEN = "hf_CommandLineTokenNeverToBeSeen0123"


@pytest.fixture(scope="module")
def model(tokenizer):
    return make_model("d2l_transformer", vocab_size=len(tokenizer))


def export_raising(monkeypatch, error):
    """`hf-bahdanau export` with a `run` that raises `error`; its argv."""

    def run(args):
        raise error

    monkeypatch.setattr(cli.export, "run", run)
    return ["export", "--model", "m", "--output", "o"]


@pytest.mark.parametrize("bug", [ValueError("boom"), KeyError("boom"), OSError("boom"), TypeError("boom")])
def test_a_bug_leaves_main_with_its_traceback(bug, monkeypatch, caplog):
    with pytest.raises(type(bug), match="boom"):
        main(export_raising(monkeypatch, bug))
    assert not [record for record in caplog.records if record.levelno >= logging.ERROR]


@pytest.mark.parametrize("kind", [InputError, UsageError, InputNotFoundError, OutputExistsError, UnwritableError,
                                  UnreachableError])  # fmt: skip
def test_an_input_error_is_one_redacted_line_and_status_1(kind, monkeypatch, caplog):
    argv = export_raising(monkeypatch, kind(f"bad input, with the token {TOKEN} in it"))
    message = error_of(argv, caplog)
    assert message.startswith("bad input, with the token ") and TOKEN not in message


def test_the_oserror_kinds_are_input_errors_and_what_callers_catch():
    assert issubclass(UsageError, InputError) and issubclass(InputError, ValueError)
    for kind, expected in ((InputNotFoundError, FileNotFoundError), (OutputExistsError, FileExistsError),
                           (UnwritableError, OSError), (UnreachableError, ConnectionError)):  # fmt: skip
        error = kind("said once")
        assert isinstance(error, InputError) and isinstance(error, expected) and str(error) == "said once"


def test_as_input_error_turns_only_the_kinds_named_into_input_errors():
    with pytest.raises(InputError, match="^not JSON$") as converted:
        with as_input_error(ValueError, OSError):
            raise ValueError("not JSON")
    assert isinstance(converted.value.__cause__, ValueError)
    with pytest.raises(InputError) as kept, as_input_error(ValueError):
        raise InputNotFoundError("kept as it is")
    assert type(kept.value) is InputNotFoundError
    with pytest.raises(KeyError), as_input_error(ValueError, OSError):
        raise KeyError("a bug")


def test_a_model_folder_whose_config_is_not_json_is_one_line(tmp_path, caplog):
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text('{"model_type": ', encoding="utf-8")
    assert str(broken) in error_of(["translate", "--model", str(broken), "Go."], caplog)


def test_a_document_that_cannot_be_read_is_named(folder, tmp_path, caplog):
    missing = tmp_path / "missing.txt"
    message = error_of(["translate", "--model", str(folder), "--document", str(missing)], caplog)
    assert message.startswith(f"--document {missing} cannot be read (")


def test_an_unwritable_hypotheses_file_is_named(folder, tmp_path, caplog):
    (tmp_path / "a file").write_text("", encoding="utf-8")
    corpus = tmp_path / "pairs.tsv"
    corpus.write_text("".join(f"a dog {n} .\tun chien {n} .\n" for n in range(20)), encoding="utf-8")
    output = tmp_path / "a file" / "hypotheses.txt"  # its folder is a file
    argv = ["evaluate", "--model", str(folder), "--data", str(corpus), "--src-lang", "en", "--tgt-lang", "fr",
            "--max-samples", "2", "--num-beams", "1", "--max-new-tokens", "2", "--output", str(output)]  # fmt: skip
    assert error_of(argv, caplog).startswith(f"the hypotheses file {output} cannot be written (")


@pytest.mark.slow
def test_a_run_that_logged_no_loss_is_saved_without_curves(tatoeba_tsv, tmp_path, caplog):
    output = tmp_path / "run"
    argv = ["train", "--data", str(tatoeba_tsv), "--output-dir", str(output), *TINY, "--max_steps", "2",
            "--logging_steps", "50", "--eval_strategy", "no", "--save_strategy", "no",
            "--load_best_model_at_end", "false"]  # fmt: skip
    with caplog.at_level(logging.INFO):
        assert main(argv) == 0
    assert (output / "model.safetensors").is_file() and (output / "training_command.json").is_file()
    assert not (output / "training_curves.png").exists()
    assert "no loss was logged" in caplog.text
