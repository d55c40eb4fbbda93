"""README.md: the quick start's steps parse and use the quick recipe, and the test command is the one CI runs."""

import re
import shlex
import subprocess
from pathlib import Path

from hf_bahdanau.cli import build_parser
from hf_bahdanau.cli.train import parse_train_args

ROOT = Path(__file__).resolve().parent.parent


def _bash_blocks() -> list[str]:
    return re.findall(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(encoding="utf-8"), re.DOTALL)


def _quick_start() -> list[str]:
    """The quick start's steps: the README's bash blocks before its test command (the first to run pytest)."""
    blocks = _bash_blocks()
    return blocks[: next(i for i, block in enumerate(blocks) if "pytest" in block)]


def _commands(block: str) -> list[list[str]]:
    """Each line of a block as a shell would split it (no line continuations in the quick start)."""
    return [shlex.split(line) for line in block.splitlines() if line.strip()]


def test_the_readme_test_command_is_what_ci_runs():
    test_command = _bash_blocks()[len(_quick_start())].strip()
    assert "pytest" in test_command and "torch==" in test_command  # a torch pin that the CPU build satisfies
    assert test_command in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()


def test_the_readme_says_how_to_get_the_cpu_only_torch():
    assert "pip install torch --index-url https://download.pytorch.org/whl/cpu" in _quick_start()[0]


def test_the_quick_start_is_three_steps_that_train_the_quick_recipe_and_use_its_folder():
    install, train, use = _quick_start()
    assert [command[:2] for command in _commands(install)] == [["pip", "install"]] * 2
    (export, trainer) = _commands(train)
    assert export == ["export", "HF_BAHDANAU_DATA_DIR=../shared/data"]
    config = trainer[trainer.index("--config") + 1]
    assert config == "scripts/multi30k/quick-de-en.yaml" and (ROOT / config).is_file()
    folder = trainer[trainer.index("--output-dir") + 1]
    assert [command[:4] for command in _commands(use)] == [
        ["hf-bahdanau", "translate", "--model", folder],
        ["hf-bahdanau", "evaluate", "--model", folder],
    ]


def test_the_quick_start_commands_parse_as_written():
    """Each step is valid bash, and each hf-bahdanau line is accepted by the CLI's own parsers (nothing runs)."""
    for block in _quick_start():
        subprocess.run(["bash", "-n"], input=block, text=True, check=True)
        for command in _commands(block):
            if command[0] != "hf-bahdanau":
                continue
            args, rest = build_parser().parse_known_args(command[1:])
            if args.command == "train":
                parse_train_args(rest)  # --config read, every option known, the output folder given
            else:
                assert rest == [], command
