"""What `export` and the CTranslate2 export cache may replace, and what they read: only folders that are exports this
package made, never a model folder, a path inside one, a folder a user made or a file a user added to an export; a
cache redone when any file it was made from changes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from helpers import error_of, folder_bytes, tiny_translator

from hf_bahdanau.cli import main
from hf_bahdanau.decoding.export.ctranslate2 import EXPORT_INFO, cached_export, export_ctranslate2
from hf_bahdanau.registry import check_saved_model_type

pytest.importorskip("ctranslate2")


@pytest.fixture(scope="module")
def model(tokenizer):
    return tiny_translator("d2l_transformer", tokenizer, beams=2, max_new_tokens=8)


@pytest.fixture
def model_copy(folder: Path, tmp_path: Path) -> Path:
    """A copy of the tiny saved Transformer that a test may change."""
    return Path(shutil.copytree(folder, tmp_path / "model"))


def test_a_cached_export_is_made_again_when_the_generation_config_changes(model_copy):
    export = cached_export(model_copy)
    settings = json.loads((model_copy / "generation_config.json").read_text())
    (model_copy / "generation_config.json").write_text(json.dumps({**settings, "no_repeat_ngram_size": 2}))
    again = cached_export(model_copy)
    assert json.loads((again / "generation_config.json").read_text())["no_repeat_ngram_size"] == 2
    assert again == export


def test_export_never_replaces_a_folder_it_did_not_make(model_copy, tmp_path):
    mine = tmp_path / "project"
    (mine / "src").mkdir(parents=True)
    (mine / "notes.txt").write_text("mine")
    (mine / "src" / "main.py").write_text("print()")
    with pytest.raises(ValueError, match="not an export of this package"):
        export_ctranslate2(model_copy, mine, overwrite=True)
    assert (mine / "notes.txt").read_text() == "mine" and (mine / "src" / "main.py").is_file()


def test_export_never_writes_into_a_model_folder(model_copy):
    for inside in (model_copy / "tokenizer.json", model_copy / "sub" / "ct2", model_copy):
        with pytest.raises(ValueError, match="model folder"):
            export_ctranslate2(model_copy, inside, overwrite=True)
    assert (model_copy / "tokenizer.json").is_file() and not (model_copy / "sub").exists()
    check_saved_model_type(model_copy)


def test_export_keeps_a_users_folder_named_like_its_working_folder(model_copy, tmp_path):
    output = tmp_path / "mydata"
    own = tmp_path / "mydata.exporting"
    own.mkdir()
    (own / "important.txt").write_text("keep")
    export_ctranslate2(model_copy, output)
    assert (own / "important.txt").read_text() == "keep"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["model", "mydata", "mydata.exporting"]


def test_export_replaces_an_earlier_export_only_when_asked(model_copy, tmp_path):
    output = export_ctranslate2(model_copy, tmp_path / "ct2")
    (output / "model.bin").write_bytes(b"stale")
    with pytest.raises(ValueError, match="holds an earlier export: pass --overwrite"):
        export_ctranslate2(model_copy, output)
    export_ctranslate2(model_copy, output, overwrite=True)
    assert (output / "model.bin").read_bytes() != b"stale" and (output / EXPORT_INFO).is_file()
    assert sorted(path.name for path in tmp_path.iterdir()) == ["ct2", "model"]  # no working folder left


@pytest.mark.parametrize("info", ["listing its files", "of an earlier release"])
def test_export_overwrite_never_deletes_a_file_the_export_did_not_write(model_copy, tmp_path, caplog, info):
    output = export_ctranslate2(model_copy, tmp_path / "ct2")
    if info == "of an earlier release":  # an export whose info lists no files
        record = json.loads((output / EXPORT_INFO).read_text())
        (output / EXPORT_INFO).write_text(json.dumps({k: v for k, v in record.items() if k != "files"}))
    (output / "notes.txt").write_text("mine")
    (output / "evaluations").mkdir()
    before = folder_bytes(output)
    argv = ["export", "--model", str(model_copy), "--output", str(output), "--overwrite"]
    assert error_of(argv, caplog).startswith(f"{output} holds files its export did not write (evaluations, notes.txt)")
    assert folder_bytes(output) == before
    (output / "notes.txt").unlink()
    (output / "evaluations").rmdir()
    assert main(argv) == 0 and (output / "model.bin").is_file()


def test_a_missing_tokenizer_json_is_named(model_copy, tmp_path):
    (model_copy / "tokenizer.json").unlink()
    with pytest.raises(ValueError, match="has no tokenizer.json"):
        export_ctranslate2(model_copy, tmp_path / "ct2")
    with pytest.raises(ValueError, match="has no tokenizer.json"):
        cached_export(model_copy)


def test_an_export_given_as_a_model_names_the_engine_option(model_copy, tmp_path):
    from hf_bahdanau.decoding.export.standard_folder import export_transformers

    export = export_ctranslate2(model_copy, tmp_path / "ct2")
    with pytest.raises(ValueError, match="is a CTranslate2 export: translate with it through --engine ctranslate2"):
        check_saved_model_type(export)
    with pytest.raises(ValueError, match="is a standard transformers export, for transformers without this package"):
        check_saved_model_type(export_transformers(model_copy, tmp_path / "standard"))


@pytest.mark.parametrize("format", ["ctranslate2", "transformers"])
def test_a_folder_missing_a_weight_is_refused_as_translate_refuses_it(model_copy, tmp_path, caplog, format):
    from safetensors.torch import load_file, save_file

    weights = load_file(model_copy / "model.safetensors")
    missing = next(name for name in sorted(weights) if "layers.0" in name and name.endswith("weight"))
    save_file({name: tensor for name, tensor in weights.items() if name != missing}, model_copy / "model.safetensors",
              metadata={"format": "pt"})  # fmt: skip
    output = tmp_path / "export"
    error = error_of(["export", "--model", str(model_copy), "--format", format, "--output", str(output)], caplog)
    assert "do not fit" in error and "1 missing" in error and not output.exists()
    assert error == error_of(["translate", "--model", str(model_copy), "Ein Hund."], caplog)


@pytest.mark.parametrize("format", ["ctranslate2", "transformers", "onnx"])
def test_a_web_option_on_another_format_is_refused_before_anything_is_written(model_copy, tmp_path, caplog, format):
    output = tmp_path / "export"
    argv = ["export", "--model", str(model_copy), "--format", format, "--output", str(output), "--runtime", "web"]
    assert error_of(argv, caplog) == f"--runtime applies to --format web: --format {format} writes no page"
    assert not output.exists()
