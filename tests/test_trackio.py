"""train --report_to trackio: the metrics go to trackio's local store, read back here; nothing leaves the
machine (no Space is named, the Hub is offline); a missing package is a one-line error."""

from __future__ import annotations

import importlib.util
import math
import os
import socket
from pathlib import Path

import pytest
from helpers import tiny_train_argv

from hf_bahdanau.cli import main


@pytest.mark.slow
def test_train_reports_to_trackio_in_its_local_store(tatoeba_tsv, tmp_path, monkeypatch):
    pytest.importorskip("trackio")
    for name in ("TRACKIO_SPACE_ID", "TRACKIO_SERVER_URL", "TRACKIO_BUCKET_ID"):  # else it would log to the Hub
        monkeypatch.delenv(name, raising=False)

    def connect(sock: socket.socket, address: object) -> None:
        raise AssertionError(f"training with trackio opened a connection to {address}")

    monkeypatch.setattr(socket.socket, "connect", connect)  # nothing leaves the machine (nor reaches a local server)
    import trackio.utils
    from trackio.sqlite_storage import SQLiteStorage

    store = Path(trackio.utils.TRACKIO_DIR)  # $TRACKIO_DIR, else $HF_HOME/trackio: a throw-away folder in tests
    assert store.is_relative_to(os.environ.get("TRACKIO_DIR") or os.environ["HF_HOME"])
    project = f"hf-bahdanau-{tmp_path.name}"
    argv = tiny_train_argv(tatoeba_tsv, tmp_path / "model", "--report_to", "trackio", "--project", project)
    assert main([*argv, "--run_name", "tiny"]) == 0
    assert SQLiteStorage.get_runs(project) == ["tiny"]
    logs = SQLiteStorage.get_logs(project, "tiny")
    losses = [(log["train/global_step"], log["train/loss"]) for log in logs if "train/loss" in log]
    assert [step for step, _ in losses] == [2, 4, 6]
    assert all(math.isfinite(loss) and loss > 0 for _, loss in losses)
    (evaluation,) = [log for log in logs if "eval/bleu" in log]
    assert evaluation["train/global_step"] == 6 and 0 <= evaluation["eval/bleu"] <= 100
    assert (store / f"{project}.db").is_file()


def test_report_to_a_tracker_that_is_not_installed_is_a_one_line_error(tatoeba_tsv, tmp_path, monkeypatch, caplog):
    found = importlib.util.find_spec

    def find_spec(name: str, *rest):  # trackio is not installed
        return None if name == "trackio" else found(name, *rest)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    assert main(tiny_train_argv(tatoeba_tsv, tmp_path / "model", "--report_to", "trackio")) == 1
    assert "--report_to trackio needs the trackio package: pip install trackio" in caplog.text
    assert not (tmp_path / "model").exists()  # refused before any folder is written
