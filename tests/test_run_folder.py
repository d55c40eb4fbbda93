"""Tests of the run folder (hf_bahdanau.run_folder) and of how a run ends (hf_bahdanau.training.check_reached_end)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from transformers import EarlyStoppingCallback, TrainerState

from hf_bahdanau.training import check_reached_end


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
