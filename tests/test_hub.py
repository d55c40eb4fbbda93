"""Publishing (no network, ever): the model card of a tiny trained and evaluated folder, `eval_results.json`, the
upload through a patched `HfApi`, the error paths, and download by repo id from a Hub cache snapshot."""

import ast
import json
import os
import re
import shutil
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from unittest.mock import patch

import httpx
import huggingface_hub
import pytest
from conftest import load_script
from helpers import TINY
from huggingface_hub import HfApi, ModelCard, RepoUrl
from huggingface_hub.errors import HfHubHTTPError
from huggingface_hub.utils import filter_repo_objects
from safetensors.torch import load_file

from hf_bahdanau.cli import main
from hf_bahdanau.decoding.loading import load_translation_model
from hf_bahdanau.models.pipelines import TranslationPipeline
from hf_bahdanau.publishing.evaluations import read_evaluations
from hf_bahdanau.publishing.upload import files_to_upload, publish

REPO_ID = "someone/tiny-en-fr"
URL = f"https://huggingface.co/{REPO_ID}"
TOKEN = "hf_TestTokenThatMustNeverLeak0123456789"
REVISION = "0123456789abcdef0123456789abcdef01234567"
FORBIDDEN = HfHubHTTPError(
    "403 Forbidden: no write access\n(Request ID: x)", response=httpx.Response(403, request=httpx.Request("POST", URL))
)
NEEDED = {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
          "README.md", "training_curves.png"}  # fmt: skip


@contextmanager
def fake_hub():
    """`HfApi` patched at its network methods; `uploads` gets, per upload, its arguments, the files that
    upload_folder would send (huggingface_hub's own filter) and the card's text at that moment."""
    uploads = []

    def upload_folder(**kwargs):
        folder = Path(kwargs["folder_path"])
        names = [path.relative_to(folder).as_posix() for path in folder.rglob("*") if path.is_file()]
        sent = filter_repo_objects(names, allow_patterns=kwargs.get("allow_patterns"),
                                   ignore_patterns=kwargs.get("ignore_patterns"))  # fmt: skip
        uploads.append({**kwargs, "files": set(sent), "card": (folder / "README.md").read_text(encoding="utf-8")})

    with (
        patch.object(HfApi, "create_repo", return_value=RepoUrl(URL)) as create_repo,
        patch.object(HfApi, "create_branch") as create_branch,
        patch.object(HfApi, "upload_folder", side_effect=upload_folder),
    ):
        yield create_repo, create_branch, uploads


def needed_files(folder):
    """What a user needs: the files above and the folder's remote code, whatever the model type."""
    return NEEDED | {path.name for path in folder.glob("*.py")}


@pytest.fixture(scope="module")
def trained(tmp_path_factory, tatoeba_tsv):
    """A tiny model trained by `hf-bahdanau train ... --push_to_hub` (Hub patched), then evaluated three times: the
    test and validation splits with the model's beams (2), the test split greedily. Tests that evaluate again or
    change the folder work on a copy."""
    folder = tmp_path_factory.mktemp("run") / "model"
    argv = ["train", "--data", str(tatoeba_tsv), "--output-dir", str(folder), *TINY, "--max_steps", "12",
            "--eval_steps", "6", "--save_steps", "6", "--push_to_hub", "--hub_model_id", REPO_ID]  # fmt: skip
    with fake_hub() as (create_repo, create_branch, uploads), pytest.MonkeyPatch.context() as env:
        env.setenv("HF_TOKEN", TOKEN)
        env.setattr(sys, "argv", ["hf-bahdanau", *argv])  # as the console script sees it
        assert main() == 0
        push = {"create_repo": create_repo.call_args, "create_branch": create_branch.call_args, "uploads": uploads}
    for split, beams in (("test", []), ("validation", []), ("test", ["--num-beams", "1"])):
        assert main(["evaluate", "--model", str(folder), "--split", split, "--max-samples", "8", *beams]) == 0
    return {"folder": folder, "argv": argv, "push": push}


@pytest.mark.slow
def test_train_push_to_hub_uploads_our_card_and_the_selection(trained):
    folder, push = trained["folder"], trained["push"]
    assert push["create_repo"].args == (REPO_ID,) and push["create_repo"].kwargs["private"] is False
    assert push["create_branch"] is None  # no --hub_revision: main
    (upload,) = push["uploads"]  # one push, at the end: the Trainer pushed nothing itself
    assert upload["repo_id"] == REPO_ID and upload["revision"] is None
    assert any(folder.glob("checkpoint-*/optimizer.pt"))  # there was something to leave out
    assert upload["files"] == needed_files(folder) and "modeling_bahdanau.py" in upload["files"]
    card = ModelCard(upload["card"])
    assert card.data.library_name == "transformers" and "bahdanau" in card.data.tags
    assert "hf-bahdanau train --data" in card.text and "More information needed" not in card.text  # not generic


@pytest.mark.slow
def test_evaluate_keeps_one_result_per_split_and_decoding(trained, tmp_path, capsys):
    folder = tmp_path / "model"  # a copy: the shared folder keeps the fixture's three results
    shutil.copytree(trained["folder"], folder, ignore=shutil.ignore_patterns("checkpoint-*"))
    before = {(result["split"], result["num_beams"]): result["samples"] for result in read_evaluations(folder)}
    assert before == {("test", 2): 8, ("validation", 2): 8, ("test", 1): 8}
    for samples in (5, 6):  # each greedy evaluation replaces the one before (the fixture's, then 5), not the beam one
        argv = [
            "evaluate",
            "--model",
            str(folder),
            "--split",
            "test",
            "--max-samples",
            str(samples),
            "--num-beams",
            "1",
        ]
        assert main(argv) == 0
    printed = capsys.readouterr().out
    results = {(result["split"], result["num_beams"]): result for result in read_evaluations(folder)}
    assert sorted(results) == [("test", 1), ("test", 2), ("validation", 2)]  # 2: the model's beams
    test = results["test", 1]
    assert (test["samples"], test["dataset"]) == (6, "fra-eng.tsv")
    assert (test["source_language"], test["target_language"]) == ("en", "fr")
    assert f"BLEU = {test['bleu']:.2f}  ({test['bleu_signature']})" in printed
    assert f"chrF = {test['chrf']:.2f}  ({test['chrf_signature']})" in printed
    assert results["test", 2]["samples"] == results["validation", 2]["samples"] == 8


@pytest.fixture(scope="module")
def card(trained):
    """The card that `publish --dry-run` shows (and writes nowhere), as `ModelCard` reads it."""
    folder = trained["folder"]
    return ModelCard(publish(folder, REPO_ID, license="mit", dry_run=True).card_text)


@pytest.mark.slow
def test_card_metadata_and_model_index_are_the_stored_figures(trained, card):
    folder = trained["folder"]
    data = card.data
    assert data.language == ["en", "fr"] and data.license == "mit" and data.pipeline_tag == "translation"
    assert {"translation", "seq2seq", json.loads((folder / "config.json").read_text())["model_type"]} <= set(data.tags)
    indexed = {(result.dataset_split, result.metric_name): (result.metric_value, result.metric_config)
               for result in data.eval_results}  # fmt: skip
    decoding = {1: "greedy", 2: "beam 2"}
    stored = {}
    for result in read_evaluations(folder):
        for metric, name in (("bleu", "BLEU"), ("bleu_lowercase", "BLEU lowercased"), ("chrf", "chrF")):
            label = f"{name} ({decoding[result['num_beams']]})"
            stored[result["split"], label] = (result[metric], result[f"{metric}_signature"])
    assert indexed == stored and len(stored) == 9  # 3 results (test, validation, test greedy) x 3 scores


@pytest.mark.slow
def test_card_body_tells_architecture_training_and_results(trained, card):
    folder = trained["folder"]
    model, _ = load_translation_model(str(folder))
    state = json.loads((folder / "trainer_state.json").read_text())
    best = max(entry["eval_bleu"] for entry in state["log_history"] if "eval_bleu" in entry)
    text = card.text
    assert f"{model.num_parameters():,} parameters" in text and "| `hidden_size` | 32 |" in text
    assert "Bahdanau Attention" in text and "arxiv.org/abs/1409.0473" in text  # chapter and paper of the type
    assert f"**Steps:** {state['global_step']} " in text and f"validation BLEU during training:** {best:.2f}" in text
    assert "```bash\nhf-bahdanau train " + " ".join(trained["argv"][1:]) in text  # the exact command
    for result in read_evaluations(folder):
        assert f"| {result['split']} | {result['samples']} | {result['num_beams']} | {result['bleu']} |" in text
    signatures = {f"- BLEU `{result['bleu_signature']}`, chrF `{result['chrf_signature']}`"
                  for result in read_evaluations(folder)}  # fmt: skip
    assert [line for line in text.splitlines() if line.startswith("- BLEU `")] == sorted(signatures)  # each once
    assert "![Training curves](training_curves.png)" in text


@pytest.mark.slow
def test_publish_uploads_exactly_the_selection_and_never_the_token(trained, tmp_path, monkeypatch, caplog, capsys):
    folder = tmp_path / "model"
    shutil.copytree(trained["folder"], folder)
    (folder / "runs").mkdir()
    (folder / "runs" / "events.out.tfevents.1").write_bytes(b"log")
    for junk in ("training_args.bin", "optimizer.pt", "train.log"):
        (folder / junk).write_bytes(b"junk")
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    with fake_hub() as (create_repo, create_branch, uploads):
        status = main(["publish", "--model", str(folder), "--repo-id", REPO_ID, "--private", "--revision", "v1",
                       "--commit-message", "first release"])  # fmt: skip
    assert status == 0
    create_repo.assert_called_once_with(REPO_ID, private=True, exist_ok=True)
    create_branch.assert_called_once_with(REPO_ID, branch="v1", exist_ok=True)
    (upload,) = uploads
    assert (upload["repo_id"], upload["revision"], upload["commit_message"]) == (REPO_ID, "v1", "first release")
    assert upload["files"] == needed_files(folder) | {"eval_results.json"}
    out = capsys.readouterr()
    assert out.out.strip().splitlines()[-1] == URL
    for path in folder.rglob("*"):
        assert not path.is_file() or TOKEN.encode() not in path.read_bytes(), path
    assert TOKEN not in caplog.text + out.out + out.err


@pytest.mark.slow
def test_make_model_cards_script_writes_the_publish_card(trained, tmp_path):
    folder = trained["folder"]
    shown = publish(folder, REPO_ID, dry_run=True).card_text
    written = load_script("make_model_cards").main(["--model", str(folder), "--repo-id", REPO_ID,
                                                    "--output", str(tmp_path / "card.md")])  # fmt: skip
    assert written.read_text(encoding="utf-8") == shown


def _not_a_model(folder):
    shutil.rmtree(folder)
    folder.mkdir()
    (folder / "config.json").write_text("{}")


@pytest.mark.slow
@pytest.mark.parametrize(
    ("repo_id", "change", "failure", "message"),
    [
        (REPO_ID, lambda env, folder: env.delenv("HF_TOKEN"), None, "no Hugging Face token"),
        ("just-a-name", None, None, "not of the form OWNER/NAME"),
        ("someone/bad/name", None, None, "not of the form OWNER/NAME"),
        (REPO_ID, lambda env, folder: _not_a_model(folder), None, "is not a trained model folder"),
        (REPO_ID, None, httpx.ConnectError("[Errno 111] Connection refused"), "failed: [Errno 111] Connection refused"),
        (REPO_ID, None, FORBIDDEN, "failed: 403 Forbidden"),
    ],
)
def test_publish_errors_are_one_line(trained, tmp_path, monkeypatch, caplog, repo_id, change, failure, message):
    folder = tmp_path / "model"
    shutil.copytree(trained["folder"], folder, ignore=shutil.ignore_patterns("checkpoint-*"))
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    if change:
        change(monkeypatch, folder)
    with fake_hub() as (create_repo, _, uploads):
        create_repo.side_effect = failure
        assert main(["publish", "--model", str(folder), "--repo-id", repo_id]) == 1
    (error,) = [record.getMessage() for record in caplog.records if record.levelname == "ERROR"]
    assert message in error and "\n" not in error and TOKEN not in caplog.text
    assert not uploads


@pytest.mark.slow
def test_offline_publish_is_a_one_line_error_and_dry_run_still_works(trained, tmp_path, monkeypatch, caplog, capsys):
    folder = tmp_path / "model"
    shutil.copytree(trained["folder"], folder, ignore=shutil.ignore_patterns("checkpoint-*"))
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)  # as HF_HUB_OFFLINE=1 sets it
    assert main(["publish", "--model", str(folder), "--repo-id", REPO_ID]) == 1  # the real HfApi: no patch
    (error,) = [record.getMessage() for record in caplog.records if record.levelname == "ERROR"]
    assert "offline" in error and "\n" not in error and TOKEN not in caplog.text
    assert main(["publish", "--model", str(folder), "--repo-id", REPO_ID, "--dry-run"]) == 0  # offline too
    printed = capsys.readouterr().out.splitlines()
    assert printed[-1] == f"model card: would be written to {folder / 'README.md'} (shown above; nothing written)"
    listed = printed[printed.index(f"dry run: would upload to {REPO_ID}:") + 1 : -1]
    assert {line.strip() for line in listed} == needed_files(folder) | {"eval_results.json"}


def test_train_push_to_hub_checks_repo_id_and_token_before_training(tatoeba_tsv, tmp_path, monkeypatch, caplog):
    output = tmp_path / "never"
    args = ["train", "--data", str(tatoeba_tsv), "--output-dir", str(output), *TINY, "--push_to_hub"]
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    assert main([*args, "--hub_model_id", "no-owner"]) == 1
    monkeypatch.delenv("HF_TOKEN")
    assert main([*args, "--hub_model_id", REPO_ID]) == 1
    errors = [record.getMessage() for record in caplog.records if record.levelname == "ERROR"]
    assert "not of the form OWNER/NAME" in errors[0] and "no Hugging Face token" in errors[1]
    assert not output.exists()


# ---- download: the published files as a Hub cache snapshot ------------------------------------------------


def snapshot_dir(hf_home):
    """Where a download of `REPO_ID` at `REVISION` sits in the Hub cache of `hf_home`."""
    return hf_home / "hub" / f"models--{REPO_ID.replace('/', '--')}" / "snapshots" / REVISION


@pytest.fixture(scope="module")
def hub_home(trained, card, tmp_path_factory):
    """An HF_HOME whose Hub cache holds the published files of `REPO_ID` at `REVISION`, as a download leaves it."""
    home = tmp_path_factory.mktemp("hf_home")
    snapshot = snapshot_dir(home)
    snapshot.mkdir(parents=True)
    for name in files_to_upload(trained["folder"]):
        shutil.copy(trained["folder"] / name, snapshot / name)
    (snapshot.parents[1] / "refs").mkdir()
    (snapshot.parents[1] / "refs" / "main").write_text(REVISION)  # no trailing newline
    return home


TEXTS = ["Go.", "I lost my keys.", "He's calm."]
DOWNLOAD_CHECK = f"""
import json
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, pipeline
model = AutoModelForSeq2SeqLM.from_pretrained({REPO_ID!r}, trust_remote_code=True)
assert type(model).__module__.startswith("transformers_modules"), type(model).__module__
tokenizer = AutoTokenizer.from_pretrained({REPO_ID!r}, trust_remote_code=True)
batch = tokenizer({TEXTS!r}, return_tensors="pt", padding=True)
generated = model.generate(**batch, num_beams=2, max_new_tokens=10)
print(json.dumps(tokenizer.batch_decode(generated, skip_special_tokens=True)))
translator = pipeline("bahdanau-translation", model={REPO_ID!r}, trust_remote_code=True)
print(json.dumps([row["translation_text"] for row in translator({TEXTS!r}, num_beams=2, max_new_tokens=10)]))
"""


@pytest.fixture(scope="module")
def downloaded(hub_home, tmp_path_factory):
    """One offline process where hf_bahdanau cannot be imported, with the cache above: it runs the card's usage
    snippet as written, then loads `REPO_ID` with the Auto classes and the pipeline. The snippet, the output."""
    readme = snapshot_dir(hub_home) / "README.md"
    (snippet,) = re.findall(r"```python\n(.*?)```", readme.read_text(encoding="utf-8"), flags=re.DOTALL)
    script = 'import sys\nsys.modules["hf_bahdanau"] = None  # as if not installed\n' + snippet + DOWNLOAD_CHECK
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(hub_home), "PYTHONPATH": ""}
    result = subprocess.run([sys.executable, "-c", script], env=env,
                            cwd=tmp_path_factory.mktemp("elsewhere"), capture_output=True, text=True,
                            timeout=300)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    return snippet, result.stdout.strip().splitlines()


def folder_translations(folder, texts, **options):
    model, tokenizer = load_translation_model(str(folder))
    translator = TranslationPipeline(model=model, tokenizer=tokenizer)
    return [row["translation_text"] for row in translator(texts, **options)]


@pytest.mark.slow
def test_download_by_repo_id_without_the_package(trained, downloaded):
    *_, by_generate, by_pipeline = downloaded[1]
    expected = folder_translations(trained["folder"], TEXTS, num_beams=2, max_new_tokens=10)
    assert json.loads(by_generate) == expected and json.loads(by_pipeline) == expected


@pytest.mark.slow
def test_the_cards_usage_snippet_runs_from_the_hub_cache(trained, downloaded):
    snippet, output = downloaded
    assert f'repo_id = "{REPO_ID}"' in snippet
    by_pipeline, by_generate = output[-4:-2]  # the snippet's two prints
    example = re.search(r"sentences = \[(.*)\]", snippet).group(1)
    expected = folder_translations(trained["folder"], [json.loads(example)], num_beams=2)
    assert by_pipeline == str([{"translation_text": expected[0]}])
    decoded = ast.literal_eval(by_generate)  # the printed list of decoded translations
    assert isinstance(decoded, list) and len(decoded) == 1 and isinstance(decoded[0], str)


@pytest.mark.slow
def test_fine_tune_a_downloaded_model_on_another_corpus(trained, hub_home, tatoeba_tsv, tmp_path, monkeypatch):
    corpus = tmp_path / "more.tsv"  # another corpus: sentences from deep in Tatoeba, not among the first ones
    corpus.write_text("".join(tatoeba_tsv.read_text(encoding="utf-8").splitlines(keepends=True)[40000:40120]))
    output = tmp_path / "fine-tuned"
    # the Hub cache of HF_HOME=hub_home, where downloads are looked up (offline: only there)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(hub_home / "hub"))
    assert main(["train", "--model_name_or_path", REPO_ID, "--data", str(corpus), "--output-dir", str(output),
                 *TINY, "--max_steps", "5", "--eval_strategy", "no", "--save_strategy", "no",
                 "--load_best_model_at_end", "false"]) == 0  # fmt: skip
    snapshot = snapshot_dir(hub_home)
    assert (output / "tokenizer.json").read_text() == (snapshot / "tokenizer.json").read_text()
    assert json.loads((output / "translation_data.json").read_text())["data"] == str(corpus)
    before, after = load_file(snapshot / "model.safetensors"), load_file(output / "model.safetensors")
    assert before.keys() == after.keys() and any(not before[name].equal(after[name]) for name in before)
