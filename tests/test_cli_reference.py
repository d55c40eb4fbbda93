"""docs/cli.md is what scripts/make_cli_reference.py makes from the command line's parsers, and covers every command."""

import re
import subprocess
import sys
from pathlib import Path

from hf_bahdanau.cli import build_parser

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "make_cli_reference.py"


def test_the_cli_reference_is_what_the_parsers_make():
    done = subprocess.run([sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr


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
