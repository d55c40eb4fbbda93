"""Checkpoint averaging: `average_checkpoints` alone, and `train --average_checkpoints N`."""

import json
from types import SimpleNamespace

import pytest
import torch
from helpers import make_model
from safetensors.torch import load_file, save_file
from transformers import TrainingArguments

from hf_bahdanau import average_checkpoints
from hf_bahdanau.cli import main
from hf_bahdanau.training.averaging import (
    average_last_checkpoints,
    average_state_dicts,
    check_averaging,
    last_checkpoints,
)


def test_two_known_state_dicts_average_to_their_exact_mean():
    first = {
        "weight": torch.tensor([[1.0, 2.0], [3.0, -4.0]]),
        "half": torch.tensor([0.5, 1.5], dtype=torch.float16),
        "steps": torch.tensor(3),  # an integer buffer: fairseq's floor of the mean
        "counts": torch.tensor([5, -6], dtype=torch.int32),
        "mask": torch.tensor([True, False]),
    }
    second = {
        "weight": torch.tensor([[3.0, 2.0], [0.0, 4.0]]),
        "half": torch.tensor([1.5, 2.5], dtype=torch.float16),
        "steps": torch.tensor(4),
        "counts": torch.tensor([6, -6], dtype=torch.int32),
        "mask": torch.tensor([True, False]),
    }
    averaged = average_state_dicts([first, second])
    assert torch.equal(averaged["weight"], torch.tensor([[2.0, 2.0], [1.5, 0.0]]))
    assert torch.equal(averaged["half"], torch.tensor([1.0, 2.0], dtype=torch.float16))
    assert averaged["steps"].dtype == torch.int64 and averaged["steps"].item() == 3
    assert torch.equal(averaged["counts"], torch.tensor([5, -6], dtype=torch.int32))
    assert torch.equal(averaged["mask"], first["mask"])
    assert averaged["weight"] is not first["weight"] and torch.equal(first["weight"][0], torch.tensor([1.0, 2.0]))
    with pytest.raises(ValueError, match="boolean weight mask differs"):
        average_state_dicts([first, {**second, "mask": torch.tensor([False, False])}])
    with pytest.raises(ValueError, match=r"weight weight differs in state dict 1: \(3,\)"):
        average_state_dicts([first, {**second, "weight": torch.zeros(3)}])
    with pytest.raises(ValueError, match="other weights than the first: steps"):
        average_state_dicts([first, {k: v for k, v in second.items() if k != "steps"}])
    with pytest.raises(ValueError, match="nothing to average"):
        average_checkpoints([])


def test_tied_weights_stay_tied():
    model = make_model("bahdanau", tie_word_embeddings=True)
    other = make_model("bahdanau", seed=1, tie_word_embeddings=True)
    embedding = "lm_head.weight"
    states = [model.state_dict(), other.state_dict()]
    pointer = states[0][embedding].data_ptr()
    tied_to = next(name for name, t in states[0].items() if name != embedding and t.data_ptr() == pointer)
    averaged = average_state_dicts(states)
    assert averaged[embedding] is averaged[tied_to]  # one tensor, as in the model
    assert torch.equal(averaged[embedding], (states[0][embedding] + states[1][embedding]) / 2)


def test_checkpoint_folders_average_into_a_tied_model(tmp_path):
    models = [make_model("bahdanau", seed=seed, tie_word_embeddings=True) for seed in (0, 1, 2)]
    for step, model in zip((100, 200, 300), models, strict=True):
        model.save_pretrained(tmp_path / f"checkpoint-{step}")
        (tmp_path / f"checkpoint-{step}" / "trainer_state.json").write_text("{}", encoding="utf-8")
    (tmp_path / "checkpoint-400").mkdir()  # no weights: not a checkpoint to average
    assert [folder.name for folder in last_checkpoints(tmp_path, 2)] == ["checkpoint-200", "checkpoint-300"]
    averaged = average_checkpoints(last_checkpoints(tmp_path, 2))
    stored = [load_file(tmp_path / f"checkpoint-{step}" / "model.safetensors") for step in (200, 300)]
    assert set(averaged) == set(stored[0]) and "lm_head.weight" not in averaged  # stored once, as the embedding
    for name, tensor in averaged.items():
        assert torch.equal(tensor, (stored[0][name] + stored[1][name]) / 2), name
    target = make_model("bahdanau", seed=5, tie_word_embeddings=True)
    assert target.load_state_dict(averaged, strict=False).missing_keys == ["lm_head.weight"]
    assert target.lm_head.weight is target.get_input_embeddings().weight  # still tied
    # A safetensors file averages like its folder.
    save_file(stored[0], tmp_path / "a.safetensors")
    assert all(torch.equal(averaged[name], t) for name, t in average_checkpoints(
        [tmp_path / "a.safetensors", tmp_path / "checkpoint-300"]).items())  # fmt: skip
    with pytest.raises(FileNotFoundError, match="checkpoint-400 holds no safetensors weights"):
        average_checkpoints([tmp_path / "checkpoint-400"])


TINY = [
    "--src-lang", "en", "--tgt-lang", "fr", "--max_train_samples", "64", "--max_eval_samples", "8",
    "--vocab_size", "200", "--embedding_size", "16", "--hidden_size", "16", "--dropout", "0.0",
    "--per_device_train_batch_size", "16", "--learning_rate", "0.01", "--warmup_steps", "0",
    "--eval_strategy", "no", "--load_best_model_at_end", "false", "--logging_steps", "2",
]  # fmt: skip


def test_a_checkpoint_with_flat_keys_averages_with_one_with_nested_keys(tmp_path):
    # A resumed run whose checkpoint-100 holds flat keys (`encoder.*`) and checkpoint-200 nested ones
    # (`model.encoder.*`): --average_checkpoints averages them into the model that trains.
    models = [make_model("bahdanau", seed=seed) for seed in (0, 1)]
    for step, model in zip((100, 200), models, strict=True):
        model.save_pretrained(tmp_path / f"checkpoint-{step}")
        (tmp_path / f"checkpoint-{step}" / "trainer_state.json").write_text("{}", encoding="utf-8")
    old_file = tmp_path / "checkpoint-100" / "model.safetensors"
    new = load_file(tmp_path / "checkpoint-200" / "model.safetensors")
    old = {name.removeprefix("model."): tensor for name, tensor in load_file(old_file).items()}
    assert any(name.startswith("encoder.") for name in old) and not any(name.startswith("model.") for name in old)
    save_file(old, old_file)
    target = make_model("bahdanau", seed=5)
    trainer = SimpleNamespace(model=target, args=SimpleNamespace(output_dir=str(tmp_path)))
    assert [folder.name for folder in average_last_checkpoints(trainer, 2)] == ["checkpoint-100", "checkpoint-200"]
    averaged = target.state_dict()
    assert set(new) <= set(averaged)
    for name, tensor in new.items():  # each weight the mean of its old-named and new-named copy
        old_name = name.removeprefix("model.")
        assert torch.equal(averaged[name], ((old[old_name].double() + tensor.double()) / 2).float()), name
    assert not torch.equal(old["encoder.embed_tokens.weight"], new["model.encoder.embed_tokens.weight"])


@pytest.mark.slow
def test_train_writes_the_mean_of_the_last_checkpoints_as_the_model(tatoeba_tsv, tmp_path):
    output = tmp_path / "run"
    argv = ["train", "--data", str(tatoeba_tsv), "--output-dir", str(output), *TINY, "--max_steps", "8",
            "--save_steps", "2", "--average_checkpoints", "3"]  # fmt: skip
    assert main(argv) == 0
    assert sorted(folder.name for folder in output.glob("checkpoint-*")) == ["checkpoint-4", "checkpoint-6",
                                                                              "checkpoint-8"]  # fmt: skip
    final = load_file(output / "model.safetensors")
    stored = [load_file(output / f"checkpoint-{step}" / "model.safetensors") for step in (4, 6, 8)]
    assert set(final) == set(stored[0])
    for name, tensor in final.items():  # the mean as average_state_dicts takes it: in float64, then float32
        assert torch.equal(tensor, (sum(state[name].double() for state in stored) / 3).float()), name
    assert not torch.equal(stored[0]["lm_head.weight"], stored[2]["lm_head.weight"])  # different checkpoints
    assert json.loads((output / "trainer_state.json").read_text(encoding="utf-8"))["global_step"] == 8


def test_averaging_keeps_enough_checkpoints_and_bad_counts_are_one_line_errors(tatoeba_tsv, tmp_path, caplog):
    args = TrainingArguments(str(tmp_path), save_total_limit=2, load_best_model_at_end=False)
    check_averaging(3, args)
    assert args.save_total_limit == 3
    args = TrainingArguments(str(tmp_path), save_total_limit=2, load_best_model_at_end=True, eval_strategy="steps")
    check_averaging(3, args)
    assert args.save_total_limit == 4  # the best checkpoint is kept besides the last three
    check_averaging(0, args)
    with pytest.raises(ValueError, match="needs checkpoints: --save_strategy is 'no'"):
        check_averaging(2, TrainingArguments(str(tmp_path), save_strategy="no"))
    argv = ["train", "--data", str(tatoeba_tsv), "--output-dir", str(tmp_path / "run"), *TINY, "--max_steps", "6",
            "--average_checkpoints", "-1"]  # fmt: skip
    assert main(argv) == 1
    assert "--average_checkpoints must be 0 (off) or a number of checkpoints, got -1" in caplog.text
    assert not (tmp_path / "run").exists()


def test_averaging_more_checkpoints_than_the_run_saves_fails_before_training(tmp_path):
    with pytest.raises(ValueError, match="--average_checkpoints 3: the run saves only 2 checkpoint"):
        check_averaging(3, TrainingArguments(str(tmp_path), max_steps=10, save_steps=5))
    check_averaging(3, TrainingArguments(str(tmp_path), max_steps=11, save_steps=5))  # steps 5, 10 and the last, 11
    check_averaging(3, TrainingArguments(str(tmp_path), num_train_epochs=1, save_steps=5))  # not known: checked after
