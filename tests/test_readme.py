"""README.md's commands: the test command is the one CI runs, and the first command's files exist."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _bash_blocks() -> list[str]:
    return re.findall(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(encoding="utf-8"), re.DOTALL)


def test_the_readme_test_command_is_what_ci_runs():
    test_command = _bash_blocks()[1].strip()
    assert "pytest" in test_command and "torch==" in test_command  # a torch pin that the CPU build satisfies
    assert (ROOT / ".ci" / "run").read_text(encoding="utf-8").strip().splitlines()[-1] == test_command


def test_the_readme_says_how_to_get_the_cpu_only_torch():
    assert "pip install torch --index-url https://download.pytorch.org/whl/cpu" in _bash_blocks()[0]


def test_the_first_command_uses_the_quick_recipe():
    first = _bash_blocks()[0]
    config = re.search(r"--config (\S+)", first).group(1)
    assert config == "scripts/multi30k/quick-de-en.yaml" and (ROOT / config).is_file()
