"""Tests of the run folder (hf_bahdanau.training.run_folder) and of how a run ends
(hf_bahdanau.training.run.check_reached_end)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from transformers import EarlyStoppingCallback, TrainerState

from hf_bahdanau.training import run_folder
from hf_bahdanau.training.run import check_reached_end


def _trainer(step: int, callbacks: list) -> SimpleNamespace:
    """What `check_reached_end` reads of a Trainer that stopped at `step` of 10."""
    return SimpleNamespace(
        state=TrainerState(global_step=step, max_steps=10), callback_handler=SimpleNamespace(callbacks=callbacks)
    )


def test_a_run_that_stops_short_of_max_steps_fails_unless_it_stopped_early_on_purpose(tmp_path):
    with pytest.raises(ValueError, match="training stopped at step 6 of 10: its train data ran out; nothing was saved"):
        check_reached_end(_trainer(6, []), tmp_path)
    check_reached_end(_trainer(10, []), tmp_path)
    patience = EarlyStoppingCallback(early_stopping_patience=2)
    with pytest.raises(ValueError, match="stopped at step 6 of 10"):
        check_reached_end(_trainer(6, [patience]), tmp_path)  # patience not yet spent
    patience.early_stopping_patience_counter = 2
    check_reached_end(_trainer(6, [patience]), tmp_path)


def _run(folder: Path, marker: str) -> Path:
    """A folder holding what a finished `train` leaves (for the checks, a trainer state is enough)."""
    folder.mkdir()
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": 1, "marker": marker}))
    return folder


def test_a_replacing_run_never_deletes_folders_named_like_its_working_folders(tmp_path):
    output = _run(tmp_path / "avg1", "old")
    for name in ("avg1.staging", "avg1.replaced"):  # the user's own folders
        (tmp_path / name).mkdir()
        (tmp_path / name / "mine.txt").write_text("keep")
    with pytest.raises(FileExistsError, match="avg1.staging exists and is not a staging folder of train"):
        run_folder.choose_work_dir(output, None, is_main=True)
    (tmp_path / "avg1.staging" / "mine.txt").rename(tmp_path / "mine.txt")
    (tmp_path / "avg1.staging").rmdir()
    staging = run_folder.choose_work_dir(output, None, is_main=True)
    assert staging == tmp_path / "avg1.staging" and run_folder.is_staging_dir(staging)
    (staging / "trainer_state.json").write_text(json.dumps({"global_step": 2, "marker": "new"}))
    run_folder.replace_folder(output, staging)
    assert json.loads((output / "trainer_state.json").read_text())["marker"] == "new"
    assert not run_folder.is_staging_dir(output)  # the finished run is no staging folder
    assert (tmp_path / "avg1.replaced" / "mine.txt").read_text() == "keep"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["avg1", "avg1.replaced", "mine.txt"]


def test_a_staging_folder_is_no_output_folder_of_another_run(tmp_path):
    output = _run(tmp_path / "lockreal", "old")
    staging = run_folder.choose_work_dir(output, None, is_main=True)
    (staging / "checkpoint-5").mkdir()
    with pytest.raises(FileExistsError, match="lockreal.staging is the staging folder of a run into .*lockreal"):
        run_folder.check_output_dir(staging, resume=False, overwrite=True)
    assert (staging / "checkpoint-5").is_dir()
