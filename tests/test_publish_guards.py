"""A Hub token is never written or printed (files, checkpoints, logs, the card), and `publish` uploads only the
model's code (and its quality estimator), refuses repo ids the Hub refuses, writes nothing on a dry run and keeps a
hand-written card unless told."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import huggingface_hub
import pytest
from helpers import TINY, folder_bytes, logged_errors

from hf_bahdanau.cli import main
from hf_bahdanau.decoding.quality.estimator import ESTIMATOR_FILE
from hf_bahdanau.publishing import recorded_command, upload
from hf_bahdanau.publishing.card import CARD_MARKER, make_card

REPO_ID = "someone/tiny-en-fr"
URL = f"https://huggingface.co/{REPO_ID}"
# Look like real Hub tokens (hf_ and 34 characters): the CLI's, the config file's, another secret's.
CLI_TOKEN = "hf_CommandLineTokenNeverToBeSeen0123"
FILE_TOKEN = "hf_ConfigFileTokenNeverToBeSeen01234"
PASSWORD = "pa55-w0rd-never-to-be-seen"
SECRETS = (CLI_TOKEN, FILE_TOKEN, PASSWORD)
REAL_UPLOAD = upload.upload_files
SENTENCES = ["i see the dog .", "we like green tea .", "they want a red house .", "you need the cat ."]


def files_holding(folder: Path, secrets=SECRETS) -> list[str]:
    """The files under `folder` (any depth, binary ones too) whose bytes hold one of `secrets`."""
    return [str(path) for path in sorted(folder.rglob("*"))
            if path.is_file() and any(secret.encode() in path.read_bytes() for secret in secrets)]  # fmt: skip


@pytest.fixture
def uploads(monkeypatch) -> list[dict]:
    """`upload.upload_files` replaced: nothing reaches the network; each call's arguments are kept (the token too)."""
    calls = []

    def fake_upload(folder, repo_id, files, private, revision, commit_message, token):
        calls.append({"folder": folder, "repo_id": repo_id, "files": list(files), "token": token,
                      "card": (folder / "README.md").read_text(encoding="utf-8")})  # fmt: skip
        return URL

    monkeypatch.setattr(upload, "upload_files", fake_upload)
    return calls


@pytest.mark.slow
def test_a_hub_token_is_in_no_file_written_and_no_output(tatoeba_tsv, tmp_path, monkeypatch, uploads, capfd, caplog):
    config = tmp_path / "run.yaml"
    config.write_text(f"# the Hub\nhub_token: {FILE_TOKEN}  # mine\nmax_steps: 4\nsave_steps: 2\n", encoding="utf-8")
    output = tmp_path / "run"
    argv = ["train", "--config", str(config), "--data", str(tatoeba_tsv), "--output-dir", str(output), *TINY,
            "--eval_steps", "2", "--push_to_hub", "--hub_model_id", REPO_ID, f"--hub_token={CLI_TOKEN}"]  # fmt: skip
    monkeypatch.delenv("HF_TOKEN", raising=False)
    assert main(argv) == 0
    (call,) = uploads
    assert call["token"] == CLI_TOKEN and call["repo_id"] == REPO_ID  # the token still publishes
    assert list(output.glob("checkpoint-*/training_args.bin"))  # checkpoints were written, and scanned below
    assert files_holding(tmp_path, (CLI_TOKEN,)) == [] and files_holding(output, (FILE_TOKEN,)) == []
    recorded = json.loads((output / "training_command.json").read_text(encoding="utf-8"))
    assert "--hub_token=<redacted>" in recorded["command"] and f"--hub_model_id {REPO_ID}" in recorded["command"]
    assert "hub_token: <redacted>  # mine\nmax_steps: 4" in recorded["config_file"]["text"]
    assert "--hub_token=<redacted>" in call["card"] and "hub_token: <redacted>" in call["card"]
    printed = capfd.readouterr()
    assert not any(secret in printed.out + printed.err + caplog.text for secret in SECRETS)


def test_every_form_of_a_secret_option_is_redacted(tmp_path, monkeypatch):
    from hf_bahdanau.redaction import redact_argv, redact_config, redact_message

    argv = ["train", "--hub_token", CLI_TOKEN, "--hub-token=x1", "--db_password", PASSWORD, "--client-secret=x2",
            "--max_new_tokens", "5", "--tokenizer_name_or_path", "tok", "--output-dir", "out"]  # fmt: skip
    assert redact_argv(argv) == ["train", "--hub_token", "<redacted>", "--hub-token=<redacted>", "--db_password",
                                 "<redacted>", "--client-secret=<redacted>", "--max_new_tokens", "5",
                                 "--tokenizer_name_or_path", "tok", "--output-dir", "out"]  # fmt: skip
    as_json = json.dumps({"hub_token": CLI_TOKEN, "max_new_tokens": 5, "auth": {"password": PASSWORD}}, indent=2)
    assert json.loads(redact_config(as_json)) == {"hub_token": "<redacted>", "max_new_tokens": 5,
                                                  "auth": {"password": "<redacted>"}}  # fmt: skip
    one_line = f'{{"hub-token": "{CLI_TOKEN}", "tokenizer_type": "bpe"}}'
    assert json.loads(redact_config(one_line)) == {"hub-token": "<redacted>", "tokenizer_type": "bpe"}
    as_yaml = f"hub_token: '{CLI_TOKEN}'\nsecret: {PASSWORD}\nhub_private_repo:\ndata: multi30k\n"
    assert redact_config(as_yaml) == "hub_token: '<redacted>'\nsecret: <redacted>\nhub_private_repo:\ndata: multi30k\n"
    below = f"hub_token:\n  {PASSWORD}\nseed: 3\npassword: |-\n  {PASSWORD}\n\n  {PASSWORD}\ndata:\n  multi30k\n"
    assert redact_config(below) == (  # values on the lines below their key, plain or a block scalar
        "hub_token:\n  <redacted>\nseed: 3\npassword: <redacted>\n  <redacted>\n\n  <redacted>\ndata:\n  multi30k\n"
    )
    message = "no Hugging Face token: set HF_TOKEN or run `hf auth login`"  # messages keep their words
    assert redact_message(message) == message
    assert redact_message(f"bad --db_password {PASSWORD} --max_new_tokens 5") == (
        "bad --db_password <redacted> --max_new_tokens 5"
    )
    # A JSON --config file is recorded redacted too (as the card shows it).
    config = tmp_path / "run.json"
    config.write_text(json.dumps({"hub_token": FILE_TOKEN, "max_steps": 4}), encoding="utf-8")
    argv = ["train", "--config", str(config), "--hub-token", CLI_TOKEN]
    recorded_command.record_command(tmp_path, argv)
    recorded = (tmp_path / recorded_command.COMMAND_FILE).read_text(encoding="utf-8")
    assert not any(secret in recorded for secret in SECRETS)
    assert json.loads(json.loads(recorded)["config_file"]["text"]) == {"hub_token": "<redacted>", "max_steps": 4}


@pytest.mark.parametrize("secret", [CLI_TOKEN, PASSWORD])  # a Hub token, and a secret of no known shape
@pytest.mark.parametrize("command", ["train", "translate"])
def test_a_secret_in_a_mistyped_option_is_not_printed(tmp_path, caplog, capfd, secret, command):
    argv = {"train": ["train", "--output-dir", str(tmp_path / "x"), "--data", "d"],
            "translate": ["translate", "--model", str(tmp_path)]}[command]  # fmt: skip
    assert main([*argv, "--hub_tokn", secret]) == 1
    (error,) = logged_errors(caplog)
    printed = capfd.readouterr()
    assert "--hub_tokn" in error
    if command == "train":  # (translate takes the value as a sentence to translate, and never gets to it)
        assert "1 value, not shown" in error
    assert not any(secret in caplog.text + printed.out + printed.err for secret in SECRETS)


def test_a_secret_of_the_wrong_type_in_a_config_file_is_not_printed(tmp_path, caplog, capfd):
    config = tmp_path / "run.yaml"
    config.write_text("hub_token: 987654321\n", encoding="utf-8")  # a number where text is expected
    assert main(["train", "--config", str(config), "--output-dir", str(tmp_path / "x")]) == 1
    (error,) = logged_errors(caplog)
    printed = capfd.readouterr()
    assert "hub_token must be text, got <redacted>" in error
    assert "987654321" not in caplog.text + printed.out + printed.err


def test_the_card_hides_a_token_left_in_a_folders_recorded_command(saved):
    recorded = {"command": f"hf-bahdanau train --hub_token {CLI_TOKEN} --output-dir x",
                "config_file": {"path": "run.yaml", "text": f"hub_token: {FILE_TOKEN}"}}  # fmt: skip
    (saved / recorded_command.COMMAND_FILE).write_text(json.dumps(recorded), encoding="utf-8")
    text = str(make_card(saved, REPO_ID))
    assert "--hub_token '<redacted>' --output-dir x" in text and not any(secret in text for secret in SECRETS)


def test_publish_uploads_only_the_models_code(saved, uploads, monkeypatch, capsys):
    code = {path.name for path in saved.glob("*.py")}  # what save_pretrained copied: the model's remote code
    assert {"modeling_bahdanau.py", "configuration_bahdanau.py", "pipelines.py"} <= code
    (saved / "helper.py").write_text("TOKEN = 'mine'\n", encoding="utf-8")
    (saved / "notes_modeling.py").write_text("from .modeling_bahdanau import x\n", encoding="utf-8")
    monkeypatch.setenv("HF_TOKEN", CLI_TOKEN)
    assert main(["publish", "--model", str(saved), "--repo-id", REPO_ID]) == 0
    (call,) = uploads
    assert {name for name in call["files"] if name.endswith(".py")} == code
    assert main(["publish", "--model", str(saved), "--repo-id", REPO_ID, "--dry-run"]) == 0
    listed = {line.strip() for line in capsys.readouterr().out.splitlines() if line.startswith("  ")}
    assert {name for name in listed if name.endswith(".py")} == code


def test_publish_uploads_the_quality_estimator(saved, uploads, monkeypatch):
    (saved / ESTIMATOR_FILE).write_text("{}", encoding="utf-8")
    monkeypatch.setenv("HF_TOKEN", CLI_TOKEN)
    assert main(["publish", "--model", str(saved), "--repo-id", REPO_ID]) == 0
    (call,) = uploads
    assert ESTIMATOR_FILE in call["files"]


@pytest.mark.parametrize("repo_id", [f"someone/{'a' * 90}", "someone/two--dashes", "someone/.hidden"])
def test_repo_ids_the_hub_refuses_are_refused(saved, uploads, monkeypatch, caplog, repo_id):
    monkeypatch.setenv("HF_TOKEN", CLI_TOKEN)
    assert main(["publish", "--model", str(saved), "--repo-id", repo_id]) == 1
    (error,) = logged_errors(caplog)
    assert f"repo id {repo_id!r}" in error and "\n" not in error and not uploads
    assert upload.check_repo_id(f"someone/{'a' * 88}") == f"someone/{'a' * 88}"  # 96 characters: the Hub's limit


HAND_WRITTEN = "---\nlicense: mit\n---\n# My model\n\nWritten by hand.\n"


def test_a_dry_run_writes_nothing_and_shows_the_card(saved, capsys):
    before = folder_bytes(saved)
    assert main(["publish", "--model", str(saved), "--repo-id", REPO_ID, "--dry-run"]) == 0
    assert folder_bytes(saved) == before  # no README.md either
    out = capsys.readouterr().out
    assert f"model card: would be written to {saved / 'README.md'}" in out
    assert CARD_MARKER in out and f"# {REPO_ID.split('/')[1]}" in out  # the rendered card is shown


def test_publish_keeps_a_hand_written_card_unless_told(saved, uploads, monkeypatch, caplog, capsys):
    caplog.set_level(logging.INFO)
    monkeypatch.setenv("HF_TOKEN", CLI_TOKEN)
    (saved / "README.md").write_text(HAND_WRITTEN, encoding="utf-8")
    before = folder_bytes(saved)
    assert main(["publish", "--model", str(saved), "--repo-id", REPO_ID, "--dry-run"]) == 0
    assert folder_bytes(saved) == before and "is kept" in capsys.readouterr().out
    assert main(["publish", "--model", str(saved), "--repo-id", REPO_ID]) == 0
    assert folder_bytes(saved) == before and uploads[-1]["card"] == HAND_WRITTEN  # uploaded as it is
    assert "README.md" in uploads[-1]["files"] and "keeping" in caplog.text and "--overwrite-card" in caplog.text
    with monkeypatch.context() as offline:  # a failed publish (the real upload, offline) keeps it too
        offline.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
        offline.setattr(upload, "upload_files", REAL_UPLOAD)
        assert main(["publish", "--model", str(saved), "--repo-id", REPO_ID]) == 1
    assert folder_bytes(saved) == before and "offline" in logged_errors(caplog)[-1]
    assert main(["publish", "--model", str(saved), "--repo-id", REPO_ID, "--overwrite-card"]) == 0
    card = (saved / "README.md").read_text(encoding="utf-8")
    assert CARD_MARKER in card and "license: apache-2.0" in card
    assert main(["publish", "--model", str(saved), "--repo-id", REPO_ID, "--license", "mit"]) == 0  # ours: refreshed
    assert "license: mit" in (saved / "README.md").read_text(encoding="utf-8")


class _GoneReader:
    """A stdout whose reader went away (`... | head -1`)."""

    def write(self, text: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    def flush(self) -> None:
        raise BrokenPipeError(32, "Broken pipe")


def test_a_dry_run_whose_reader_goes_away_ends_quietly(saved, monkeypatch, caplog):
    monkeypatch.setattr(sys, "stdout", _GoneReader())
    assert main(["publish", "--model", str(saved), "--repo-id", REPO_ID, "--dry-run"]) == 141  # as Unix tools end
    assert not logged_errors(caplog)
