"""Command-line options checked before any model is loaded, and the top-level help."""

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
