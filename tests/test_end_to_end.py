"""The whole package on whichever transformers is installed, both model types: train a tiny model, resume it,
evaluate, translate with beam 5, the pipeline, one server request, a tiny distill and publish --dry-run.

CI also runs this file alone on the oldest transformers release `pyproject.toml` allows, in an environment of its own
(`.ci/run`); docs/compatibility.md says which release that is. `-m end_to_end` selects these tests."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import torch
from helpers import MODEL_TYPES, TINY_MODEL, numbered_sentence, numbers_corpus
from safetensors.torch import load_file

from hf_bahdanau.cli import main
from hf_bahdanau.publishing.evaluations import read_evaluations

pytestmark = [pytest.mark.end_to_end, pytest.mark.slow]

SENTENCES = [numbered_sentence(n) for n in (12, 345, 7)]
BEAMS, NEW_TOKENS = 5, 10


def train_argv(corpus: Path, output: Path, model_type: str, steps: int, *extra: str) -> list[str]:
    """A tiny `train` on the numbers corpus: one layer 32 wide, `steps` steps of 16 pairs at a learning rate low enough
    that each sentence still gets its own translation, evaluated (beam 5) and saved every 2 steps."""
    return ["train", "--data", str(corpus), "--output-dir", str(output), "--src-lang", "en", "--tgt-lang", "fr",
            "--test_split", "test", "--vocab_size", "120", *TINY_MODEL[model_type], "--encoder_layers", "1",
            "--decoder_layers", "1", "--dropout", "0.0", "--per_device_train_batch_size", "16",
            "--per_device_eval_batch_size", "8", "--max_eval_samples", "8", "--learning_rate", "0.001",
            "--warmup_steps", "0", "--lr_scheduler_type", "constant", "--logging_steps", "1", "--seed", "5",
            "--max_steps", str(steps), "--save_steps", "2", "--eval_steps", "2", "--load_best_model_at_end", "false",
            "--generation_num_beams", str(BEAMS), "--generation_max_length", str(NEW_TOKENS), *extra]  # fmt: skip


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return numbers_corpus(tmp_path_factory.mktemp("numbers") / "corpus")


@pytest.fixture(scope="module", params=MODEL_TYPES)
def trained(request: pytest.FixtureRequest, corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A model of each type trained 4 steps."""
    folder = tmp_path_factory.mktemp(request.param) / "model"
    assert main(train_argv(corpus, folder, request.param, 4)) == 0
    return folder


def test_train_evaluates_with_generate_and_saves_every_two_steps(trained):
    history = json.loads((trained / "trainer_state.json").read_text(encoding="utf-8"))["log_history"]
    assert [entry["step"] for entry in history if "eval_bleu" in entry] == [2, 4]
    assert all(entry["loss"] > 0 for entry in history if "loss" in entry)
    assert sorted(path.name for path in trained.glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-4"]


def test_a_resumed_run_ends_with_the_weights_of_an_uninterrupted_one(trained, corpus, tmp_path, caplog):
    caplog.set_level(logging.INFO)
    model_type = json.loads((trained / "config.json").read_text(encoding="utf-8"))["model_type"]
    folder = tmp_path / "resumed"
    assert main(train_argv(corpus, folder, model_type, 2)) == 0
    assert main(train_argv(corpus, folder, model_type, 4, "--resume")) == 0
    messages = [record.getMessage() for record in caplog.records]
    assert f"resuming from {folder / 'checkpoint-2'}" in messages
    assert json.loads((folder / "trainer_state.json").read_text(encoding="utf-8"))["global_step"] == 4
    expected, resumed = load_file(trained / "model.safetensors"), load_file(folder / "model.safetensors")
    assert expected.keys() == resumed.keys()
    for name, tensor in expected.items():
        torch.testing.assert_close(resumed[name], tensor, rtol=1e-4, atol=1e-5)


def test_evaluate_scores_the_test_split(trained):
    assert main(["evaluate", "--model", str(trained), "--num-beams", str(BEAMS), "--max-new-tokens", "10"]) == 0
    scores = read_evaluations(trained)[-1]
    assert scores["split"] == "test" and 0 <= scores["bleu"] <= 100 and 0 <= scores["chrf"] <= 100


def generated(folder: Path) -> list[str]:
    """`SENTENCES` translated by transformers' `generate()` with beam 5: the reference of every front end."""
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    model, tokenizer = AutoModelForSeq2SeqLM.from_pretrained(folder).eval(), AutoTokenizer.from_pretrained(folder)
    with torch.no_grad():
        ids = model.generate(**tokenizer(SENTENCES, padding=True, return_tensors="pt"), num_beams=BEAMS,
                             do_sample=False, max_new_tokens=NEW_TOKENS)  # fmt: skip
    return tokenizer.batch_decode(ids, skip_special_tokens=True)


def test_translate_with_beam_5_gives_generates_translations(trained, capsys):
    capsys.readouterr()
    argv = ["translate", "--model", str(trained), "--num-beams", str(BEAMS), "--max-new-tokens", str(NEW_TOKENS)]
    assert main([*argv, *SENTENCES]) == 0
    assert capsys.readouterr().out.splitlines() == generated(trained)


def test_the_pipeline_of_the_saved_folder_translates_as_generate(trained):
    from transformers import pipeline

    translate = pipeline("translation", model=str(trained), trust_remote_code=True, num_beams=BEAMS,
                         max_new_tokens=NEW_TOKENS)  # fmt: skip
    assert [row["translation_text"] for row in translate(SENTENCES)] == generated(trained)


def test_the_server_answers_a_request_as_generate(trained):
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from hf_bahdanau.serving.app import Settings, build_app
    from hf_bahdanau.serving.model import Decoding

    settings = Settings(models=(str(trained),), decoding=Decoding(num_beams=BEAMS, max_new_tokens=NEW_TOKENS))
    with TestClient(build_app(settings)) as client:
        response = client.post("/translate", json={"q": SENTENCES, "source": "en", "target": "fr"})
    assert response.status_code == 200, response.text
    assert response.json()["translatedText"] == generated(trained)


def test_distill_trains_a_student_on_the_teachers_translations(trained, tmp_path):
    model_type = json.loads((trained / "config.json").read_text(encoding="utf-8"))["model_type"]
    student = tmp_path / "student"
    argv = ["distill", "--teacher", str(trained), "--output-dir", str(student), "--distillation-cache",
            str(tmp_path / "cache"), "--distill-engine", "torch", "--distill-beams", "2", "--distill-max-new-tokens",
            "8", "--max_train_samples", "24", *TINY_MODEL[model_type], "--per_device_train_batch_size", "8",
            "--num_train_epochs", "1", "--eval_strategy", "no", "--load_best_model_at_end", "false",
            "--save_steps", "100", "--logging_steps", "1", "--generation_max_length", "8",
            "--generation_num_beams", "1"]  # fmt: skip
    assert main(argv) == 0
    record = json.loads((student / "distillation.json").read_text(encoding="utf-8"))
    assert record["teacher"]["model_type"] == model_type and record["data"]["train_pairs"] > 0
    state = json.loads((student / "trainer_state.json").read_text(encoding="utf-8"))
    assert state["global_step"] == -(-record["data"]["train_pairs"] // 8)  # one epoch of the student's pairs
    assert (student / "model.safetensors").is_file()


def test_publish_dry_run_shows_the_card_and_files_and_writes_nothing(trained, capsys, monkeypatch):
    from huggingface_hub import HfApi

    monkeypatch.setattr(HfApi, "create_repo", lambda *args, **kwargs: pytest.fail("a dry run reached the Hub"))
    before = sorted(path.name for path in trained.iterdir())
    capsys.readouterr()
    assert main(["publish", "--model", str(trained), "--repo-id", "someone/tiny", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "model.safetensors" in out and "config.json" in out and "someone/tiny" in out
    assert sorted(path.name for path in trained.iterdir()) == before
