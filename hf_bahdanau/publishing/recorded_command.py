"""The recorded training command (`training_command.json`): the `hf-bahdanau train` or `distill` command line of a
run and its --config file, secrets redacted, kept in the run's folder for its card."""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hf_bahdanau.errors import InputError
from hf_bahdanau.json_files import read_json
from hf_bahdanau.redaction import redact_argv, redact_config, redact_message

COMMAND_FILE = "training_command.json"  # written at the end of `hf-bahdanau train`


def record_command(output_dir: Path, argv: Sequence[str] | None) -> None:
    """Keep the `hf-bahdanau` arguments `argv` (`train ...` or `distill ...`; None: `train()` called from Python, no
    command to show) and the --config file they name, in `output_dir`."""
    argv = list(argv or [])
    if not argv or argv[0] not in ("train", "distill"):
        return
    recorded: dict[str, Any] = {"command": shlex.join(["hf-bahdanau", *redact_argv(argv)])}  # no secret kept
    config = next((arg.split("=", 1)[1] for arg in argv if arg.startswith("--config=")), None)
    if "--config" in argv[:-1]:
        config = argv[argv.index("--config") + 1]
    if config and Path(config).is_file():
        text = redact_config(Path(config).read_text(encoding="utf-8").strip())
        recorded["config_file"] = {"path": config, "text": text}
    (output_dir / COMMAND_FILE).write_text(json.dumps(recorded, indent=2) + "\n", encoding="utf-8")


def read_command(folder: Path) -> tuple[str | None, dict[str, str] | None]:
    """The recorded command and --config file of `folder`, secrets redacted (again: a folder may have been recorded
    before redaction)."""
    recorded = read_json(folder / COMMAND_FILE)
    command, config_file = recorded.get("command"), recorded.get("config_file")
    if not isinstance(command, str | None) or not (
        config_file is None or isinstance(config_file, dict) and isinstance(config_file.get("text", ""), str)
    ):
        raise InputError(f"{folder / COMMAND_FILE} does not hold a command as train records it: fix or remove it")
    if command:
        try:
            command = shlex.join(redact_argv(shlex.split(command)))
        except ValueError:  # not a shell command line (edited by hand)
            command = redact_message(command)
    if config_file:
        config_file = {**config_file, "text": redact_config(config_file.get("text", ""))}
    return command, config_file
