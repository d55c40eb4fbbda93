"""The run's Trainer callbacks: logging of the start step and of each log entry, the progress bar, a checkpoint on
Ctrl-C."""

from __future__ import annotations

import contextlib
import json
import logging
import signal
from collections.abc import Iterator
from typing import Any

from transformers import ProgressCallback, TrainerCallback, TrainerControl, TrainerState, TrainingArguments

logger = logging.getLogger(__name__)


class TrainingStartLogger(TrainerCallback):
    """Logs the step training starts from (non-zero when resuming)."""

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        logger.info("training starts at step %d of %d", state.global_step, state.max_steps)


class InterruptToCheckpoint(TrainerCallback):
    """Ctrl-C (SIGINT) while training: finish the step, save a checkpoint and stop; a second Ctrl-C stops at once."""

    def __init__(self) -> None:
        self.interrupted = False

    @contextlib.contextmanager
    def catching_sigint(self) -> Iterator[None]:
        def handler(signum: int, frame: Any) -> None:
            self.interrupted = True
            signal.signal(signal.SIGINT, signal.default_int_handler)

        previous = signal.signal(signal.SIGINT, handler)
        try:
            yield
        finally:
            signal.signal(signal.SIGINT, previous)

    def on_step_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any) -> None:
        if self.interrupted:
            control.should_save = control.should_training_stop = True


class LogEntryLogger(TrainerCallback):
    """Logs each Trainer log entry (loss, learning rate, evaluation scores) through `logging`, as numbers; replaces
    the Trainer's own printing, which shows them as strings."""

    def on_log(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        logs: dict[str, float] | None = None,
        **kwargs: Any,
    ) -> None:
        if state.is_world_process_zero and logs:
            shown = {name: float(f"{value:.4g}") if isinstance(value, float) else value for name, value in logs.items()}
            shown.pop("total_flos", None)
            logger.info("step %d: %s", state.global_step, json.dumps(shown))


class ProgressBar(ProgressCallback):
    """The Trainer's progress bar, without its string copy of the log entries (`LogEntryLogger` logs them)."""

    def on_log(self, *args: Any, **kwargs: Any) -> None:
        pass
