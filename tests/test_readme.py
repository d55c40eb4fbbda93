"""README.md: the quick start's steps parse and use the quick recipe, the test command is the one CI runs, and the
layout tree names every module and folder."""

import re
import shlex
import subprocess
from fnmatch import fnmatch
from pathlib import Path

from hf_bahdanau.cli import build_parser, parse_train_args

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
    assert (ROOT / ".ci" / "run").read_text(encoding="utf-8").strip().splitlines()[-1] == test_command


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


def _layout_names() -> tuple[list[str], list[str]]:
    """The README's layout tree (the code block that starts with `hf_bahdanau/`): the paths it names, relative to
    the repository root, and its top-level folders. A line at the margin starts with a top-level folder; a line
    indented by two spaces starts with names in the folder above it, separated by commas; a description follows
    the names, and lines indented deeper continue it."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    tree = re.search(r"```\n(hf_bahdanau/\n.*?)```", text, re.DOTALL).group(1)
    path = re.compile(r"[\w*.-]+(/[\w*.-]+)*/|[\w*-]+(/[\w*.-]+)*\.[\w*]+")
    names, folders, folder = [], [], ""
    for line in tree.splitlines():
        indent = len(line) - len(line.lstrip())
        tokens = re.split(r"[,\s]+", line.strip())
        if not line.strip() or indent > 2:
            continue
        if indent == 0:
            folder, tokens = tokens[0], tokens[1:]
            folders.append(folder)
            names.append(folder)
        for token in tokens:
            if not path.fullmatch(token):
                break  # the description starts
            names.append(folder + token)
    return names, folders


def test_the_layout_tree_names_every_module_and_folder_and_only_files_that_exist():
    names, folders = _layout_names()
    assert [name for name in names if not any(ROOT.glob(name.rstrip("/")))] == []  # each named file exists
    modules = [path.relative_to(ROOT).as_posix() for path in sorted((ROOT / "hf_bahdanau").rglob("*.py"))]
    scripts = [path.relative_to(ROOT).as_posix() for path in sorted((ROOT / "scripts").glob("*.py"))]
    assert [module for module in modules + scripts if module not in names] == []
    ignored = [line.strip().rstrip("/") for line in (ROOT / ".gitignore").read_text().splitlines() if line.strip()]
    present = sorted(
        f"{path.name}/"
        for path in ROOT.iterdir()
        if path.is_dir() and path.name[0] not in "._" and not any(fnmatch(path.name, rule) for rule in ignored)
    )
    assert [folder for folder in present if folder not in folders] == []
