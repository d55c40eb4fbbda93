"""`export --format transformers`: tiny Transformers of both norms written as standard folders (MarianMT, post-norm;
Blenderbot, pre-norm), loaded in a process where this package cannot be imported and without remote code, give our
logits and our greedy and beam-5 translations; what no standard architecture holds is refused in one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import transformers
from helpers import TINY_CORPUS, error_of, make_model

from hf_bahdanau.decoding.export.standard_folder import export_transformers, residual_order
from hf_bahdanau.models.attention import PositionalEncoding
from hf_bahdanau.models.pipelines import save_for_pipeline

NORMS = {"MarianMTModel": False, "BlenderbotForConditionalGeneration": True}  # standard class: norm_first
SENTENCES = [*TINY_CORPUS, *(f"{a} {b}" for a, b in zip(TINY_CORPUS, TINY_CORPUS[3:] + TINY_CORPUS[:3], strict=True))]
NEW_TOKENS = 12

# Run where `hf_bahdanau` cannot be imported: each standard folder through the Auto classes (no remote code), its
# logits for given inputs, greedy and beam-5 translations of SENTENCES, and the translation pipeline where the
# installed transformers has one.
_STANDARD = """
import json, sys
sys.modules["hf_bahdanau"] = None  # as if the package were not installed
import torch, transformers
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, pipeline
folders, sentences, new_tokens = json.loads(sys.argv[1]), json.loads(sys.argv[2]), int(sys.argv[3])
found = {}
for name, folder in folders.items():
    model = AutoModelForSeq2SeqLM.from_pretrained(folder).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    batch = tokenizer(sentences, padding=True, return_tensors="pt")
    inputs = torch.load(f"{folder}/../inputs.pt")  # beside the export
    with torch.no_grad():
        logits = model(**inputs).logits
        greedy = model.generate(**batch, num_beams=1, max_new_tokens=new_tokens)
        beam = model.generate(**batch, num_beams=5, max_new_tokens=new_tokens)
    torch.save(logits, f"{folder}/../logits.pt")
    try:
        pipe = pipeline("translation", model=folder, max_new_tokens=new_tokens, num_beams=1)
        translations = [row["translation_text"] for row in pipe(sentences)]
    except KeyError as error:  # transformers 5 has no translation task
        translations = f"KeyError: {error}"
    found[name] = {"class": type(model).__name__, "module": type(model).__module__,
                   "tokenizer": type(tokenizer).__name__, "input_ids": batch["input_ids"].tolist(),
                   "greedy": greedy.tolist(), "beam": beam.tolist(), "pipeline": translations,
                   "greedy_text": tokenizer.batch_decode(greedy, skip_special_tokens=True)}
print(json.dumps(found))
"""


def _made_model(norm_first: bool, vocab_size: int, **config):
    """A tiny random Transformer 32 wide whose layer norms, output bias and padding-free tokens are not at their
    initial values (so that a misplaced norm or bias shows)."""
    settings = dict(width=32, vocab_size=vocab_size, norm_first=norm_first, init_std=0.18)
    model = make_model("d2l_transformer", **settings, **config)
    generator = torch.Generator().manual_seed(int(norm_first))
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "norm" in name or name == "lm_head.bias":
                parameter.add_(0.2 * torch.randn(parameter.shape, generator=generator))
    return model


def _without_the_package(made: dict[str, dict], sentences: list[str], root: Path) -> None:
    """Run `_STANDARD` on the `export` of each entry of `made` (with its `inputs`), where this package cannot be
    imported; add what it found to each entry (`found`, and the `logits` it computed)."""
    for entry in made.values():
        torch.save(entry["inputs"], entry["export"].parent / "inputs.pt")
    folders = json.dumps({name: str(entry["export"]) for name, entry in made.items()})
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(root / "hf_home"), "PYTHONPATH": ""}
    process = subprocess.run([sys.executable, "-c", _STANDARD, folders, json.dumps(sentences), str(NEW_TOKENS)],
                             cwd=root, env=env, capture_output=True, text=True, timeout=600)  # fmt: skip
    assert process.returncode == 0, process.stderr[-3000:]
    for name, found in json.loads(process.stdout.strip().splitlines()[-1]).items():
        made[name].update(found=found, logits=torch.load(made[name]["export"].parent / "logits.pt"))


def _inputs(tokenizer, sentences: list[str]) -> dict[str, torch.Tensor]:
    """A padded batch of `sentences` with random target tokens `(batch, 7)`, for the logits."""
    batch = tokenizer(sentences, padding=True, return_tensors="pt")
    targets = torch.randint(3, len(tokenizer), (len(sentences), 7), generator=torch.Generator().manual_seed(1))
    return {**batch, "decoder_input_ids": targets}


def _check_same_translations(made: dict, tokenizer, sentences: list[str], beams: int) -> None:
    """`made`'s standard folder translated `sentences` as its `model` does, token for token, with `beams` beams."""
    batch = tokenizer(sentences, padding=True, return_tensors="pt")
    assert made["found"]["input_ids"] == batch["input_ids"].tolist()
    with torch.no_grad():
        ours = made["model"].generate(**batch, num_beams=beams, max_new_tokens=NEW_TOKENS)
    theirs = made["found"]["greedy" if beams == 1 else "beam"]
    assert theirs == ours.tolist()
    assert len({tuple(row) for row in theirs}) > len(sentences) // 4  # the sentences translate differently


@pytest.fixture(scope="module")
def exported(tokenizer, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    """By standard class: our `model`, its `folder`, the `export` and what the process without the package found
    there (`found`, with the `logits` it computed for `inputs`)."""
    root = tmp_path_factory.mktemp("standard")
    made = {}
    for name, norm_first in NORMS.items():
        model = _made_model(norm_first, len(tokenizer))
        folder = save_for_pipeline(model, tokenizer, root / name / "model")
        export = export_transformers(folder, root / name / "export")
        made[name] = {"model": model, "folder": folder, "export": export, "inputs": _inputs(tokenizer, SENTENCES[:4])}
    _without_the_package(made, SENTENCES, root)
    return made


def test_the_residual_order_puts_d2ls_sines_first_as_marian_does():
    table = PositionalEncoding.table(50, 10)[0]  # (positions, d_model), sin and cos interleaved
    reordered = table[:, residual_order(10)]
    angles = torch.arange(50.0)[:, None] / torch.pow(10000, torch.arange(0, 10, 2) / 10)  # (positions, 5)
    torch.testing.assert_close(reordered, torch.cat([angles.sin(), angles.cos()], dim=1))


@pytest.mark.parametrize("name", NORMS)
def test_the_folder_loads_as_a_standard_class_without_the_package(exported, name):
    found, export = exported[name]["found"], exported[name]["export"]
    assert found["class"] == name and found["module"].startswith("transformers.models.")
    assert found["tokenizer"] in ("PreTrainedTokenizerFast", "TokenizersBackend")
    config = json.loads((export / "config.json").read_text())
    assert config["model_type"] == {"MarianMTModel": "marian", "BlenderbotForConditionalGeneration": "blenderbot"}[name]
    assert "auto_map" not in config and not list(export.glob("*.py"))
    assert (export / "model.safetensors").is_file() and not list(export.glob("*.bin"))
    assert config["tokenizer_class"] == "PreTrainedTokenizerFast"  # a class transformers 4 has too
    tokenizer_config = json.loads((export / "tokenizer_config.json").read_text())
    assert "tokenizer_class" not in tokenizer_config  # where 5.0-5.2 would compare it with Marian's tokenizer
    assert tokenizer_config["model_input_names"] == ["input_ids", "attention_mask"]  # what the standard models take


@pytest.mark.parametrize("name", NORMS)
def test_the_standard_folder_gives_our_logits(exported, name):
    made = exported[name]
    with torch.no_grad():
        ours = made["model"](**made["inputs"]).logits  # (batch, tgt_len, vocab)
    assert (made["logits"] - ours).abs().max() < 1e-4


@pytest.mark.parametrize("name", NORMS)
@pytest.mark.parametrize("beams", [1, 5])
def test_the_standard_folder_translates_as_we_do(exported, tokenizer, name, beams):
    _check_same_translations(exported[name], tokenizer, SENTENCES, beams)


@pytest.mark.slow  # the session's tiny trained Transformer (post-norm)
def test_a_trained_model_translates_as_we_do(trained_folder, tatoeba_tsv, tmp_path):
    from transformers import AutoTokenizer

    from hf_bahdanau.models.modeling_transformer import TransformerForConditionalGeneration

    folder = trained_folder("d2l_transformer")
    lines = tatoeba_tsv.read_text(encoding="utf-8").splitlines()
    sentences = [line.split("\t")[0] for line in lines[1000::1500][:36]]
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = TransformerForConditionalGeneration.from_pretrained(folder).eval()
    export = export_transformers(folder, tmp_path / "trained" / "export")
    made = {"trained": {"model": model, "export": export, "inputs": _inputs(tokenizer, sentences[:4])}}
    _without_the_package(made, sentences, tmp_path)
    with torch.no_grad():
        assert (made["trained"]["logits"] - model(**made["trained"]["inputs"]).logits).abs().max() < 1e-4
    for beams in (1, 5):
        _check_same_translations(made["trained"], tokenizer, sentences, beams)


@pytest.mark.parametrize("name", NORMS)
def test_transformers_translation_pipeline_where_it_has_one(exported, name):
    found = exported[name]["found"]
    if int(transformers.__version__.split(".")[0]) >= 5:  # transformers 5 removed the task
        assert found["pipeline"].startswith("KeyError")
    else:
        assert found["pipeline"] == found["greedy_text"]


def test_the_export_keeps_our_generation_settings(exported):
    for made in exported.values():
        settings = json.loads((made["export"] / "generation_config.json").read_text())
        ours = made["model"].generation_config
        assert (settings["num_beams"], settings["max_new_tokens"]) == (ours.num_beams, ours.max_new_tokens)
        assert settings["decoder_start_token_id"] == 1 and settings.get("forced_eos_token_id") is None


@pytest.mark.parametrize(
    "config",
    [dict(tie_word_embeddings=True), dict(tie_word_embeddings=True, tie_encoder_decoder_embeddings=True)],
    ids=["decoder-tied", "all-tied"],
)
@pytest.mark.parametrize("name", NORMS)
def test_tied_embeddings_export_exactly_or_are_refused(tokenizer, tmp_path, caplog, name, config):
    model = _made_model(NORMS[name], len(tokenizer), **config)
    folder = save_for_pipeline(model, tokenizer, tmp_path / "model")
    argv = ["export", "--model", str(folder), "--format", "transformers", "--output", str(tmp_path / "export")]
    if NORMS[name] and not config.get("tie_encoder_decoder_embeddings"):
        assert "no exact standard equivalent" in error_of(argv, caplog)
        assert not (tmp_path / "export").exists()
        return
    from transformers import AutoModelForSeq2SeqLM

    from hf_bahdanau.cli import main

    assert main(argv) == 0
    assert "needs transformers 5" not in caplog.text  # tied embeddings load alike on transformers 4
    standard = AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "export").eval()
    inputs = tokenizer(SENTENCES[:3], padding=True, return_tensors="pt")
    with torch.no_grad():
        difference = (
            standard(**inputs, decoder_input_ids=inputs["input_ids"]).logits
            - model(**inputs, decoder_input_ids=inputs["input_ids"]).logits
        )
    assert type(standard).__name__ == name and difference.abs().max() < 1e-4


def test_a_blenderbot_folder_with_untied_embeddings_says_it_needs_transformers_5(exported, caplog, tmp_path):
    export_transformers(exported["BlenderbotForConditionalGeneration"]["folder"], tmp_path / "export")
    assert "needs transformers 5" in caplog.text
    caplog.clear()
    export_transformers(exported["MarianMTModel"]["folder"], tmp_path / "marian")
    assert "needs transformers 5" not in caplog.text


def test_the_rnn_is_refused_in_one_line(tmp_path, caplog):
    make_model("bahdanau").save_pretrained(tmp_path / "rnn")
    message = error_of(["export", "--model", str(tmp_path / "rnn"), "--format", "transformers", "--output",
                        str(tmp_path / "export")], caplog)  # fmt: skip
    assert "no standard transformers architecture" in message and not (tmp_path / "export").exists()


def test_a_quantization_is_refused_for_a_standard_folder(exported, tmp_path, caplog):
    folder = exported["MarianMTModel"]["folder"]
    message = error_of(["export", "--model", str(folder), "--format", "transformers", "--output",
                        str(tmp_path / "export"), "--quantization", "int8"], caplog)  # fmt: skip
    assert "--quantization" in message and not (tmp_path / "export").exists()


def test_overwrite_replaces_a_standard_export_and_nothing_else(exported, tmp_path, caplog):
    folder = exported["MarianMTModel"]["folder"]
    output = tmp_path / "export"
    argv = ["export", "--model", str(folder), "--format", "transformers", "--output", str(output)]
    from hf_bahdanau.cli import main

    assert main(argv) == 0
    assert "--overwrite" in error_of(argv, caplog)
    assert main([*argv, "--overwrite"]) == 0
    listed = json.loads((output / "hf_bahdanau_export.json").read_text())["files"]
    assert sorted(listed) == sorted(path.name for path in output.iterdir())
    (output / "notes.txt").write_text("mine")
    assert "notes.txt" in error_of([*argv, "--overwrite"], caplog)
    assert (output / "notes.txt").read_text() == "mine"
