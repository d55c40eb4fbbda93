"""Write docs/cli.md, the command line's reference, from the parsers `hf-bahdanau` itself uses.

    python scripts/make_cli_reference.py            # write docs/cli.md
    python scripts/make_cli_reference.py --check    # exit 1 if docs/cli.md differs from what the parsers make

Each command's section is its description, usage, one table per option group (as `--help` groups them; `train`'s
are those of `hf-bahdanau train --help`) and its epilog (the examples) as `--help` prints it.
"""

import argparse
import os
import sys
from pathlib import Path

from hf_bahdanau.cli import build_parser
from hf_bahdanau.cli.train import train_help_parser

OUTPUT = Path(__file__).resolve().parent.parent / "docs" / "cli.md"
WIDTH = "120"  # argparse wraps usage lines to $COLUMNS: fixed, so the page does not depend on the terminal
HEADER = """\
# Command line reference

Generated from the parsers by `python scripts/make_cli_reference.py`; `tests/test_cli_reference.py` fails when this
page differs from what the parsers make, so do not edit it by hand. Every command also prints its own help:
`hf-bahdanau COMMAND --help`. Each option takes dashes or underscores alike (`--num-beams`, `--num_beams`).
"""


def _escape(text: str) -> str:
    """`text` for a Markdown table cell: pipes escaped everywhere, `<`, `>` and `*` outside code spans."""
    parts = text.replace("|", "\\|").split("`")
    for i in range(0, len(parts), 2):  # even parts are outside code spans
        parts[i] = parts[i].replace("<", "&lt;").replace(">", "&gt;").replace("*", "\\*")
    return "`".join(parts)


def _value(action: argparse.Action) -> str:
    """The value an option takes, as `--help` names it ('' for a flag)."""
    if action.nargs == 0:
        return ""
    if action.metavar is not None:
        name = action.metavar
    elif action.choices is not None:
        name = "{" + ",".join(str(choice) for choice in action.choices) + "}"
    else:
        name = action.dest.upper() if action.option_strings else action.dest
    return {"?": f"[{name}]", "*": f"[{name} ...]", "+": f"{name} [...]"}.get(action.nargs, name)


def _option_cell(action: argparse.Action) -> str:
    """The first name with the value it takes, then its other spellings: `--num-beams NUM_BEAMS`, `--num_beams`."""
    if not action.option_strings:
        return f"`{action.dest}`"
    first, *others = action.option_strings
    value = _value(action)
    return ", ".join([f"`{first} {value}`" if value else f"`{first}`", *(f"`{name}`" for name in others)])


def _section(name: str, parser: argparse.ArgumentParser) -> list[str]:
    formatter = parser._get_formatter()
    lines = [f"## `hf-bahdanau {name}`", "", parser.description or "", "", "```text", parser.format_usage().strip()]
    lines += ["```", ""]
    for group in parser._action_groups:
        actions = [a for a in group._group_actions if a.help != argparse.SUPPRESS and a.dest != "help"]
        if not actions:
            continue
        lines += [f"**{group.title}**", "", "| option | meaning |", "|---|---|"]
        lines += [f"| {_option_cell(a)} | {_escape(' '.join(formatter._expand_help(a).split()))} |" for a in actions]
        lines.append("")
    if parser.epilog:
        lines += ["```text", parser.epilog.strip(), "```", ""]
    return lines


def reference() -> str:
    """The whole page, made from `build_parser()` and `train_help_parser()`."""
    columns = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = WIDTH
    try:
        return _page()
    finally:
        if columns is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = columns


def _page() -> str:
    parser = build_parser()
    (commands,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    summaries = {choice.dest: choice.help for choice in commands._choices_actions}
    lines = [HEADER, "| command | what it does |", "|---|---|"]
    lines += [f"| [`{name}`](#hf-bahdanau-{name}) | {_escape(summaries[name])} |" for name in commands.choices]
    lines.append("")
    for name, subparser in commands.choices.items():
        lines += _section(name, train_help_parser() if name == "train" else subparser)
    return "\n".join(lines).rstrip() + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="Only compare docs/cli.md with the parsers.")
    args = parser.parse_args()
    text = reference()
    if args.check:
        if not OUTPUT.is_file() or OUTPUT.read_text(encoding="utf-8") != text:
            print(f"{OUTPUT} is out of date: run python scripts/make_cli_reference.py", file=sys.stderr)
            return 1
        return 0
    OUTPUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUTPUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
