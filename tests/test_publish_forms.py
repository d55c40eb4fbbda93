"""`publish --format transformers` (the standard folder, loaded from the uploaded files with no remote code) and
`publish --format web` (the browser page as a static Space): what a dry run shows, and what would reach the Hub
(`HfApi` patched: nothing leaves the machine)."""

from __future__ import annotations

import shutil
from pathlib import Path
from unittest.mock import patch

import pytest
import torch
import yaml
from helpers import logged_errors, tiny_translator
from huggingface_hub import HfApi, RepoUrl

from hf_bahdanau.cli import main
from hf_bahdanau.models.pipelines import save_for_pipeline

REPO_ID, SPACE = "someone/tiny-de-en-marian", "someone/tiny-de-en-browser"
SENTENCES = ["Zwei Hunde spielen im Schnee.", "Ein Mann fährt Fahrrad."]
TOKEN = "hf_TestTokenThatMustNeverLeak0123456789"


@pytest.fixture
def hub(tmp_path, monkeypatch):
    """`HfApi`'s network methods patched: `create_repo`'s mock, and `uploaded`, the folder where each upload's
    files are copied (exactly those its `allow_patterns` name)."""
    uploaded = tmp_path / "uploaded"

    def upload_folder(**kwargs):
        source = Path(kwargs["folder_path"])
        for name in kwargs["allow_patterns"]:
            (uploaded / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source / name, uploaded / name)

    monkeypatch.setenv("HF_TOKEN", TOKEN)
    url = RepoUrl(f"https://huggingface.co/{REPO_ID}")
    with (
        patch.object(HfApi, "create_repo", return_value=url) as create,
        patch.object(HfApi, "upload_folder", side_effect=upload_folder),
    ):
        yield create, uploaded


def listed(out: str) -> list[str]:
    """The files a dry run lists (its indented lines after "dry run: would upload")."""
    return [line.strip() for line in out.split("dry run: would upload")[1].splitlines()[1:] if line.startswith("  ")]


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-norm", "pre-norm"])
def test_the_standard_folder_is_published_with_a_card_and_loads_with_no_remote_code(
    tokenizer, tmp_path, hub, capsys, norm_first
):
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    create, uploaded = hub
    model = tiny_translator("d2l_transformer", tokenizer, 3, source_language="de", target_language="en",
                            norm_first=norm_first)  # fmt: skip
    folder = save_for_pipeline(model, tokenizer, tmp_path / "model")
    before = sorted(path.name for path in folder.iterdir())
    assert main(["publish", "--model", str(folder), "--format", "transformers", "--repo-id", REPO_ID, "--dry-run"]) == 0
    out = capsys.readouterr().out
    files = ["README.md", "config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
             "tokenizer_config.json"]  # fmt: skip
    assert listed(out) == files and not create.called
    assert sorted(path.name for path in folder.iterdir()) == before  # a dry run writes nothing in the folder
    assert main(["publish", "--model", str(folder), "--format", "transformers", "--repo-id", REPO_ID]) == 0
    assert create.call_args.args == (REPO_ID,) and sorted(path.name for path in uploaded.iterdir()) == files
    card = (uploaded / "README.md").read_text(encoding="utf-8")
    architecture = "BlenderbotForConditionalGeneration" if norm_first else "MarianMTModel"
    assert "no remote code is needed" in card and "trust_remote_code=True" not in card and architecture in card
    assert ("blenderbot" if norm_first else "marian") in yaml.safe_load(card.split("---\n")[1])["tags"]
    standard = AutoModelForSeq2SeqLM.from_pretrained(uploaded)  # no remote code: the standard class
    assert type(standard).__name__ == architecture
    batch = AutoTokenizer.from_pretrained(uploaded)(SENTENCES, return_tensors="pt", padding=True)
    with torch.no_grad():
        ours = model.generate(**batch, num_beams=1, max_new_tokens=12)
        theirs = standard.generate(**batch, num_beams=1, max_new_tokens=12)
    assert torch.equal(ours, theirs)


def test_an_rnn_has_no_standard_folder_to_publish(tokenizer, tmp_path, hub, caplog):
    model = tiny_translator("bahdanau", tokenizer, 3, source_language="de", target_language="en")
    folder = save_for_pipeline(model, tokenizer, tmp_path / "model")
    assert main(["publish", "--model", str(folder), "--format", "transformers", "--repo-id", REPO_ID]) == 1
    (error,) = logged_errors(caplog)
    assert "RNN" in error and "\n" not in error and not hub[0].called


@pytest.fixture
def web_ready():
    """Skips, saying why, where a web export cannot be made (no ONNX packages, no npm runtime)."""
    import importlib.util

    from hf_bahdanau.decoding.export.web import runtime_folder
    from hf_bahdanau.errors import InputError

    if importlib.util.find_spec("onnx") is None or importlib.util.find_spec("onnxruntime") is None:
        pytest.skip("onnx and onnxruntime are not installed (pip install -e '.[onnx]')")
    try:
        runtime_folder()
    except InputError as error:
        pytest.skip(str(error))


@pytest.mark.slow
def test_a_web_export_is_published_as_a_static_space(tokenizer, tmp_path, hub, capsys, web_ready):
    create, uploaded = hub
    model = tiny_translator("bahdanau", tokenizer, 3, source_language="de", target_language="en")
    folder = save_for_pipeline(model, tokenizer, tmp_path / "model")
    assert main(["export", "--format", "web", "--model", str(folder), "--output", str(tmp_path / "page")]) == 0
    capsys.readouterr()
    assert main(["publish", "--model", str(tmp_path / "page"), "--repo-id", SPACE, "--dry-run"]) == 0
    out = capsys.readouterr().out
    files = listed(out)
    assert {"README.md", "index.html", "app.js", "search.js", "model/page.json", "model/tokenizer.json",
            "model/onnx/encoder_model_quantized.onnx", "runtime/ort-wasm-simd-threaded.wasm"} <= set(files)  # fmt: skip
    assert "hf_bahdanau_export.json" not in files and not create.called
    header = yaml.safe_load(out.split("==> README.md <==\n---\n")[1].split("---\n")[0])
    assert header["sdk"] == "static" and header["app_file"] == "index.html"
    # a model folder with --format web: its export, made on the way, gives the same files
    argv = ["publish", "--model", str(folder), "--format", "web", "--repo-id", SPACE]
    assert main([*argv, "--dry-run"]) == 0 and listed(capsys.readouterr().out) == files
    assert main(argv) == 0
    create.assert_called_once_with(SPACE, private=False, exist_ok=True, repo_type="space", space_sdk="static")
    assert sorted(path.relative_to(uploaded).as_posix() for path in uploaded.rglob("*") if path.is_file()) == files
    assert (uploaded / "index.html").read_bytes() == (tmp_path / "page" / "index.html").read_bytes()
