"""docs/cli.md is what scripts/make_cli_reference.py makes from the command line's parsers, and covers every command."""

import os
import re
import sys
from pathlib import Path
from unittest.mock import patch

from conftest import load_script

from hf_bahdanau.cli import build_parser

ROOT = Path(__file__).resolve().parent.parent


def test_the_cli_reference_is_what_the_parsers_make_at_any_terminal_width(monkeypatch):
    monkeypatch.setenv("COLUMNS", "40")  # argparse wraps to the terminal: the page must not
    made = load_script("make_cli_reference").reference()
    assert made.count("\n") > 100 and os.environ["COLUMNS"] == "40"
    assert (ROOT / "docs" / "cli.md").read_text(encoding="utf-8") == made, "run python scripts/make_cli_reference.py"


def test_the_check_fails_on_a_page_that_differs(tmp_path):
    script = load_script("make_cli_reference")
    script.OUTPUT = tmp_path / "cli.md"
    script.OUTPUT.write_text(script.reference().replace("`--num-beams", "`--num-bems"), encoding="utf-8")
    with patch.object(sys, "argv", ["make_cli_reference.py", "--check"]):
        assert script.main() == 1
    with patch.object(sys, "argv", ["make_cli_reference.py"]):
        assert script.main() == 0
    with patch.object(sys, "argv", ["make_cli_reference.py", "--check"]):
        assert script.main() == 0


def test_the_cli_reference_has_a_section_and_every_option_of_each_command():
    page = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    sections = dict(re.findall(r"^## `hf-bahdanau (\w+)`\n(.*?)(?=^## |\Z)", page, re.DOTALL | re.MULTILINE))
    commands = next(action for action in build_parser()._actions if action.dest == "command").choices
    assert list(sections) == list(commands)
    for name, parser in commands.items():
        if name == "train":  # its options come from the dataclasses, checked by the test above
            assert "`--output_dir OUTPUT_DIR`" in sections[name] and "`--config CONFIG`" in sections[name]
            continue
        options = [option for action in parser._actions if action.dest != "help" for option in action.option_strings]
        assert [option for option in options if f"`{option}" not in sections[name]] == [], name
