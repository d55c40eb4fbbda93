"""Issue 24, second half: no silent wrong answers, long work that fails early or keeps its output, clear errors."""

import errno
import functools
import json
import logging
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from helpers import make_model, random_ids
from safetensors.torch import load_file
from test_cli import TINY_MODEL, TINY_RUN
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, Seq2SeqTrainingArguments, pipeline

from hf_bahdanau import TASK, TranslationPipeline
from hf_bahdanau.cli import main
from hf_bahdanau.cli.train import parse_train_args
from hf_bahdanau.training import run_folder
from hf_bahdanau.training import trainer as training
from hf_bahdanau.training.options import RunArguments


@pytest.fixture(scope="module")
def rnn_folder(tmp_path_factory, tatoeba_tsv):
    """A tiny RNN trained by `hf-bahdanau train` for 10 steps (no evaluation)."""
    output = tmp_path_factory.mktemp("hardening") / "rnn"
    status = main(
        ["train", "--data", str(tatoeba_tsv), "--output-dir", str(output), *TINY_RUN, *TINY_MODEL["bahdanau"],
         "--max_steps", "10", "--eval_strategy", "no", "--load_best_model_at_end", "false", "--save_steps", "10"]
    )  # fmt: skip
    assert status == 0
    return output


def copy_model(folder, destination):
    """A copy of a model folder without its checkpoints."""
    return shutil.copytree(folder, destination, ignore=shutil.ignore_patterns("checkpoint-*"))


# ---- 1. weights that do not fit the config ----------------------------------------------------------------


def test_a_folder_whose_config_names_another_model_type_is_refused(rnn_folder, tmp_path, caplog):
    relabelled = copy_model(rnn_folder, tmp_path / "relabelled")
    config_file = relabelled / "config.json"
    config = json.loads(config_file.read_text(encoding="utf-8"))
    config["model_type"] = "d2l_transformer"
    config_file.write_text(json.dumps(config), encoding="utf-8")

    assert main(["translate", "--model", str(relabelled), "Go."]) == 1
    message = caplog.records[-1].getMessage()
    assert "\n" not in message and f"the weights in {relabelled} do not fit" in message
    assert " missing (model.decoder." in message and " unexpected (model.decoder." in message
    assert "strict=False" in message

    with pytest.raises(ValueError, match=r"do not fit the model its config describes: \d+ missing"):
        AutoModelForSeq2SeqLM.from_pretrained(relabelled)
    model, info = AutoModelForSeq2SeqLM.from_pretrained(relabelled, strict=False, output_loading_info=True)
    assert info["missing_keys"] and info["unexpected_keys"]  # the escape loads it, and says what it did
    assert model.config.model_type == "d2l_transformer"


def test_a_missing_weight_is_named_and_tied_weights_are_not_missing(rnn_folder, tmp_path, tatoeba_tsv):
    from safetensors.torch import load_file, save_file

    cut = copy_model(rnn_folder, tmp_path / "cut")
    weights = load_file(cut / "model.safetensors")
    removed = sorted(weights)[0]
    del weights[removed]
    save_file(weights, cut / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ValueError, match=rf"1 missing \({removed}\)") as error:
        AutoModelForSeq2SeqLM.from_pretrained(cut, strict=True)  # as the command line loads a model to translate
    assert "unexpected" not in str(error.value)
    assert main(["translate", "--model", str(cut), "Go."]) == 1
    model, info = AutoModelForSeq2SeqLM.from_pretrained(cut, output_loading_info=True)  # transformers' contract
    assert info["missing_keys"] == {removed} or list(info["missing_keys"]) == [removed]

    tied = tmp_path / "tied"
    status = main(
        ["train", "--data", str(tatoeba_tsv), "--output-dir", str(tied), *TINY_RUN, *TINY_MODEL["bahdanau"],
         "--tie_word_embeddings", "true", "--max_steps", "5", "--eval_strategy", "no",
         "--load_best_model_at_end", "false"]
    )  # fmt: skip
    assert status == 0
    assert "lm_head.weight" not in load_file(tied / "model.safetensors")  # stored once, as the embedding
    model = AutoModelForSeq2SeqLM.from_pretrained(tied)
    assert model.lm_head.weight is model.model.decoder.embed_tokens.weight


# ---- 2. the pipeline checks the tokenizer's fingerprint ---------------------------------------------------


def swap_two_tokens(folder):
    """Give the folder's tokenizer another vocabulary of the same size (two ids swapped)."""
    tokenizer_file = folder / "tokenizer.json"
    tokenizer = json.loads(tokenizer_file.read_text(encoding="utf-8"))
    vocabulary = tokenizer["model"]["vocab"]
    first, second = [token for token, index in vocabulary.items() if index in (10, 11)]
    vocabulary[first], vocabulary[second] = vocabulary[second], vocabulary[first]
    tokenizer_file.write_text(json.dumps(tokenizer), encoding="utf-8")


def test_the_pipeline_refuses_a_tokenizer_of_another_model_unless_told(rnn_folder, tmp_path):
    foreign = copy_model(rnn_folder, tmp_path / "foreign")
    swap_two_tokens(foreign)
    model = AutoModelForSeq2SeqLM.from_pretrained(rnn_folder)
    tokenizer = AutoTokenizer.from_pretrained(foreign)
    assert len(tokenizer) == model.config.vocab_size  # the same size: only the fingerprint tells them apart
    with pytest.raises(ValueError, match="the tokenizer belongs to another model.*check_tokenizer=False"):
        TranslationPipeline(model=model, tokenizer=tokenizer)
    assert TranslationPipeline(model=model, tokenizer=tokenizer, check_tokenizer=False)("Go.")[0]["translation_text"]
    with pytest.raises(ValueError, match="the tokenizer belongs to another model"):
        pipeline(TASK, model=foreign)  # the folder's own model and tokenizer, loaded together
    assert pipeline(TASK, model=foreign, check_tokenizer=False)("Go.")[0]["translation_text"]
    own = AutoTokenizer.from_pretrained(rnn_folder)
    assert TranslationPipeline(model=model, tokenizer=own)("Go.")[0]["translation_text"]


def test_the_tokenizer_check_has_one_copy_in_the_pipeline_module():
    from hf_bahdanau.decoding import loading
    from hf_bahdanau.models import pipelines
    from hf_bahdanau.training import trainer as training

    assert training.check_tokenizer_matches is pipelines.check_tokenizer_matches
    assert "def check_tokenizer_matches" not in Path(training.__file__).read_text(encoding="utf-8")
    assert "from hf_bahdanau.models.pipelines import check_tokenizer_matches" in Path(loading.__file__).read_text(
        encoding="utf-8"
    )


# ---- 4. generation no longer than the position table ------------------------------------------------------


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


# ---- 5. translate writes each batch as it is done ---------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("signal_number", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_translate_keeps_the_batches_it_wrote(signal_number, rnn_folder, tmp_path, capsys):
    words = ["Go", "I lost", "Tom is home", "We run", "She laughs", "Come here", "It rains", "They won"]
    lines = [f"{words[i % 8]} {i}." for i in range(5000)]
    source, translated, log = tmp_path / "source.txt", tmp_path / "translated.txt", tmp_path / "stderr.txt"
    source.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    command = [sys.executable, "-m", "hf_bahdanau.cli", "translate", "--model", str(rnn_folder), "--num-beams", "1",
               "--batch-size", "8", "--max-new-tokens", "20"]  # fmt: skip
    with source.open("rb") as stdin, translated.open("wb") as stdout, log.open("wb") as stderr:
        # SIGINT as a terminal's Ctrl-C, also where the test runs as a background job (which ignores SIGINT)
        restore = functools.partial(signal.signal, signal.SIGINT, signal.SIG_DFL)
        process = subprocess.Popen(command, stdin=stdin, stdout=stdout, stderr=stderr, preexec_fn=restore)
    try:
        deadline = time.time() + 300
        while translated.stat().st_size == 0:  # the first batch is written as soon as it is done
            assert process.poll() is None and time.time() < deadline, log.read_text()[-2000:]
            time.sleep(0.02)
        process.send_signal(signal_number)
        process.wait(timeout=120)
    finally:
        process.kill()
    written = translated.read_text(encoding="utf-8").splitlines()
    assert process.returncode == 130 and 0 < len(written) < 5000 and len(written) % 8 == 0
    last = log.read_text(encoding="utf-8").strip().splitlines()[-1]
    assert f"ERROR hf_bahdanau: interrupted: wrote {len(written)} translations of the " in last
    # in order: the translations of the first lines, as an uninterrupted run gives them
    capsys.readouterr()
    assert main(["translate", "--model", str(rnn_folder), "--num-beams", "1", "--batch-size", "8",
                 "--max-new-tokens", "20", *lines[: min(len(written), 40)]]) == 0  # fmt: skip
    assert capsys.readouterr().out.splitlines() == written[:40]


# ---- 6. clear errors, not tracebacks ----------------------------------------------------------------------


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


@pytest.mark.slow
def test_resume_skips_a_checkpoint_whose_optimizer_state_is_corrupt(tatoeba_tsv, tmp_path, caplog):
    caplog.set_level(logging.INFO)
    output = tmp_path / "run"
    common = ["train", "--data", str(tatoeba_tsv), "--output-dir", str(output), *TINY_RUN, *TINY_MODEL["bahdanau"],
              "--eval_strategy", "no", "--load_best_model_at_end", "false", "--save_steps", "5"]  # fmt: skip
    assert main([*common, "--max_steps", "10"]) == 0
    newest = output / "checkpoint-10" / "optimizer.pt"
    size = newest.stat().st_size
    newest.write_bytes(b"\0" * size)  # the size its manifest lists: only reading it tells
    assert run_folder.is_complete_checkpoint(newest.parent)
    assert main([*common, "--max_steps", "15", "--resume"]) == 0
    messages = [record.getMessage() for record in caplog.records]
    assert any(m.startswith(f"skipping {newest.parent}: it is corrupt, optimizer.pt cannot be read") for m in messages)
    assert f"resuming from {output / 'checkpoint-5'}" in messages
    assert json.loads((output / "trainer_state.json").read_text())["global_step"] == 15

    for checkpoint in output.glob("checkpoint-*"):
        (checkpoint / "scheduler.pt").write_bytes(b"garbage")
        (checkpoint / run_folder.CHECKPOINT_MANIFEST).unlink()  # from before manifests: read, not measured
    assert main([*common, "--max_steps", "20", "--resume"]) == 1
    assert caplog.records[-1].getMessage() == f"--resume: no complete checkpoint-* folder in {output} to resume from"


def tree_digest(folder):
    return {path.relative_to(folder): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}


@pytest.mark.slow
@pytest.mark.parametrize(
    "error",
    [
        OSError(errno.ENOSPC, "No space left on device"),
        RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598"),  # torch's, disk full
    ],
)
def test_a_full_disk_while_checkpointing_is_one_line_and_keeps_the_old_run(
    error, rnn_folder, tatoeba_tsv, tmp_path, monkeypatch, caplog
):
    output = copy_model(rnn_folder, tmp_path / "run")
    before = tree_digest(output)
    save = torch.save

    def full_disk(obj, path, *args, **kwargs):
        if str(path).endswith("optimizer.pt"):
            Path(path).write_bytes(b"partial")
            raise error
        return save(obj, path, *args, **kwargs)

    monkeypatch.setattr(torch, "save", full_disk)
    status = main(
        ["train", "--data", str(tatoeba_tsv), "--output-dir", str(output), *TINY_RUN, *TINY_MODEL["bahdanau"],
         "--eval_strategy", "no", "--load_best_model_at_end", "false", "--max_steps", "10", "--save_steps", "5",
         "--overwrite"]
    )  # fmt: skip
    assert status == 1
    message = caplog.records[-1].getMessage()
    checkpoint = run_folder.staging_dir(output) / "checkpoint-5"
    reason = "No space left on device" if isinstance(error, OSError) else str(error)
    assert message.startswith(f"could not write {checkpoint} ({reason}, ") and "\n" not in message
    assert message.endswith("MB free there); the earlier checkpoints, and any run it replaces, are intact: free disk "
                            "space and continue with --resume")  # fmt: skip
    assert not checkpoint.exists()  # its space freed
    assert tree_digest(output) == before  # the old run untouched


def test_an_int8_model_refuses_to_train(rnn_folder, tmp_path):
    model = AutoModelForSeq2SeqLM.from_pretrained(rnn_folder, quantize="int8")
    assert model.quantization == "int8"
    ids = random_ids(2, 5)
    model.generate(ids, max_new_tokens=3)  # what it is for
    assert model(input_ids=ids, labels=ids).loss is not None  # in eval mode a loss is a score
    model.train()
    with pytest.raises(ValueError, match="quantized to int8 for inference and cannot be trained: train the fp32"):
        model(input_ids=ids, labels=ids)
    args = Seq2SeqTrainingArguments(str(tmp_path / "never"), report_to="none")
    with pytest.raises(ValueError, match="quantized to int8 for inference and cannot be trained"):
        training.build_trainer(model, None, None, args, RunArguments())
    assert not (tmp_path / "never").exists()


# ---- 7. messages that name the missing file or path -------------------------------------------------------


@pytest.mark.parametrize("deleted", ["tokenizer.json", "tokenizer_config.json"])
def test_a_deleted_tokenizer_file_is_named(deleted, rnn_folder, tmp_path, caplog):
    folder = copy_model(rnn_folder, tmp_path / "model")
    (folder / deleted).unlink()
    assert main(["translate", "--model", str(folder), "Go."]) == 1
    message = caplog.records[-1].getMessage()
    assert (
        message.startswith(f"the model folder {folder} has no tokenizer: {deleted} missing (") and "\n" not in message
    )
    assert "sentencepiece" not in message and "does not belong" not in message


def test_a_tokenizer_path_that_does_not_exist_is_not_found_not_a_bad_repo_id(rnn_folder, tatoeba_tsv, tmp_path, caplog):
    common = ["train", "--data", str(tatoeba_tsv), "--src-lang", "en", "--tgt-lang", "fr", "--max_train_samples", "50",
              "--max_steps", "1"]  # fmt: skip
    missing = tmp_path / "nonexist"
    for location in (str(missing), "./nonexist/", "~/nonexist-tokenizer"):
        assert main([*common, "--output-dir", str(tmp_path / "run"), "--tokenizer_name_or_path", location]) == 1
        assert caplog.records[-1].getMessage() == f"--tokenizer_name_or_path {location} not found"
    no_settings = copy_model(rnn_folder, tmp_path / "no_settings")
    (no_settings / "tokenizer_config.json").unlink()
    assert main([*common, "--output-dir", str(tmp_path / "run"), "--tokenizer_name_or_path", str(no_settings)]) == 1
    message = caplog.records[-1].getMessage()
    assert message.startswith(f"--tokenizer_name_or_path {no_settings} has no tokenizer: tokenizer_config.json missing")
    assert not (tmp_path / "run").exists()


# ---- 3. a resumed RNN run ends with the weights of an uninterrupted one -----------------------------------


def test_a_loaded_model_has_aligned_weights_and_computes_the_gradients_of_the_saved_one(tmp_path):
    model = make_model("bahdanau", width=32, vocab_size=400, dropout=0.3, encoder_layers=2, decoder_layers=2)
    model.save_pretrained(tmp_path / "saved")
    loaded = AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "saved")
    training.realign_weights(loaded)  # as training does with a model it continues
    # CPU math libraries round differently on operands that do not start on a 64-byte boundary
    assert {tensor.data_ptr() % 64 for tensor in (*loaded.parameters(), *loaded.buffers())} == {0}
    source, labels = random_ids(32, 12, vocab=400), random_ids(32, 17, seed=1, vocab=400)

    def gradients(net):
        net.train()
        torch.manual_seed(0)  # the same dropout masks
        net(input_ids=source, labels=labels).loss.backward()
        return [parameter.grad for parameter in net.parameters()]

    assert all(torch.equal(a, b) for a, b in zip(gradients(model), gradients(loaded), strict=True))


@pytest.mark.slow
def test_a_resumed_rnn_run_ends_bit_for_bit_with_the_weights_of_an_uninterrupted_one(tatoeba_tsv, tmp_path):
    """With dropout, a resumed run's first step used to differ by 1 ulp: its model came from `from_pretrained`,
    whose weights were not 64-byte aligned (see `training.realign_weights`)."""
    common = ["train", "--data", str(tatoeba_tsv), *TINY_RUN, *TINY_MODEL["bahdanau"], "--seed", "3",
              "--lr_scheduler_type", "constant", "--eval_strategy", "no", "--load_best_model_at_end", "false",
              "--save_steps", "3", "--logging_steps", "3", "--dropout", "0.3", "--encoder_layers", "2",
              "--decoder_layers", "2"]  # fmt: skip
    uninterrupted, resumed = tmp_path / "uninterrupted", tmp_path / "resumed"
    assert main([*common, "--output-dir", str(uninterrupted), "--max_steps", "6"]) == 0
    assert main([*common, "--output-dir", str(resumed), "--max_steps", "3"]) == 0  # as if stopped after step 3
    assert main([*common, "--output-dir", str(resumed), "--max_steps", "6", "--resume"]) == 0
    expected, got = load_file(uninterrupted / "model.safetensors"), load_file(resumed / "model.safetensors")
    assert expected.keys() == got.keys()
    assert [name for name in expected if not torch.equal(expected[name], got[name])] == []
