"""Loading a model folder, each problem a one-line error naming it: weights that do not fit the config, a missing
weight (tied weights are not missing), a tokenizer of another model, a missing tokenizer file or path, and an int8
model asked to train."""

import json
from pathlib import Path

import pytest
from helpers import TINY_MODEL, TINY_RUN, copy_model, random_ids, swap_two_tokens
from safetensors.torch import load_file
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, Seq2SeqTrainingArguments, pipeline

from hf_bahdanau import TASK, TranslationPipeline
from hf_bahdanau.cli import main
from hf_bahdanau.decoding.checkpoint import load_checkpoint
from hf_bahdanau.training.options import RunArguments
from hf_bahdanau.training.trainer import build_trainer


@pytest.mark.slow  # a copy of the session's trained model (conftest's rnn_folder)
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

    with pytest.raises(ValueError, match=r"do not fit the model its config describes: \d+ missing"):
        load_checkpoint(relabelled)
    model, info = AutoModelForSeq2SeqLM.from_pretrained(relabelled, output_loading_info=True)
    assert info["missing_keys"] and info["unexpected_keys"]  # transformers' contract: it loads, and says what it did
    assert model.config.model_type == "d2l_transformer"


@pytest.mark.slow  # trains a tied model
def test_a_missing_weight_is_named_and_tied_weights_are_not_missing(rnn_folder, tmp_path, tatoeba_tsv):
    from safetensors.torch import save_file

    cut = copy_model(rnn_folder, tmp_path / "cut")
    weights = load_file(cut / "model.safetensors")
    removed = sorted(weights)[0]
    del weights[removed]
    save_file(weights, cut / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ValueError, match=rf"1 missing \({removed}\)") as error:
        load_checkpoint(cut)  # as the command line loads a model to translate
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


@pytest.mark.slow  # a copy of the session's trained model (conftest's rnn_folder)
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
    from hf_bahdanau.models import pipelines
    from hf_bahdanau.training import assembly

    assert assembly.check_tokenizer_matches is pipelines.check_tokenizer_matches
    assert "def check_tokenizer_matches" not in Path(assembly.__file__).read_text(encoding="utf-8")
    package = Path(pipelines.__file__).parents[1]
    defining = [
        path.relative_to(package).as_posix()
        for path in sorted(package.rglob("*.py"))
        if "def check_tokenizer_matches" in path.read_text(encoding="utf-8")
    ]
    assert defining == ["models/pipelines.py"]  # the command line and training use this one


@pytest.mark.slow  # a copy of the session's trained model (conftest's rnn_folder)
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


@pytest.mark.slow  # a copy of the session's trained model (conftest's rnn_folder)
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


@pytest.mark.slow  # the session's trained model (conftest's rnn_folder)
def test_an_int8_model_refuses_to_train(rnn_folder, tmp_path):
    model = load_checkpoint(rnn_folder, quantize="int8")
    assert model.quantization == "int8"
    ids = random_ids(2, 5)
    model.generate(ids, max_new_tokens=3)  # what it is for
    assert model(input_ids=ids, labels=ids).loss is not None  # in eval mode a loss is a score
    model.train()
    with pytest.raises(ValueError, match="quantized to int8 for inference and cannot be trained: train the fp32"):
        model(input_ids=ids, labels=ids)
    args = Seq2SeqTrainingArguments(str(tmp_path / "never"), report_to="none")
    with pytest.raises(ValueError, match="quantized to int8 for inference and cannot be trained"):
        build_trainer(model, None, None, args, RunArguments())
    assert not (tmp_path / "never").exists()
