"""Redaction (hf_bahdanau.redaction) hides secrets by option and key, and token-shaped values where a secret
can stand, and leaves names that merely look like a token (a folder, a repo id) as they are."""

from __future__ import annotations

from hf_bahdanau.cli import main
from hf_bahdanau.redaction import REDACTED, redact_argv, redact_config, redact_message

NAME = "hf_GermanEnglishTranslatorModel1"  # a model's name, shaped like a Hub token
TOKEN = "hf_CommandLineTokenNeverToBeSeen0123"


def test_names_that_look_like_tokens_are_kept_where_no_secret_can_be():
    argv = ["train", "--output_dir", NAME, "--hub_model_id", f"me/{NAME}", "--data", f"corpora/{NAME}.tsv"]
    assert redact_argv(argv) == argv
    config = f"output_dir: {NAME}\nhub_model_id: me/{NAME}\nmodel_name_or_path: '{NAME}'\n"
    assert redact_config(config) == config
    assert (
        redact_message(f"--output_dir {NAME} exists and is not empty") == f"--output_dir {NAME} exists and is not empty"
    )


def test_secrets_are_hidden_by_option_and_key_and_tokens_where_a_secret_can_be():
    argv = ["train", "--hub_token", TOKEN, "--run_name", TOKEN, TOKEN, "--output_dir", NAME]
    assert redact_argv(argv) == ["train", "--hub_token", REDACTED, "--run_name", REDACTED, REDACTED, "--output_dir",
                                 NAME]  # fmt: skip
    assert (
        redact_config(f"hub_token: x1\nnote: {TOKEN}\n# {TOKEN}\n")
        == f"hub_token: {REDACTED}\nnote: {REDACTED}\n# {REDACTED}\n"
    )
    assert redact_message(f"rejected {TOKEN}: --hub_token x") == f"rejected {REDACTED}: --hub_token {REDACTED}"


def test_a_urls_password_is_not_echoed(tmp_path, caplog):
    url = "https://me:s3cretPass@example.com/corpus.tsv"
    assert redact_message(f"no such file: {url}") == f"no such file: https://me:{REDACTED}@example.com/corpus.tsv"
    main(["train", "--data", url, "--src-lang", "de", "--tgt-lang", "en", "--output-dir", str(tmp_path / "run")])
    assert "s3cretPass" not in caplog.text
