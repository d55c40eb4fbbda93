"""`train --config FILE`: a value of the wrong type is a one-line error naming the file, values of the right type
pass, and whole floats become integers."""

import pytest

from hf_bahdanau.cli import main
from hf_bahdanau.cli.train import parse_train_args


@pytest.mark.parametrize(
    "text, error",
    [
        ("hidden_size: 32.7", "hidden_size must be an integer, got 32.7"),
        ("seed: 1.5", "seed must be an integer, got 1.5"),
        ("overwrite: 1", "overwrite must be true or false, got 1"),
        ("dropout: true", "dropout must be a number, got True"),
        ('{"max_steps": [5]}', "max_steps must be an integer, got [5]"),
    ],
)
def test_a_config_value_of_the_wrong_type_is_a_one_line_error(text, error, tmp_path, caplog):
    config = tmp_path / ("config.json" if text.startswith("{") else "config.yaml")
    config.write_text(text, encoding="utf-8")
    output = tmp_path / "run"
    assert main(["train", "--config", str(config), "--output-dir", str(output), "--data", "x"]) == 1
    assert caplog.records[-1].getMessage() == f"config file {config}: {error}"
    assert not output.exists()


def test_config_values_of_the_right_type_pass_and_whole_floats_become_integers(tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text("seed: 7.0\nlearning_rate: 1\neval_steps: 0.5\nhidden_size: 32\nd2l_normalize: true\n")
    model_args, _, data_args, training_args, _ = parse_train_args(["--config", str(config), "--output-dir", "x"])
    assert training_args.seed == 7 and type(training_args.seed) is int
    assert training_args.learning_rate == 1.0 and training_args.eval_steps == 0.5
    assert model_args.hidden_size == 32 and data_args.d2l_normalize is True
