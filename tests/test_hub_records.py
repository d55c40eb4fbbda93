"""The records a model folder keeps (`eval_results.json`, `training_command.json`) and a --config file: unreadable
or malformed ones give a one-line error naming the file, not a traceback."""

from __future__ import annotations

import json
import re
import sys

import pytest

from hf_bahdanau.cli import main
from hf_bahdanau.publishing.card import CARD_MARKER, is_generated_card
from hf_bahdanau.publishing.evaluations import EVAL_RESULTS_FILE, read_evaluations
from hf_bahdanau.publishing.recorded_command import COMMAND_FILE, read_command

MALFORMED = ['{"results": [{"dataset": "x"}]}', '{"results": 3}', "[1]", "{", "[" * 100_000]


@pytest.mark.parametrize("text", MALFORMED, ids=["a field missing", "no list", "no object", "cut off", "nested"])
def test_a_malformed_evaluation_record_is_named(text, tmp_path):
    (tmp_path / EVAL_RESULTS_FILE).write_text(text)
    with pytest.raises(ValueError, match=re.escape(str(tmp_path / EVAL_RESULTS_FILE)) + ".*: fix or remove it"):
        read_evaluations(tmp_path)


@pytest.mark.parametrize("record", [{"command": 3}, {"command": "train", "config_file": "x"}, [1]])
def test_a_malformed_training_command_record_is_named(record, tmp_path):
    (tmp_path / COMMAND_FILE).write_text(json.dumps(record))
    with pytest.raises(ValueError, match=re.escape(str(tmp_path / COMMAND_FILE)) + ".*: fix or remove it"):
        read_command(tmp_path)


@pytest.mark.parametrize("suffix", [".json", ".yaml"])
def test_a_config_file_nested_too_deeply_is_one_line(suffix, tmp_path, caplog):
    config = tmp_path / f"run{suffix}"
    # PyYAML composes in Python, more than one frame a level: as many levels as Python's default recursion limit
    # (1000), under that limit, are too deep (a limit that a library raised would let it take seconds, each level
    # more making it slower); json reads in C, its depth checked against the C stack: 100,000 levels
    config.write_text("[" * (100_000 if suffix == ".json" else 1000))
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(1000)
    try:
        assert main(["train", "--config", str(config), "--output-dir", str(tmp_path / "run")]) == 1
    finally:
        sys.setrecursionlimit(limit)
    assert f"config file {config}: nested too deeply to read" in caplog.records[-1].getMessage()


def test_only_a_card_publish_wrote_counts_as_generated(tmp_path):
    card = tmp_path / "README.md"
    card.write_text(f"---\nlicense: mit\n---\n{CARD_MARKER}: ... -->\n\n# Model\n")
    assert is_generated_card(card)
    card.write_text(f"---\nlicense: mit\n---\n# My model\n\nI removed the line `{CARD_MARKER} ...` to keep this.\n")
    assert not is_generated_card(card)
    card.write_text(f"# My model\n\n{CARD_MARKER} is what publish writes; this card is mine.\n")
    assert not is_generated_card(card)
