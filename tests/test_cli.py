"""End-to-end `hf-bahdanau` runs on 300 Tatoeba pairs with a tiny model: train, evaluate, translate, resume."""

import io
import json
import math
import os
import pty
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
from transformers import AutoConfig, AutoModelForSeq2SeqLM, AutoTokenizer, pipeline

from hf_bahdanau import TASK, TranslationPipeline, cli, data, training
from hf_bahdanau.cli import UsageError, main, parse_train_args
from hf_bahdanau.training import ModelArguments, build_model

TINY_RUN = [
    "--src-lang", "en", "--tgt-lang", "fr",
    "--max_train_samples", "300", "--max_eval_samples", "16", "--vocab_size", "400",
    "--encoder_layers", "1", "--decoder_layers", "1", "--dropout", "0.0",
    "--per_device_train_batch_size", "32", "--per_device_eval_batch_size", "16",
    "--learning_rate", "0.01", "--warmup_steps", "0", "--logging_steps", "5",
    "--generation_num_beams", "2", "--generation_max_length", "20", "--label_smoothing_factor", "0.1",
]  # fmt: skip
TINY_MODEL = {
    "bahdanau": ["--embedding_size", "32", "--hidden_size", "32"],
    "d2l_transformer": ["--model_type", "transformer", "--d_model", "32", "--attention_heads", "2", "--ffn_dim", "64",
                        "--init_std", "0.18"],
}  # fmt: skip
TINY = [*TINY_RUN, *TINY_MODEL["bahdanau"]]


def run_cli(*args: str, stdin: str | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "hf_bahdanau.cli", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **(env or {})},
    )


@pytest.fixture(scope="module", params=list(TINY_MODEL))
def trained(request, tmp_path_factory, tatoeba_tsv):
    """A folder trained by `hf-bahdanau train` for 60 steps, for each model type."""
    output = tmp_path_factory.mktemp("run") / "model"
    status = main(
        ["train", "--data", str(tatoeba_tsv), "--output-dir", str(output), *TINY_RUN, *TINY_MODEL[request.param],
         "--max_steps", "60", "--eval_steps", "30", "--save_steps", "30"]
    )  # fmt: skip
    assert status == 0
    return output


def test_train_writes_a_loadable_model_and_the_loss_falls(trained):
    model_type = json.loads((trained / "config.json").read_text())["model_type"]
    modeling_file = {"bahdanau": "modeling_bahdanau.py", "d2l_transformer": "modeling_transformer.py"}[model_type]
    for name in ("model.safetensors", "config.json", "generation_config.json", "tokenizer.json",
                 "trainer_state.json", "training_curves.png", modeling_file, "modeling_translation.py"):  # fmt: skip
        assert (trained / name).is_file(), name
    assert (trained / "training_curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    state = json.loads((trained / "trainer_state.json").read_text())
    losses = [entry["loss"] for entry in state["log_history"] if "loss" in entry]
    # 60 steps on 300 random pairs with label smoothing 0.1 (a higher floor): the loss falls by some 20%
    assert len(losses) >= 5 and losses[-1] < 0.85 * losses[0] and sum(losses[-3:]) < sum(losses[:3])
    assert any("eval_bleu" in entry for entry in state["log_history"])
    model = AutoModelForSeq2SeqLM.from_pretrained(trained)
    tokenizer = AutoTokenizer.from_pretrained(trained)
    assert model.config.source_language == "en" and model.config.target_language == "fr"
    assert model.config.label_smoothing == 0.1  # the model computes it, not the Trainer
    assert model.config.vocab_size == len(tokenizer)
    assert model.generation_config.num_beams == 2
    saved_generation = json.loads((trained / "generation_config.json").read_text())
    assert saved_generation["max_new_tokens"] == 20 and "max_length" not in saved_generation
    batch = tokenizer(["Go.", "I lost."], return_tensors="pt", padding=True)
    assert model.generate(**batch, max_new_tokens=5).shape[0] == 2


def test_evaluate_prints_bleu_with_signature_and_writes_hypotheses(trained, tatoeba_tsv, tmp_path, capsys):
    output = tmp_path / "hyp.txt"
    status = main(["evaluate", "--model", str(trained), "--data", str(tatoeba_tsv), "--split", "test",
                   "--max-samples", "12", "--num-beams", "2", "--output", str(output)])  # fmt: skip
    assert status == 0
    printed = capsys.readouterr().out
    assert "BLEU = " in printed and "nrefs:1" in printed and "chrF = " in printed
    assert len(output.read_text(encoding="utf-8").splitlines()) == 12


def test_translate_arguments_stdin_and_heatmap(trained, tmp_path, capsys, monkeypatch):
    assert main(["translate", "--model", str(trained), "Go.", "I lost.", "--num-beams", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and all(lines)

    monkeypatch.setattr(sys, "stdin", io.StringIO("Hello!\n\nI'm home.\n"))
    assert main(["translate", "--model", str(trained), "--batch-size", "2"]) == 0
    lines = capsys.readouterr().out.split("\n")[:-1]
    assert len(lines) == 3 and lines[1] == "" and lines[0] and lines[2]

    heatmap = tmp_path / "attention.png"
    assert main(["translate", "--model", str(trained), "He's calm.", "--heatmap", str(heatmap)]) == 0
    assert heatmap.read_bytes()[:4] == b"\x89PNG"
    self_attention = [tmp_path / "attention-encoder.png", tmp_path / "attention-decoder.png"]
    is_transformer = AutoConfig.from_pretrained(trained).model_type == "d2l_transformer"
    assert all(path.is_file() == is_transformer for path in self_attention)


def test_translate_evaluate_and_pipeline_with_int8_leave_the_fp32_folder(trained, tatoeba_tsv, tmp_path, capsys):
    weights = (trained / "model.safetensors").read_bytes()
    texts = ["Go.", "I lost.", "He's calm."]
    assert main(["translate", "--model", str(trained), *texts, "--num-beams", "1", "--quantize", "int8"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 3
    assert main(["evaluate", "--model", str(trained), "--data", str(tatoeba_tsv), "--split", "test",
                 "--max-samples", "4", "--output", str(tmp_path / "hyp.txt"), "--quantize", "int8"]) == 0  # fmt: skip
    assert "BLEU = " in capsys.readouterr().out
    translator = pipeline(TASK, model=str(trained), pipeline_class=TranslationPipeline,
                          model_kwargs={"quantize": "int8"})  # fmt: skip
    assert translator.model.quantization == "int8" and translator("Go.")[0]["translation_text"]
    assert (trained / "model.safetensors").read_bytes() == weights  # the folder keeps its fp32 weights
    with pytest.raises(SystemExit):
        main(["translate", "--model", str(trained), "Go.", "--quantize", "int4"])


def test_translate_prompts_when_stdin_is_a_terminal(trained):
    terminal, stdin = pty.openpty()  # stdin is a terminal: translate asks at a prompt, line by line, until q
    process = subprocess.Popen(
        [sys.executable, "-m", "hf_bahdanau.cli", "translate", "--model", str(trained), "--num-beams", "1"],
        stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    os.close(stdin)
    os.write(terminal, b"Go.\nI lost.\nq\n")
    try:
        out, err = process.communicate(timeout=300)
    finally:
        process.kill()
        os.close(terminal)
    assert process.returncode == 0, err[-3000:]
    prompts = out.split("en > ")
    assert len(prompts) == 4 and prompts[0] == ""  # asked three times: two sentences, then q
    assert all(answer.endswith("\n") for answer in prompts[1:3])  # one translation line after each sentence


def test_pipeline_from_trained_folder_with_remote_code(trained, tmp_path):
    script = textwrap.dedent(
        f"""
        import sys
        sys.modules["hf_bahdanau"] = None
        from transformers import pipeline
        translator = pipeline("translation", model={str(trained)!r}, trust_remote_code=True)  # as in v4
        print(translator(["Go.", ""], num_beams=2))
        """
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf"), "PYTHONPATH": ""}
    result = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=300)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "'translation_text': ''" in result.stdout.splitlines()[-1]


def test_resume_continues_from_the_saved_step(tatoeba_tsv, tmp_path):
    output = tmp_path / "interrupted"
    args = ["train", "--data", str(tatoeba_tsv), "--output-dir", str(output), *TINY,
            "--eval_strategy", "no", "--load_best_model_at_end", "false", "--save_steps", "10"]  # fmt: skip
    process = subprocess.Popen([sys.executable, "-m", "hf_bahdanau.cli", *args, "--max_steps", "2000"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    deadline = time.time() + 300
    while not (output / "checkpoint-10" / "trainer_state.json").is_file():
        assert process.poll() is None and time.time() < deadline, "training ended before its first checkpoint"
        time.sleep(0.05)
    time.sleep(0.5)  # let the checkpoint finish writing
    process.kill()
    process.wait()
    assert not (output / "model.safetensors").exists()  # it really was interrupted

    result = run_cli(*args, "--max_steps", "30", "--resume")
    assert result.returncode == 0, result.stderr[-3000:]
    started = [line for line in result.stderr.splitlines() if "training starts at step" in line]
    assert started and int(started[0].split("training starts at step ")[1].split()[0]) >= 10
    assert json.loads((output / "trainer_state.json").read_text())["global_step"] == 30
    assert json.loads((output / "translation_data.json").read_text())["d2l_normalize"] is False

    result = run_cli(*args, "--max_steps", "40", "--resume", "--d2l_normalize", "true")
    assert result.returncode != 0 and "other corpus settings" in result.stderr


def test_output_dir_forms(tmp_path):
    *_, training_args, _ = parse_train_args(["--output_dir=somewhere", "--data", "multi30k"])
    assert training_args.output_dir == "somewhere"
    config = tmp_path / "train.yaml"
    config.write_text("output-dir: elsewhere\n")
    assert parse_train_args(["--config", str(config)])[3].output_dir == "elsewhere"
    config.write_text("output_dir: null\n")
    with pytest.raises(UsageError, match="needs --output-dir"):
        parse_train_args(["--config", str(config)])
    with pytest.raises(ValueError, match=r"not used.*--output_d"):  # no abbreviations: --output_d is not --output_dir
        parse_train_args(["--output_d", "x", "--output_dir", "y"])


def test_config_file_and_overrides(tmp_path):
    config = tmp_path / "train.yaml"
    config.write_text("hidden_size: 48\nrnn-type: lstm\nlearning_rate: 0.003\n")
    model_args, _, data_args, training_args, _ = parse_train_args(
        ["--config", str(config), "--output-dir", "x", "--hidden-size", "64", "--data", "multi30k"]
    )
    assert model_args.hidden_size == 64 and model_args.rnn_type == "lstm"
    assert training_args.learning_rate == 0.003 and data_args.data == "multi30k"
    assert training_args.train_sampling_strategy == "group_by_length" and training_args.max_grad_norm == 1.0
    config.write_text("hidden_sise: 48\n")
    with pytest.raises(UsageError, match="unknown option\\(s\\) hidden_sise"):
        parse_train_args(["--config", str(config), "--output-dir", "x"])


def test_bad_input_gives_clear_errors(trained, tatoeba_tsv, tmp_path):
    result = run_cli("train", "--output-dir", str(tmp_path / "a"), "--src-lang", "en", "--tgt-lang", "fr")
    assert result.returncode != 0 and "needs --data" in result.stderr

    result = run_cli("train", "--data", "multi30k", "--src-lang", "xx", "--tgt-lang", "en",
                     "--output-dir", str(tmp_path / "b"))  # fmt: skip
    assert result.returncode != 0 and "xx" in result.stderr.splitlines()[-1]

    no_tokenizer = tmp_path / "no_tokenizer"
    shutil.copytree(trained, no_tokenizer, ignore=shutil.ignore_patterns("tokenizer*", "special_tokens_map.json"))
    result = run_cli("translate", "--model", str(no_tokenizer), "Go.")
    assert result.returncode != 0 and "has no tokenizer" in result.stderr

    existing = tmp_path / "existing"
    existing.mkdir()
    (existing / "keep.txt").write_text("precious")
    result = run_cli("train", "--data", str(tatoeba_tsv), "--output-dir", str(existing), *TINY, "--max_steps", "1")
    assert result.returncode != 0 and "--overwrite" in result.stderr
    assert (existing / "keep.txt").read_text() == "precious"


def test_output_dir_is_required_and_overwrite_keeps_the_old_run_until_ready(trained, tatoeba_tsv, tmp_path):
    result = run_cli("train", "--data", "multi30k", "--src-lang", "de", "--tgt-lang", "en", "--max_steps", "1")
    assert result.returncode != 0 and "needs --output-dir" in result.stderr
    assert not Path("trainer_output").exists()

    previous = tmp_path / "previous"
    shutil.copytree(trained, previous)
    result = run_cli("train", "--data", str(tmp_path / "missing.tsv"), "--src-lang", "en", "--tgt-lang", "fr",
                     "--output-dir", str(previous), "--overwrite")  # fmt: skip
    assert result.returncode != 0 and "missing.tsv" in result.stderr
    assert (previous / "model.safetensors").is_file()  # a failed run destroyed nothing

    result = run_cli("train", "--data", str(tatoeba_tsv), "--src-lang", "en", "--tgt-lang", "fr",
                     "--model_name_or_path", str(previous), "--output-dir", str(previous), "--overwrite")  # fmt: skip
    assert result.returncode != 0 and "which this run reads" in result.stderr
    assert (previous / "model.safetensors").is_file()

    not_a_run = tmp_path / "documents"
    not_a_run.mkdir()
    (not_a_run / "thesis.tex").write_text("precious")
    result = run_cli("train", "--data", "multi30k", "--src-lang", "de", "--tgt-lang", "en",
                     "--output-dir", str(not_a_run), "--overwrite")  # fmt: skip
    assert result.returncode != 0 and "does not hold a training run" in result.stderr
    assert (not_a_run / "thesis.tex").read_text() == "precious"


def test_a_loaded_model_takes_the_runs_label_smoothing_and_keeps_its_architecture(trained):
    tokenizer = AutoTokenizer.from_pretrained(trained)
    model = build_model(ModelArguments(model_name_or_path=str(trained)), tokenizer, "en", "fr", label_smoothing=0.1)
    assert model.config.label_smoothing == 0.1
    with pytest.raises(ValueError, match="--encoder_layers: a saved model keeps its architecture"):
        build_model(ModelArguments(model_name_or_path=str(trained), encoder_layers=3), tokenizer, "en", "fr")
    if model.config.model_type == "bahdanau":  # a run option of the RNN: it may change when training goes on
        run_option = ModelArguments(model_name_or_path=str(trained), teacher_forcing_ratio=0.8)
        assert build_model(run_option, tokenizer, "en", "fr").config.teacher_forcing_ratio == 0.8
    else:
        with pytest.raises(ValueError, match="--teacher_forcing_ratio do\\(es\\) not apply to a d2l_transformer model"):
            build_model(
                ModelArguments(model_name_or_path=str(trained), teacher_forcing_ratio=0.8), tokenizer, "en", "fr"
            )
    *_, training_args, _ = parse_train_args(["--output-dir", "x", "--label_smoothing_factor", "0.2"])
    assert training_args.label_smoothing_factor == 0.2  # train() hands it to the model config, as above


def test_model_options_belong_to_the_model_type():
    model_args = parse_train_args(["--output-dir", "x", "--model_type", "transformer", "--d_model", "64"])[0]
    assert model_args.config_overrides() == {"d_model": 64}
    wrong = parse_train_args(["--output-dir", "x", "--model_type", "transformer", "--rnn_type", "lstm"])[0]
    with pytest.raises(ValueError, match="--rnn_type do\\(es\\) not apply to a d2l_transformer model"):
        wrong.config_overrides()
    with pytest.raises(ValueError, match="unknown model type 'rnn'; choose one of bahdanau, transformer"):
        parse_train_args(["--output-dir", "x", "--model_type", "rnn"])[0].config_overrides()


def test_evaluate_reads_the_corpus_as_training_did(trained, tmp_path, monkeypatch, capsys):
    settings = json.loads((trained / "translation_data.json").read_text())
    assert settings == {"data": settings["data"], "data_path": None, "src_lang": "en", "tgt_lang": "fr",
                        "test_split": "test_2016_flickr", "d2l_normalize": False}  # fmt: skip
    normalized = tmp_path / "normalized"
    shutil.copytree(trained, normalized)
    (normalized / "translation_data.json").write_text(json.dumps({**settings, "d2l_normalize": True}))
    calls = []
    real = cli.load_parallel_corpus
    monkeypatch.setattr(
        cli, "load_parallel_corpus", lambda *args, **kwargs: calls.append((args, kwargs)) or real(*args, **kwargs)
    )
    assert main(["evaluate", "--model", str(normalized), "--max-samples", "4", "--num-beams", "1"]) == 0
    assert calls[-1][0][0] == settings["data"] and calls[-1][1]["normalize"] is True  # no --data needed
    assert main(["evaluate", "--model", str(normalized), "--max-samples", "4", "--no-d2l-normalize"]) == 0
    assert calls[-1][1]["normalize"] is False
    relative = os.path.relpath(settings["data"])  # the training corpus, spelled another way: still its settings
    assert main(["evaluate", "--model", str(normalized), "--data", relative, "--max-samples", "4"]) == 0
    assert calls[-1][1]["normalize"] is True and calls[-1][1]["test_split"] == settings["test_split"]
    assert capsys.readouterr().out.count("BLEU = ") == 3


def test_a_folder_without_weights_is_a_clear_error_not_a_traceback(trained, tmp_path):
    broken = tmp_path / "no_weights"
    shutil.copytree(trained, broken, ignore=shutil.ignore_patterns("*.safetensors", "checkpoint-*"))
    result = run_cli("translate", "--model", str(broken), "Go.")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "ERROR" in result.stderr


def test_evaluate_rejects_a_missing_split(trained, tatoeba_tsv):
    result = run_cli("evaluate", "--model", str(trained), "--data", str(tatoeba_tsv), "--split", "dev")
    assert result.returncode != 0 and "no 'dev' split" in result.stderr


def test_two_processes_train_one_model(tatoeba_tsv, tmp_path):
    """Data-parallel training (gloo on the CPU; NCCL on GPUs under `accelerate launch`): one run, saved once."""
    output = tmp_path / "ddp"
    result = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "-m", "hf_bahdanau.cli", "train",
         "--data", str(tatoeba_tsv), "--output-dir", str(output), *TINY, "--per_device_train_batch_size", "16",
         "--max_steps", "6", "--eval_steps", "3", "--save_steps", "3", "--use_cpu", "true"],
        capture_output=True, text=True, timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stderr.count("saved the model, tokenizer and training curves") == 1
    state = json.loads((output / "trainer_state.json").read_text())
    step_3 = next(entry for entry in state["log_history"] if entry.get("step") == 3)
    assert step_3["epoch"] == pytest.approx(3 / math.ceil(300 / (16 * 2)))  # two processes share each epoch
    assert AutoModelForSeq2SeqLM.from_pretrained(output).config.vocab_size == len(AutoTokenizer.from_pretrained(output))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_bf16_training_on_gpu(tatoeba_tsv, tmp_path):
    output = tmp_path / "gpu"
    assert main(["train", "--data", str(tatoeba_tsv), "--output-dir", str(output), *TINY, "--max_steps", "10",
                 "--eval_steps", "10", "--save_steps", "10", "--bf16", "true"]) == 0  # fmt: skip
    assert (output / "model.safetensors").is_file()


def test_evaluate_finds_a_named_corpus_where_training_read_it(tatoeba_tsv, tmp_path, monkeypatch, capsys, caplog):
    output = tmp_path / "named"
    assert main(["train", "--data", "tatoeba-fra-eng", "--output-dir", str(output), *TINY, "--max_steps", "2",
                 "--logging_steps", "1", "--eval_strategy", "no", "--load_best_model_at_end", "false",
                 "--save_strategy", "no"]) == 0  # fmt: skip
    settings = json.loads((output / "translation_data.json").read_text())
    assert settings["data"] == "tatoeba-fra-eng" and settings["data_path"] == str(tatoeba_tsv.resolve())

    # A new shell: no HF_BAHDANAU_DATA_DIR, and no network.
    monkeypatch.delenv(data.DATA_DIR_ENV)
    monkeypatch.setenv(data.CACHE_DIR_ENV, str(tmp_path / "cache"))
    monkeypatch.setattr(data, "_download", lambda url, target: (_ for _ in ()).throw(OSError("network is off")))
    evaluate = ["evaluate", "--model", str(output), "--max-samples", "3", "--num-beams", "1"]
    assert main(evaluate) == 0 and "3 test sentences" in capsys.readouterr().out
    assert main([*evaluate, "--data", "tatoeba-fra-eng"]) == 0  # the same corpus, named: the same place
    assert not (tmp_path / "cache").exists()  # nothing was downloaded

    moved = {**settings, "data_path": str(tmp_path / "gone" / "fra-eng.tsv")}
    (output / "translation_data.json").write_text(json.dumps(moved))
    assert main(evaluate) == 1  # the corpus is no longer there: the name is resolved again, and the download fails
    assert "no longer in" in caplog.text and "could not download corpus 'tatoeba-fra-eng'" in caplog.text
    assert not (tmp_path / "cache").exists()  # and leaves no empty cache folder behind


def test_resume_does_not_compare_where_the_corpus_was_found(tmp_path):
    """A run recorded before `data_path` existed, or whose named corpus was found elsewhere, resumes."""
    settings = {"data": "multi30k", "data_path": "/new/multi30k", "src_lang": "de", "tgt_lang": "en",
                "test_split": "test_2016_flickr", "d2l_normalize": False}  # fmt: skip
    recorded = tmp_path / data.DATA_SETTINGS_FILE
    for earlier in ({**settings, "data_path": "/old/multi30k"}, {**settings, "data_path": None}):
        recorded.write_text(json.dumps(earlier))
        training._write_run_files(tmp_path, None, settings, resuming=True)
    del settings["data_path"]
    recorded.write_text(json.dumps(settings))
    training._write_run_files(tmp_path, None, {**settings, "data_path": "/new/multi30k"}, resuming=True)
    with pytest.raises(ValueError, match="other corpus settings"):
        training._write_run_files(tmp_path, None, {**settings, "d2l_normalize": True}, resuming=True)


@pytest.mark.parametrize(
    "command, option, value",
    [("translate", "--batch-size", "-1"), ("translate", "--num-beams", "0"), ("evaluate", "--num-beams", "-2"),
     ("translate", "--max-new-tokens", "0"), ("evaluate", "--max-samples", "0"), ("evaluate", "--batch-size", "x")],
)  # fmt: skip
def test_counts_must_be_positive_integers(command, option, value, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:  # argparse's usage error, before any model is loaded
        main([command, "--model", str(tmp_path), option, value])
    assert exit_info.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"argument {option}" in error and f"expected a positive integer, got {value}" in error.replace("'", "")
    assert cli.build_parser().parse_args([command, "--model", "m", option, "3"]) is not None


def test_evaluate_output_never_overwrites_the_model_folder(trained, tmp_path, caplog):
    model = tmp_path / "model"
    shutil.copytree(trained, model)
    for name in ("config.json", "tokenizer.json", "translation_data.json", "."):
        before = {path: path.read_bytes() for path in model.iterdir() if path.is_file()}
        assert main(["evaluate", "--model", str(model), "--max-samples", "2", "--output", str(model / name)]) == 1
        assert {path: path.read_bytes() for path in model.iterdir() if path.is_file()} == before
        assert "would overwrite part of the model folder" in caplog.records[-1].getMessage()
    earlier = model / "hypotheses.test.en-fr.txt"
    earlier.write_text("old\n")
    assert main(["evaluate", "--model", str(model), "--max-samples", "2", "--output", str(earlier)]) == 0
    assert len(earlier.read_text().splitlines()) == 2  # an earlier hypotheses file is replaced


def test_translate_replaces_bad_bytes_in_stdin_and_translates_every_line(trained, monkeypatch, capsys, caplog):
    assert main(["translate", "--model", str(trained), "--num-beams", "1", "Go.", "I \ufffd lost.", "Hello!"]) == 0
    expected = capsys.readouterr().out
    stdin = io.TextIOWrapper(io.BytesIO(b"\xef\xbb\xbfGo.\nI \xff lost.\nHello!\n"), encoding="utf-8")
    monkeypatch.setattr(sys, "stdin", stdin)  # a byte order mark, and one byte that is not UTF-8
    assert main(["translate", "--model", str(trained), "--num-beams", "1"]) == 0
    assert capsys.readouterr().out == expected and len(expected.splitlines()) == 3
    assert "stdin: line 2 is not valid UTF-8" in caplog.text


def test_train_refuses_one_language_on_both_sides(tatoeba_tsv, tmp_path, caplog):
    output = tmp_path / "copy"
    assert main(["train", "--data", str(tatoeba_tsv), "--output-dir", str(output), *TINY, "--src-lang", "en",
                 "--tgt-lang", "en", "--max_steps", "1", "--logging_steps", "1", "--eval_strategy", "no",
                 "--load_best_model_at_end", "false", "--save_strategy", "no"]) == 1  # fmt: skip
    assert caplog.records[-1].getMessage() == "--src-lang and --tgt-lang are both 'en': choose two languages"
    assert not output.exists()


@pytest.mark.parametrize(
    "name, text, error",
    [("train.yaml", "hidden_size: 48\nrnn_type: [gru\n", "train.yaml: line 3 is not valid YAML"),
     ("train.json", '{"hidden_size": 48,\n "rnn_type" "gru"}', "train.json: line 2 is not valid JSON")],
)  # fmt: skip
def test_an_invalid_config_file_is_a_one_line_error(name, text, error, tmp_path, caplog):
    config = tmp_path / name
    config.write_text(text)
    assert main(["train", "--config", str(config), "--output-dir", str(tmp_path / "out")]) == 1
    message = caplog.records[-1].getMessage()
    assert error in message and "\n" not in message
