"""README.md and docs/: the architecture tree names every module and folder, every relative link and repository path
leads to a file that exists, and every `hf-bahdanau` command shown parses."""

import re
import shlex
from fnmatch import fnmatch
from pathlib import Path

import pytest

from hf_bahdanau.cli import build_parser
from hf_bahdanau.cli.train import parse_train_args

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHELL_OPERATORS = {"<", ">", "|", "&&", ";", "2>&1"}


def _layout_names() -> tuple[list[str], list[str]]:
    """docs/architecture.md's tree (the code block that starts with `hf_bahdanau/`): the paths it names, relative to
    the repository root, and its top-level folders. A line at the margin starts with a top-level folder; a line
    indented by two spaces starts with names in the folder above it, separated by commas; a description follows
    the names, and lines indented deeper continue it."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
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


def test_the_architecture_tree_names_every_module_and_folder_and_only_files_that_exist():
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


def _anchors(page: Path) -> set[str]:
    """The anchors GitHub gives a page's headings: lower case, punctuation dropped, spaces as hyphens."""
    headings = re.findall(
        r"^#+ (.+)$", re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.DOTALL), re.M
    )
    return {re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-") for heading in headings}


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_every_relative_link_and_repository_path_of_a_page_exists(page):
    text = page.read_text(encoding="utf-8")
    links = [link for link in re.findall(r"\]\(([^)\s]+)\)", text) if "://" not in link]
    missing = []
    for link in links:
        target, _, anchor = link.partition("#")
        path = (page.parent / target) if target else page
        if not path.exists() or (anchor and path.suffix == ".md" and anchor not in _anchors(path)):
            missing.append(link)
    # the repository paths a page names (`scripts/...`, `hf_bahdanau/...`, `docs/...`), from the repository root
    paths = re.findall(r"(?<![\w/.])((?:hf_bahdanau|scripts|tests|docs|model_cards|\.ci)/[\w./*-]*[\w*])", text)
    missing += [path for path in paths if not any(ROOT.glob(path.rstrip("/")))]
    assert missing == []


def _shown_commands(page: Path) -> list[list[str]]:
    """The `hf-bahdanau` commands of a page's bash blocks, each cut at its first shell operator or comment."""
    blocks = re.findall(r"```bash\n(.*?)```", page.read_text(encoding="utf-8"), re.DOTALL)
    commands = []
    for line in "\n".join(blocks).replace("\\\n", " ").splitlines():
        words = shlex.split(line, comments=True)
        if "hf-bahdanau" not in words:
            continue
        words = words[words.index("hf-bahdanau") + 1 :]
        cut = next((i for i, word in enumerate(words) if word in SHELL_OPERATORS), len(words))
        commands.append(words[:cut])
    return commands


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_every_command_a_page_shows_parses(page):
    """Each command names a real subcommand and options it takes (train's through its own parser; nothing runs)."""
    for command in _shown_commands(page):
        args, rest = build_parser().parse_known_args(command)
        if args.command in ("train", "distill"):  # distill takes train's options too
            parse_train_args(rest)
        else:
            assert rest == [], command
