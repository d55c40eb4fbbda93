"""End-to-end `hf-bahdanau` runs on 300 Tatoeba pairs with a tiny model: train, evaluate, translate, resume."""

import importlib.util
import io
import json
import logging
import math
import os
import pty
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from helpers import TINY, TINY_MODEL, TINY_RUN, error_of, folder_bytes, swap_two_tokens
from sacrebleu.metrics import BLEU
from safetensors.torch import load_file
from transformers import AutoConfig, AutoModelForSeq2SeqLM, AutoTokenizer, pipeline

from hf_bahdanau import TASK, TranslationPipeline, cli
from hf_bahdanau.cli import main
from hf_bahdanau.cli.arguments import UsageError
from hf_bahdanau.cli.train import parse_train_args
from hf_bahdanau.data import cache as corpus_cache
from hf_bahdanau.data import corpora as data
from hf_bahdanau.data import run_settings
from hf_bahdanau.decoding import quantization
from hf_bahdanau.decoding.checkpoint import load_checkpoint
from hf_bahdanau.metrics import count_repeating
from hf_bahdanau.publishing import card
from hf_bahdanau.registry import get_model_type
from hf_bahdanau.training import run_folder
from hf_bahdanau.training.assembly import build_model
from hf_bahdanau.training.options import ModelArguments


@pytest.fixture(scope="module", params=list(TINY_MODEL))
def trained(request, trained_folder, tmp_path_factory):
    """This module's copy of the session's folder trained by `hf-bahdanau train` for 60 steps, for each model type
    (conftest's `trained_folder`): tests here evaluate into it."""
    return trained_folder(request.param, tmp_path_factory.mktemp("run") / "model")


@pytest.mark.slow
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
    objective = state["stateful_callbacks"]["TrainingObjective"]["args"]  # the run's record of its objective
    assert objective == {"label_smoothing": 0.1, "unlikelihood": 0.0, "teacher_forcing_ratio": 1.0}
    assert "label_smoothing" not in json.loads((trained / "config.json").read_text())  # not the architecture
    assert model.config.vocab_size == len(tokenizer)
    assert model.generation_config.num_beams == 2
    saved_generation = json.loads((trained / "generation_config.json").read_text())
    assert saved_generation["max_new_tokens"] == 20 and "max_length" not in saved_generation
    batch = tokenizer(["Go.", "I lost."], return_tensors="pt", padding=True)
    assert model.generate(**batch, max_new_tokens=5).shape[0] == 2


@pytest.mark.slow
def test_loading_the_best_checkpoint_of_a_tied_model_warns_of_nothing(tatoeba_tsv, tmp_path):
    output, warnings = tmp_path / "tied", []
    handler = logging.Handler(logging.WARNING)
    handler.emit = warnings.append
    trainer_logger = logging.getLogger("transformers.trainer")  # transformers' loggers do not propagate
    trainer_logger.addHandler(handler)
    try:
        status = main(
            ["train", "--data", str(tatoeba_tsv), "--output-dir", str(output), *TINY, "--tie_word_embeddings", "true",
             "--max_steps", "10", "--eval_steps", "5", "--save_steps", "5"]
        )  # fmt: skip
    finally:
        trainer_logger.removeHandler(handler)
    assert status == 0
    state = json.loads((output / "trainer_state.json").read_text())
    assert state["best_model_checkpoint"]  # the Trainer loaded a best checkpoint at the end
    assert [record.getMessage() for record in warnings if "keys" in record.getMessage()] == []
    model = AutoModelForSeq2SeqLM.from_pretrained(output)
    assert model.lm_head.weight is model.model.decoder.embed_tokens.weight
    best = load_file(Path(state["best_model_checkpoint"]) / "model.safetensors")
    torch.testing.assert_close(model.model.decoder.embed_tokens.weight, best["model.decoder.embed_tokens.weight"])


@pytest.mark.slow
def test_evaluate_prints_bleu_with_signature_and_writes_hypotheses(trained, tatoeba_tsv, tmp_path, capsys):
    output = tmp_path / "hyp.txt"
    status = main(["evaluate", "--model", str(trained), "--data", str(tatoeba_tsv), "--split", "test",
                   "--max-samples", "12", "--num-beams", "2", "--output", str(output)])  # fmt: skip
    assert status == 0
    printed = capsys.readouterr().out
    assert "BLEU = " in printed and "nrefs:1" in printed and "chrF = " in printed
    hypotheses = output.read_text(encoding="utf-8").splitlines()
    assert len(hypotheses) == 12
    references = [pair["fr"] for pair in data.load_parallel_corpus(str(tatoeba_tsv), "en", "fr")["test"]["translation"]]
    score = BLEU().corpus_score(hypotheses, [references[:12]])  # sacreBLEU's own lengths, 13a-tokenized
    assert f"length ratio = {score.sys_len / score.ref_len:.3f}  (hypotheses {score.sys_len} / " in printed
    assert (
        f"{count_repeating(hypotheses)} of 12 translations repeat a phrase back to back, "
        f"{count_repeating(hypotheses, times=3)} three times or more" in printed
    )


@pytest.mark.slow
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
    assert not any(path.exists() for path in self_attention)  # one figure unless --heatmap-all
    assert main(["translate", "--model", str(trained), "He's calm.", "--heatmap", str(heatmap), "--heatmap-all"]) == 0
    is_transformer = AutoConfig.from_pretrained(trained).model_type == "d2l_transformer"
    assert all(path.is_file() == is_transformer for path in self_attention)


@pytest.mark.slow
def test_translate_evaluate_and_pipeline_with_int8_leave_the_fp32_folder(trained, tatoeba_tsv, tmp_path, capsys):
    weights = (trained / "model.safetensors").read_bytes()
    stored = (trained / "eval_results.json").read_bytes() if (trained / "eval_results.json").exists() else None
    texts = ["Go.", "I lost.", "He's calm."]
    assert main(["translate", "--model", str(trained), *texts, "--num-beams", "1", "--quantize", "int8"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 3
    assert main(["evaluate", "--model", str(trained), "--data", str(tatoeba_tsv), "--split", "test",
                 "--max-samples", "4", "--output", str(tmp_path / "hyp.txt"), "--quantize", "int8"]) == 0  # fmt: skip
    assert "BLEU = " in capsys.readouterr().out
    stored_now = (trained / "eval_results.json").read_bytes() if (trained / "eval_results.json").exists() else None
    assert stored_now == stored  # the int8 model's scores are not the folder's (fp32) scores
    translator = pipeline(TASK, model=load_checkpoint(trained, quantize="int8"), tokenizer=str(trained),
                          pipeline_class=TranslationPipeline)  # fmt: skip
    assert translator.model.quantization == "int8" and translator("Go.")[0]["translation_text"]
    assert (trained / "model.safetensors").read_bytes() == weights  # the folder keeps its fp32 weights
    with pytest.raises(SystemExit):
        main(["translate", "--model", str(trained), "Go.", "--quantize", "int4"])


@pytest.mark.slow
def test_translate_prompts_when_stdin_is_a_terminal(rnn_folder, cli_command):
    terminal, stdin = pty.openpty()  # stdin is a terminal: translate asks at a prompt, line by line, until q
    process = subprocess.Popen(
        [*cli_command, "translate", "--model", str(rnn_folder), "--num-beams", "1"],
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
    assert "q (or Ctrl-D) quits" in err
    assert all(answer.endswith("\n") for answer in prompts[1:3])  # one translation line after each sentence


def test_output_dir_forms(tmp_path):
    *_, training_args, _ = parse_train_args(["--output_dir=somewhere", "--data", "multi30k"])
    assert training_args.output_dir == "somewhere"
    config = tmp_path / "train.yaml"
    config.write_text("output-dir: elsewhere\n")
    assert parse_train_args(["--config", str(config)])[3].output_dir == "elsewhere"
    config.write_text("output_dir: null\n")
    with pytest.raises(UsageError, match="needs --output-dir"):
        parse_train_args(["--config", str(config)])
    with pytest.raises(UsageError, match=r"unrecognized arguments: --output_d \(and 1 value, not shown\)$"):
        # no abbreviations: --output_d is not --output_dir
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


RECIPES = sorted((Path(__file__).resolve().parents[1] / "scripts" / "multi30k").glob("*.yaml"))
RECIPES = [recipe for recipe in RECIPES if not recipe.stem.startswith("distill-")]  # test_distillation.py's


@pytest.mark.parametrize("recipe", RECIPES, ids=[recipe.stem for recipe in RECIPES])
def test_every_shipped_recipe_parses_into_a_valid_model(recipe):
    model_args, tokenizer_args, data_args, training_args, run_args = parse_train_args(
        ["--config", str(recipe), "--output-dir", "x"]
    )
    expected = "transformer" if recipe.stem.startswith(("transformer-", "quick-")) else "bahdanau"
    assert model_args.model_type == expected and data_args.data == "multi30k"
    config_class, _ = get_model_type(model_args.model_type)
    config = config_class(**model_args.config_overrides(), vocab_size=tokenizer_args.vocab_size)
    config.check()
    assert config.vocab_size == 8000 and training_args.warmup_steps > 0
    if recipe.stem.startswith("quick-"):
        return
    # the full recipes: a linear decay to zero whose last step's weights are the model (no average, not the best
    # evaluation), unlikelihood 4, no more steps than the runs that took at most 90 minutes (docs/benchmarks.md)
    assert training_args.lr_scheduler_type == "linear" and run_args.average_checkpoints == 0
    assert not training_args.load_best_model_at_end and run_args.unlikelihood == 4.0
    steps = math.ceil(29_000 / training_args.per_device_train_batch_size) * training_args.num_train_epochs
    assert training_args.warmup_steps < steps / 10 and steps <= (5_448 if expected == "transformer" else 8_172)
    if expected == "transformer":
        assert (config.d_model, config.encoder_layers, config.attention_heads) == (256, 3, 4)
    else:  # LIUM's text-only system: a bidirectional GRU encoder, the conditional GRU decoder
        assert (config.decoder_type, config.rnn_type, config.bidirectional_encoder) == ("cgru", "gru", True)


@pytest.mark.slow
def test_a_yaml_recipe_trains_a_transformer_with_inverse_square_root_warmup(tatoeba_tsv, tmp_path):
    recipe, output = tmp_path / "tiny.yaml", tmp_path / "model"
    options = TINY_MODEL["d2l_transformer"]
    recipe.write_text(
        "".join(f"{name.lstrip('-')}: {value}\n" for name, value in zip(options[::2], options[1::2], strict=True))
        + "lr_scheduler_type: inverse_sqrt\nwarmup_steps: 4\nlogging_steps: 1\nmax_steps: 12\n"
    )
    tiny_run = [arg for option in zip(TINY_RUN[::2], TINY_RUN[1::2], strict=True)
                if option[0] not in ("--warmup_steps", "--logging_steps") for arg in option]  # fmt: skip
    status = main(["train", "--config", str(recipe), "--data", str(tatoeba_tsv), "--output-dir", str(output),
                   *tiny_run, "--eval_steps", "12", "--save_steps", "12"])  # fmt: skip
    assert status == 0
    assert json.loads((output / "config.json").read_text())["model_type"] == "d2l_transformer"
    history = json.loads((output / "trainer_state.json").read_text())["log_history"]
    rates = {entry["step"]: entry["learning_rate"] for entry in history if "learning_rate" in entry}
    peak = 0.01  # TINY_RUN's learning rate
    # transformers' inverse_sqrt after s finished steps: linear warmup to the peak, then peak * sqrt(warmup / s);
    # the Trainer logs at step k the rate that step k used (s = k - 1)
    expected = {k: peak * ((k - 1) / 4 if k - 1 < 4 else math.sqrt(4 / (k - 1))) for k in range(1, 13)}
    assert sorted(rates) == list(range(1, 13))
    assert all(math.isclose(rates[step], expected[step], rel_tol=1e-6) for step in rates), rates


@pytest.mark.slow
def test_bad_input_gives_clear_errors(trained, tatoeba_tsv, tmp_path, caplog):
    argv = ["train", "--output-dir", str(tmp_path / "a"), "--src-lang", "en", "--tgt-lang", "fr"]
    assert "needs --data" in error_of(argv, caplog)

    argv = ["train", "--data", "multi30k", "--src-lang", "xx", "--tgt-lang", "en", "--output-dir", str(tmp_path / "b")]
    assert "xx" in error_of(argv, caplog)

    no_tokenizer = tmp_path / "no_tokenizer"
    shutil.copytree(trained, no_tokenizer, ignore=shutil.ignore_patterns("tokenizer*", "special_tokens_map.json"))
    assert "has no tokenizer" in error_of(["translate", "--model", str(no_tokenizer), "Go."], caplog)

    existing = tmp_path / "existing"
    existing.mkdir()
    (existing / "keep.txt").write_text("precious")
    argv = ["train", "--data", str(tatoeba_tsv), "--output-dir", str(existing), *TINY, "--max_steps", "1"]
    assert "--overwrite" in error_of(argv, caplog)
    assert (existing / "keep.txt").read_text() == "precious"


@pytest.mark.slow
def test_output_dir_is_required_and_overwrite_keeps_the_old_run_until_ready(trained, tatoeba_tsv, tmp_path, caplog):
    argv = ["train", "--data", "multi30k", "--src-lang", "de", "--tgt-lang", "en", "--max_steps", "1"]
    assert "needs --output-dir" in error_of(argv, caplog)
    assert not Path("trainer_output").exists()

    previous = tmp_path / "previous"
    shutil.copytree(trained, previous)
    argv = ["train", "--data", str(tmp_path / "missing.tsv"), "--src-lang", "en", "--tgt-lang", "fr",
            "--output-dir", str(previous), "--overwrite"]  # fmt: skip
    assert "missing.tsv" in error_of(argv, caplog)
    assert (previous / "model.safetensors").is_file()  # a failed run destroyed nothing

    argv = ["train", "--data", str(tatoeba_tsv), "--src-lang", "en", "--tgt-lang", "fr",
            "--model_name_or_path", str(previous), "--output-dir", str(previous), "--overwrite"]  # fmt: skip
    assert "which this run reads" in error_of(argv, caplog)
    assert (previous / "model.safetensors").is_file()

    not_a_run = tmp_path / "documents"
    not_a_run.mkdir()
    (not_a_run / "thesis.tex").write_text("precious")
    argv = ["train", "--data", "multi30k", "--src-lang", "de", "--tgt-lang", "en", "--output-dir", str(not_a_run),
            "--overwrite"]  # fmt: skip
    assert "does not hold a training run" in error_of(argv, caplog)
    assert (not_a_run / "thesis.tex").read_text() == "precious"


@pytest.mark.slow
def test_a_loaded_model_keeps_its_architecture(trained):
    tokenizer = AutoTokenizer.from_pretrained(trained)
    with pytest.raises(ValueError, match=r"a saved model keeps its architecture \(--encoder_layers 1\)"):
        build_model(ModelArguments(model_name_or_path=str(trained), encoder_layers=3), tokenizer, "en", "fr")
    same = build_model(ModelArguments(model_name_or_path=str(trained), encoder_layers=1), tokenizer, "en", "fr")
    assert same.config.encoder_layers == 1  # a recipe's options that match the saved model are fine
    objective = ["--label_smoothing_factor", "0.2", "--unlikelihood", "2", "--teacher_forcing_ratio", "0.8"]
    *_, training_args, run_args = parse_train_args(["--output-dir", "x", *objective])  # the run's, for any model
    assert training_args.label_smoothing_factor == 0.2
    assert (run_args.unlikelihood, run_args.teacher_forcing_ratio) == (2, 0.8)


def test_model_options_belong_to_the_model_type():
    model_args = parse_train_args(["--output-dir", "x", "--model_type", "transformer", "--d_model", "64"])[0]
    assert model_args.config_overrides() == {"d_model": 64}
    wrong = parse_train_args(["--output-dir", "x", "--model_type", "transformer", "--rnn_type", "lstm"])[0]
    with pytest.raises(ValueError, match="--rnn_type is an option of bahdanau models, not of a transformer model"):
        wrong.config_overrides()
    with pytest.raises(ValueError, match="unknown model type 'rnn'; choose one of bahdanau, transformer"):
        parse_train_args(["--output-dir", "x", "--model_type", "rnn"])[0].config_overrides()


@pytest.mark.slow
def test_evaluate_reads_the_corpus_as_training_did(trained, tmp_path, monkeypatch, capsys):
    settings = json.loads((trained / "translation_data.json").read_text())
    assert settings == {"data": settings["data"], "data_path": None, "src_lang": "en", "tgt_lang": "fr",
                        "test_split": "test_2016_flickr", "d2l_normalize": False, "max_source_length": 64}  # fmt: skip
    normalized = tmp_path / "normalized"
    shutil.copytree(trained, normalized)
    (normalized / "translation_data.json").write_text(json.dumps({**settings, "d2l_normalize": True}))
    calls = []
    real = data.load_parallel_corpus
    monkeypatch.setattr(
        data, "load_parallel_corpus", lambda *args, **kwargs: calls.append((args, kwargs)) or real(*args, **kwargs)
    )
    assert main(["evaluate", "--model", str(normalized), "--max-samples", "4", "--num-beams", "1"]) == 0
    assert calls[-1][0][0] == settings["data"] and calls[-1][1]["normalize"] is True  # no --data needed
    assert main(["evaluate", "--model", str(normalized), "--max-samples", "4", "--no-d2l-normalize"]) == 0
    assert calls[-1][1]["normalize"] is False
    relative = os.path.relpath(settings["data"])  # the training corpus, spelled another way: still its settings
    assert main(["evaluate", "--model", str(normalized), "--data", relative, "--max-samples", "4"]) == 0
    assert calls[-1][1]["normalize"] is True and calls[-1][1]["test_split"] == settings["test_split"]
    assert capsys.readouterr().out.count("BLEU = ") == 3


@pytest.mark.slow
def test_a_folder_without_weights_is_a_clear_error_not_a_traceback(trained, tmp_path, caplog):
    broken = tmp_path / "no_weights"
    shutil.copytree(trained, broken, ignore=shutil.ignore_patterns("*.safetensors", "checkpoint-*"))
    assert error_of(["translate", "--model", str(broken), "Go."], caplog)


@pytest.mark.slow  # the console script in its own process
def test_the_installed_console_script_exits_with_mains_status(tmp_path):
    """`hf-bahdanau` as pip installs it: 0 after its help; 1 after one logged error line, without a traceback."""
    script = shutil.which("hf-bahdanau")
    assert script, "the hf-bahdanau console script is not on PATH (pip install -e . installs it)"
    result = subprocess.run([script, "--help"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout.startswith("usage: hf-bahdanau"), result.stderr[-2000:]
    missing = tmp_path / "missing"
    result = subprocess.run([script, "translate", "--model", str(missing), "Go."], capture_output=True, text=True,
                            timeout=600)  # fmt: skip
    assert result.returncode == 1 and "Traceback" not in result.stderr and result.stdout == ""
    last = result.stderr.strip().splitlines()[-1]
    assert "ERROR" in last and f"{missing} is not a saved model folder" in last


@pytest.mark.slow
def test_evaluate_rejects_a_missing_split(trained, tatoeba_tsv, caplog):
    argv = ["evaluate", "--model", str(trained), "--data", str(tatoeba_tsv), "--split", "dev"]
    assert "no 'dev' split" in error_of(argv, caplog)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_bf16_training_on_gpu(tatoeba_tsv, tmp_path):
    output = tmp_path / "gpu"
    assert main(["train", "--data", str(tatoeba_tsv), "--output-dir", str(output), *TINY, "--max_steps", "10",
                 "--eval_steps", "10", "--save_steps", "10", "--bf16", "true"]) == 0  # fmt: skip
    assert (output / "model.safetensors").is_file()


@pytest.mark.slow
def test_evaluate_finds_a_named_corpus_where_training_read_it(tatoeba_tsv, tmp_path, monkeypatch, capsys, caplog):
    output = tmp_path / "named"
    assert main(["train", "--data", "tatoeba-fra-eng", "--output-dir", str(output), *TINY, "--max_steps", "2",
                 "--logging_steps", "1", "--eval_strategy", "no", "--load_best_model_at_end", "false",
                 "--save_strategy", "no"]) == 0  # fmt: skip
    settings = json.loads((output / "translation_data.json").read_text())
    assert settings["data"] == "tatoeba-fra-eng" and settings["data_path"] == str(tatoeba_tsv.resolve())

    # A new shell: no HF_BAHDANAU_DATA_DIR, and no network.
    monkeypatch.delenv(corpus_cache.DATA_DIR_ENV)
    monkeypatch.setenv(corpus_cache.CACHE_DIR_ENV, str(tmp_path / "cache"))
    offline = lambda url, target: (_ for _ in ()).throw(OSError("network is off"))  # noqa: E731
    monkeypatch.setattr(corpus_cache, "_download", offline)
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
    recorded = tmp_path / run_settings.DATA_SETTINGS_FILE
    for earlier in ({**settings, "data_path": "/old/multi30k"}, {**settings, "data_path": None}):
        recorded.write_text(json.dumps(earlier))
        run_folder.write_run_files(tmp_path, None, settings, resuming=True)
    del settings["data_path"]
    recorded.write_text(json.dumps(settings))
    run_folder.write_run_files(tmp_path, None, {**settings, "data_path": "/new/multi30k"}, resuming=True)
    with pytest.raises(ValueError, match="other corpus settings"):
        run_folder.write_run_files(tmp_path, None, {**settings, "d2l_normalize": True}, resuming=True)


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


@pytest.mark.slow
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


@pytest.mark.slow
def test_translate_replaces_bad_bytes_in_stdin_and_translates_every_line(trained, monkeypatch, capsys, caplog):
    assert main(["translate", "--model", str(trained), "--num-beams", "1", "Go.", "I \ufffd lost.", "Hello!"]) == 0
    expected = capsys.readouterr().out
    stdin = io.TextIOWrapper(io.BytesIO(b"\xef\xbb\xbfGo.\nI \xff lost.\nHello!\n"), encoding="utf-8")
    monkeypatch.setattr(sys, "stdin", stdin)  # a byte order mark, and one byte that is not UTF-8
    assert main(["translate", "--model", str(trained), "--num-beams", "1"]) == 0
    assert capsys.readouterr().out == expected and len(expected.splitlines()) == 3
    assert "stdin: line 2 is not valid UTF-8" in caplog.text


@pytest.mark.slow
def test_translate_and_heatmap_truncate_an_overlong_source_with_a_warning(trained, tmp_path, capsys, caplog):
    folder = tmp_path / "model"
    shutil.copytree(trained, folder, ignore=shutil.ignore_patterns("checkpoint-*"))
    settings = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**settings, "model_max_length": 12}))
    tokenizer = AutoTokenizer.from_pretrained(folder)
    text = " ".join(["I lost."] * 10)
    tokens = len(tokenizer(text)["input_ids"])
    heatmap = tmp_path / "attention.png"
    with caplog.at_level(logging.WARNING, logger="hf_bahdanau.models.source_length"):
        assert main(["translate", "--model", str(folder), "--num-beams", "1", text]) == 0
        assert main(["translate", "--model", str(folder), text, "--heatmap", str(heatmap)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and all(lines)
    warnings = [r.getMessage() for r in caplog.records if "truncated" in r.getMessage()]
    assert len(warnings) == 2 and len(set(warnings)) == 1
    assert f"input of {tokens} tokens truncated to the model's limit of 12 " in warnings[0]
    assert heatmap.read_bytes()[:4] == b"\x89PNG"


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


@pytest.mark.slow
@pytest.mark.parametrize(
    "option, value, error",
    [("--learning_rate", "-0.01", "--learning_rate must not be negative"),
     ("--per_device_train_batch_size", "0", "--per_device_train_batch_size must be a positive integer"),
     ("--gradient_accumulation_steps", "0", "--gradient_accumulation_steps must be a positive integer"),
     ("--optim", "adamw_bnb_8bit", "--optim adamw_bnb_8bit: You need to install `bitsandbytes`"),
     ("--metric_for_best_model", "blue", "--metric_for_best_model 'blue' is not reported; choose one of loss, bleu"),
     ("--max_steps", "0", "--max_steps must be positive")],
)  # fmt: skip
def test_overwrite_checks_every_option_before_touching_the_old_run(option, value, error, trained, tatoeba_tsv,
                                                                   tmp_path, caplog):  # fmt: skip
    if option == "--optim" and importlib.util.find_spec("bitsandbytes"):
        pytest.skip("bitsandbytes is installed")
    previous = tmp_path / "previous"
    shutil.copytree(trained, previous)
    before = folder_bytes(previous)
    assert main(["train", "--data", str(tatoeba_tsv), "--output-dir", str(previous), "--overwrite", *TINY,
                 "--max_steps", "2", option, value]) == 1  # fmt: skip
    message = caplog.records[-1].getMessage()
    assert error in message and "\n" not in message
    assert folder_bytes(previous) == before and sorted(os.listdir(tmp_path)) == ["previous"]


@pytest.mark.slow
@pytest.mark.parametrize("model_type", list(TINY_MODEL))
def test_the_seed_decides_the_weights_and_overwrite_swaps_in_the_new_run(model_type, tatoeba_tsv, tmp_path):
    def weights(folder: Path) -> dict:
        return load_file(folder / "model.safetensors")

    args = ["train", "--data", str(tatoeba_tsv), *TINY_RUN, *TINY_MODEL[model_type], "--max_steps", "3",
            "--logging_steps", "1", "--eval_strategy", "no", "--load_best_model_at_end", "false",
            "--save_strategy", "no"]  # fmt: skip
    assert main([*args, "--output-dir", str(tmp_path / "first"), "--seed", "5"]) == 0
    first = weights(tmp_path / "first")
    assert main([*args, "--output-dir", str(tmp_path / "first"), "--seed", "5", "--overwrite"]) == 0
    again = weights(tmp_path / "first")
    assert first.keys() == again.keys() and all(torch.equal(first[name], again[name]) for name in first)
    assert sorted(os.listdir(tmp_path)) == [".first.lock", "first"]  # the staging folder took the old run's place
    assert main([*args, "--output-dir", str(tmp_path / "other"), "--seed", "6"]) == 0
    other = weights(tmp_path / "other")
    assert not all(torch.equal(first[name], other[name]) for name in first)


def wait_for(condition, process: subprocess.Popen, what: str) -> None:
    deadline = time.time() + 300
    while not condition():
        assert process.poll() is None and time.time() < deadline, f"training ended before {what}"
        time.sleep(0.05)


@pytest.mark.slow
@pytest.mark.parametrize("model_type", ["bahdanau"])  # the Trainer's side, the same for both (a minute each)
def test_an_interrupted_run_resumes_to_the_weights_of_an_uninterrupted_one(
    model_type, tatoeba_tsv, tmp_path, caplog, cli_command
):
    """Ctrl-C saves a checkpoint and ends with one line (in a log file without progress bars); a second run into the
    folder meanwhile is refused; a checkpoint cut off while being written (a run killed then) is skipped; --resume
    needs no size options, starts at the step of the checkpoint it reads and refuses other corpus settings; the final
    weights are those of a run that was never interrupted."""
    caplog.set_level(logging.INFO)
    common = ["train", "--data", str(tatoeba_tsv), *TINY_RUN, "--seed", "3", "--lr_scheduler_type", "constant",
              "--eval_strategy", "no", "--load_best_model_at_end", "false", "--save_steps", "5"]  # fmt: skip
    sizes = TINY_MODEL[model_type]
    uninterrupted, interrupted = tmp_path / "uninterrupted", tmp_path / "interrupted"
    log = tmp_path / "interrupted.log"
    with log.open("w") as stderr:
        process = subprocess.Popen([*cli_command, *common, *sizes, "--output-dir",
                                    str(interrupted), "--max_steps", "2000"], stderr=stderr)  # fmt: skip
    try:
        wait_for(lambda: (interrupted / "checkpoint-10" / run_folder.CHECKPOINT_MANIFEST).is_file(), process,
                 "checkpoint-10")  # fmt: skip
        assert main([*common, *sizes, "--output-dir", str(interrupted), "--max_steps", "5", "--overwrite"]) == 1
        assert caplog.records[-1].getMessage().startswith(f"another run is training into {interrupted}")
        process.send_signal(signal.SIGINT)
        process.wait(timeout=300)
    finally:
        process.kill()
    stderr = log.read_text()
    assert process.returncode == 130 and "Traceback" not in stderr
    # Its log, to a file: no bars, no cursor moves, no blank lines, and the losses as numbers (translate's log to a
    # pipe: test_startup.py; no loading bar for either model type: test_modeling_common.py).
    assert "\r" not in stderr and "\x1b[" not in stderr and "\n\n" not in stderr and "it/s]" not in stderr
    entries = [
        json.loads(line.split(": ", 2)[-1]) for line in stderr.splitlines() if " step " in line and ": {" in line
    ]
    losses = [entry["loss"] for entry in entries if "loss" in entry]
    assert len(losses) >= 2 and all(isinstance(loss, float) and 0 < loss < 20 for loss in losses)
    last = stderr.strip().splitlines()[-1]
    assert "ERROR" in last and "interrupted at step" in last and "continue with --resume" in last
    assert not (interrupted / "model.safetensors").exists()  # it really was interrupted
    checkpoints = sorted(interrupted.glob("checkpoint-*"), key=lambda path: int(path.name.split("-")[1]))
    assert len(checkpoints) == 2 and all(run_folder.is_complete_checkpoint(path) for path in checkpoints)

    newest = checkpoints[-1] / "model.safetensors"  # as if the run had been killed while writing it
    newest.write_bytes(newest.read_bytes()[: newest.stat().st_size // 2])
    # a fast machine may be well past checkpoint-10 when Ctrl-C lands: end 10 steps after the newest checkpoint
    # (with a constant learning rate the weights at a step do not depend on max_steps)
    steps = str(max(30, int(checkpoints[-1].name.removeprefix("checkpoint-")) + 10))
    caplog.clear()
    resume = [*common, "--output-dir", str(interrupted), "--resume"]  # no size options
    assert main([*resume, "--max_steps", steps]) == 0
    messages = [record.getMessage() for record in caplog.records]
    assert any(m.startswith(f"skipping {checkpoints[-1]}: it is incomplete") for m in messages), messages
    assert f"resuming from {checkpoints[0]}" in messages
    saved = int(checkpoints[0].name.removeprefix("checkpoint-"))
    assert f"training starts at step {saved} of {steps}" in messages
    assert json.loads((interrupted / "trainer_state.json").read_text())["global_step"] == int(steps)
    assert json.loads((interrupted / "translation_data.json").read_text())["d2l_normalize"] is False
    weights = (interrupted / "model.safetensors").read_bytes()
    argv = [*resume, "--max_steps", str(int(steps) + 10), "--d2l_normalize", "true"]
    assert "other corpus settings" in error_of(argv, caplog)
    assert (interrupted / "model.safetensors").read_bytes() == weights  # the refused run changed nothing
    assert main([*common, *sizes, "--output-dir", str(uninterrupted), "--max_steps", steps]) == 0
    expected, resumed = load_file(uninterrupted / "model.safetensors"), load_file(interrupted / "model.safetensors")
    for name, tensor in expected.items():
        torch.testing.assert_close(resumed[name], tensor, rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_a_tokenizer_of_another_model_is_refused(trained, tmp_path, caplog):
    other = tmp_path / "other_tokenizer"
    shutil.copytree(trained, other)
    swap_two_tokens(other)  # the same size, other ids
    assert main(["translate", "--model", str(other), "Go."]) == 1
    message = caplog.records[-1].getMessage()
    assert "the tokenizer belongs to another model" in message and "\n" not in message

    config_file = other / "config.json"  # a folder saved before fingerprints: not compared
    config = json.loads(config_file.read_text(encoding="utf-8"))
    assert len(config.pop("tokenizer_fingerprint")) == 16
    config_file.write_text(json.dumps(config), encoding="utf-8")
    assert main(["translate", "--model", str(other), "Go."]) == 0


@pytest.mark.slow
def test_a_pickled_model_is_refused_with_how_to_convert_it(trained, tmp_path, caplog):
    pickled = tmp_path / "pickled"
    shutil.copytree(trained, pickled, ignore=shutil.ignore_patterns("*.safetensors", "checkpoint-*"))
    torch.save(load_file(trained / "model.safetensors"), pickled / "pytorch_model.bin")
    assert main(["translate", "--model", str(pickled), "Go."]) == 1
    message = caplog.records[-1].getMessage()
    assert "holds only pytorch_model.bin" in message and "use_safetensors=False).save_pretrained(" in message
    assert "\n" not in message


def test_train_help_shows_our_options_first_and_the_trainers_on_request(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    ours = "config model_type embedding_size hidden_size dropout d_model vocab_size max_source_length"
    for option in (ours + " generation_num_beams learning_rate resume").split():
        assert f"  --{option} " in text, option
    titles = ("model:", "tokenizer:", "data:", "generation", "training", "run:")
    sections = [text.index(f"\n{title}") for title in titles]
    assert sections == sorted(sections)
    assert "Longer sources are cut (keeping </s>). (default: 64)" in text
    assert "--gradient_accumulation_steps GRADIENT" not in text and "--help-all" in text and "examples:" in text
    assert len(text.splitlines()) < 300
    with pytest.raises(SystemExit):
        main(["train", "--help-all"])
    assert "--gradient_accumulation_steps GRADIENT" in capsys.readouterr().out


@pytest.mark.parametrize("command", ["evaluate", "translate", "publish"])
def test_every_option_has_help_and_each_command_examples(command):
    parser = cli.build_parser()._subparsers._group_actions[0].choices[command]
    assert all(action.help for action in parser._actions), [a.dest for a in parser._actions if not a.help]
    assert parser.epilog.startswith("examples:\n  hf-bahdanau " + command)
    options = {action.dest: action for action in parser._actions}
    if command == "publish":  # the choices the parser offers are those the modules act on
        assert options["license"].default == card.DEFAULT_LICENSE
    else:
        assert tuple(options["quantize"].choices) == quantization.QUANTIZATIONS


@pytest.mark.slow  # four processes
def test_help_and_usage_errors_answer_without_importing_torch(tmp_path):
    script = tmp_path / "hf-bahdanau"  # as pip's console script, which names the process
    script.write_text(
        "import sys\nfrom hf_bahdanau_cli import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print('imported:', sorted({'torch', 'transformers', 'datasets'} & set(sys.modules)))\n"
    )
    missing = str(tmp_path / "missing")
    usage = "usage: hf-bahdanau"
    cases = [(["--help"], usage), (["translate", "--help"], usage),
             (["evaluate", "--num-beams", "0", "--model", "m"], usage),
             (["translate", "--model", missing, "Go."], f"{missing} is not a saved model folder")]  # fmt: skip
    for args, says in cases:
        result = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, timeout=120)
        assert says in result.stdout + result.stderr
        assert result.stdout.splitlines()[-1] == "imported: []", args
