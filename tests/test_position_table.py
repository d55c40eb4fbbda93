"""A Transformer's position table bounds its lengths: `generate()` by the generation config, and `train`,
`translate` and `evaluate` refuse longer lengths in one line before any work."""

import json

import pytest
import torch
from helpers import TINY_MODEL, TINY_RUN, make_model, random_ids

from hf_bahdanau.cli import main


def never_ending(model_type: str, **overrides):
    """A tiny model whose every step predicts token 5 (never </s>), so only the length limit ends generation."""
    model = make_model(model_type, **overrides)
    with torch.no_grad():
        model.lm_head.weight.zero_()
        model.lm_head.bias.fill_(-10.0)
        model.lm_head.bias[5] = 10.0
    return model


def test_generate_stays_within_the_position_table_by_its_generation_config():
    model = never_ending("d2l_transformer", max_position_embeddings=100)
    source = random_ids(2, 7)
    assert model.generation_config.max_new_tokens == 100  # the default 128, cut to the table
    assert model.generate(source[:1]).shape == (1, 101)  # the start token and 100 new ones: positions 0..99 read
    with pytest.raises(
        ValueError, match="the target reaches 101 tokens but the model's max_position_embeddings is 100"
    ):
        model.generate(source, max_new_tokens=500, num_beams=1)  # more than the table: refused in one line
    assert model.generate(source, max_new_tokens=30, num_beams=1).shape == (2, 31)  # a shorter ask: as asked

    rnn = never_ending("bahdanau")  # no position table: no bound
    assert rnn.generation_config.max_new_tokens == 128
    assert rnn.generate(source, max_new_tokens=150, num_beams=1).shape == (2, 151)


@pytest.mark.slow
def test_lengths_beyond_the_position_table_are_refused_before_any_work(tatoeba_tsv, tmp_path, caplog, capsys):
    output = tmp_path / "short"
    at = TINY_RUN.index("--generation_max_length")
    run = TINY_RUN[:at] + TINY_RUN[at + 2 :]  # the model's own generation length
    common = ["train", "--data", str(tatoeba_tsv), "--output-dir", str(output), *run, *TINY_MODEL["d2l_transformer"],
              "--max_position_embeddings", "32", "--max_steps", "5",
              "--eval_steps", "5", "--save_steps", "5"]  # fmt: skip
    for options, refused in (([], "--max_source_length 64"), (["--max_source_length", "32"], "--max_target_length 64")):
        assert main([*common, *options]) == 1
        message = caplog.records[-1].getMessage()
        assert message.startswith(f"{refused} is more than the model's position table holds") and "\n" not in message
    lengths = ["--max_source_length", "32", "--max_target_length", "32"]
    assert main([*common, *lengths, "--generation_max_length", "33"]) == 1
    assert caplog.records[-1].getMessage().startswith("--generation_max_length 33 is more than the model's position")
    assert not output.exists()  # refused before anything was written

    # With the lengths in the table the run evaluates (generation bounded by the table) and saves its model.
    assert main([*common, *lengths]) == 0
    assert json.loads((output / "generation_config.json").read_text())["max_new_tokens"] == 32
    state = json.loads((output / "trainer_state.json").read_text())
    assert any("eval_bleu" in entry for entry in state["log_history"])

    capsys.readouterr()
    assert main(["translate", "--model", str(output), "--max-new-tokens", "33", "Go."]) == 1
    message = caplog.records[-1].getMessage()
    assert message == (
        f"--max-new-tokens 33 is more than the model can generate: {output} has a position table of 32 tokens "
        "(max_position_embeddings); pass at most 32"
    )
    assert capsys.readouterr().out == ""
    assert main(["translate", "--model", str(output), "--max-new-tokens", "32", "--num-beams", "1", "Go."]) == 0
    assert main(["evaluate", "--model", str(output), "--max-new-tokens", "40", "--max-samples", "2"]) == 1
    assert caplog.records[-1].getMessage().startswith("--max-new-tokens 40 is more than the model can generate")
