"""The run folder of `train`: its lock, the checks of what it holds, checkpoint manifests, staging and the swap.

A run holds an exclusive lock beside its folder for its whole length. Each checkpoint gets a manifest of its files'
sizes, written last, so a checkpoint cut off while being written is known and skipped on --resume. A run that
replaces an old one (--overwrite) trains into a staging folder that takes the old folder's place only once the new
model is saved.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
from filelock import FileLock, Timeout
from safetensors import safe_open
from transformers import PreTrainedTokenizerBase, TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from hf_bahdanau.data.run_settings import DATA_SETTINGS_FILE, read_data_settings
from hf_bahdanau.errors import InputError, InputNotFoundError, OutputExistsError, UnwritableError
from hf_bahdanau.folders import replace_with
from hf_bahdanau.registry import MODEL_TYPES

logger = logging.getLogger(__name__)


CHECKPOINT_MANIFEST = "checkpoint_complete.json"  # written last into each checkpoint: {file name: size}


class CheckpointManifest(TrainerCallback):
    """Write the size of every file of a new checkpoint into it, last: a checkpoint cut off while being written lacks
    the manifest or a listed file (see `is_complete_checkpoint`)."""

    def on_save(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any) -> None:
        if args.should_save:
            folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            sizes = {path.name: path.stat().st_size for path in sorted(folder.iterdir()) if path.is_file()}
            partial = folder / f"{CHECKPOINT_MANIFEST}.part"
            partial.write_text(json.dumps(sizes, indent=2), encoding="utf-8")
            os.replace(partial, folder / CHECKPOINT_MANIFEST)


def is_complete_checkpoint(folder: Path) -> bool:
    """Whether every file of checkpoint `folder` was written: those its manifest lists, at their sizes (a checkpoint
    without a manifest: a readable `trainer_state.json`, which the Trainer writes last)."""
    try:
        manifest = folder / CHECKPOINT_MANIFEST
        if manifest.is_file():
            sizes = json.loads(manifest.read_text(encoding="utf-8"))
            return all(
                (folder / name).is_file() and (folder / name).stat().st_size == size for name, size in sizes.items()
            )
        json.loads((folder / "trainer_state.json").read_text(encoding="utf-8"))
        return True
    except (OSError, ValueError):
        return False


def numpy_state_globals() -> list[Any]:
    """What torch's weights-only loader must allow to read the numpy random state in a checkpoint's `rng_state.pth`
    (as the Trainer allows it; transformers' own helper for this moved between releases)."""
    import numpy as np

    multiarray = np._core.multiarray if hasattr(np, "_core") else np.core.multiarray  # numpy 2, numpy 1
    return [multiarray._reconstruct, np.ndarray, np.dtype, type(np.dtype(np.uint32))]


def unreadable_part(folder: Path) -> str | None:
    """The first file of checkpoint `folder` that cannot be read as what it is (torch's `*.pt`/`*.pth` states,
    safetensors weights' header), with the reason, or None: a file of the right size may still be corrupt."""
    for path in sorted(folder.iterdir()):
        try:
            if path.suffix in (".pt", ".pth"):
                with torch.serialization.safe_globals(numpy_state_globals()):
                    torch.load(path, map_location="cpu", weights_only=True)
            elif path.suffix == ".safetensors":
                with safe_open(path, framework="pt") as weights:
                    weights.keys()
        except Exception as error:  # noqa: BLE001 - whatever the reader raises, the file is unusable
            return f"{path.name} cannot be read ({type(error).__name__})"
    return None


def numbered_checkpoints(folder: Path) -> list[Path]:
    """The `checkpoint-N` folders in `folder`, by step."""
    numbered = [path for path in folder.glob("checkpoint-*") if path.is_dir() and path.name[11:].isdigit()]
    return sorted(numbered, key=lambda path: int(path.name[11:]))


def last_complete_checkpoint(folder: Path) -> str | None:
    """The newest complete and readable `checkpoint-N` in `folder` (newer partial or corrupt ones are skipped with a
    warning), or None."""
    for checkpoint in reversed(numbered_checkpoints(folder)):
        if not is_complete_checkpoint(checkpoint):
            logger.warning("skipping %s: it is incomplete (the run was cut off while writing it)", checkpoint)
        elif (problem := unreadable_part(checkpoint)) is not None:
            logger.warning("skipping %s: it is corrupt, %s", checkpoint, problem)
        else:
            return str(checkpoint)
    return None


def write_failure(folder: Path, error: Exception, kept: str) -> UnwritableError:
    """A one-line error for `folder` that could not be written (a full disk, typically), saying what is `kept`."""
    reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error).splitlines()[0]
    try:
        free = f", {shutil.disk_usage(folder.parent).free / 2**20:,.0f} MB free there"
    except OSError:
        free = ""
    return UnwritableError(
        f"could not write {folder} ({reason}{free}); {kept}: free disk space and continue with --resume"
    )


STAGING_MARKER = ".hf_bahdanau_staging"  # in a staging folder a run made: the folder it will replace


def staging_dir(output_dir: Path) -> Path:
    """Where a run that replaces `output_dir` (--overwrite) trains; it takes `output_dir`'s place when done."""
    return output_dir.with_name(f"{output_dir.name}.staging")


def is_staging_dir(folder: Path) -> bool:
    """Whether `folder` is a staging folder a run made (it holds the marker), not a user's folder of that name."""
    return (folder / STAGING_MARKER).is_file()


def _replaced_by(staging: Path) -> Path:
    """The folder that staging folder `staging` is to replace."""
    return staging.with_name(staging.name.removesuffix(".staging"))


def _check_not_a_users(staging: Path) -> None:
    """Refuse to use (or remove) a folder of the staging folder's name that no run made."""
    if staging.exists() and not is_staging_dir(staging):
        raise OutputExistsError(
            f"{staging} exists and is not a staging folder of train (no {STAGING_MARKER}): a run replacing "
            f"{_replaced_by(staging)} works there; move it away"
        )


def check_output_place(output_dir: Path) -> None:
    """Refuse an --output-dir that cannot be made or written, before any work: a file, one under a file, or one in a
    folder that takes no new folders (its lock and staging folder go beside it)."""
    real = output_dir.resolve()
    if real.exists() and not real.is_dir():
        raise UnwritableError(f"--output-dir {output_dir} is a file, not a folder: choose another")
    existing = next((folder for folder in real.parents if folder.exists()), real)  # (the root has no parent)
    if not existing.is_dir():
        raise UnwritableError(f"--output-dir {output_dir} cannot be made: {existing} is a file, not a folder")
    try:  # permissions, a read-only or immutable folder, a virtual file system: a folder made and removed says
        os.rmdir(tempfile.mkdtemp(prefix=f".{real.name}.probe-", dir=existing))
    except OSError as error:
        raise UnwritableError(
            f"--output-dir {output_dir} cannot be made: {existing} takes no new folders ({error.strerror or error})"
        ) from None


@contextlib.contextmanager
def locked_output_dir(output_dir: Path) -> Iterator[None]:
    """Hold an exclusive lock on `output_dir` (a lock file beside the folder it is, symlinks followed: a link and
    the folder it points at are one lock) for the whole run."""
    check_output_place(output_dir)  # so that a lock that cannot be taken means another run holds it
    real = output_dir.resolve()
    real.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(real.with_name(f".{real.name}.lock"))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        raise OutputExistsError(
            f"another run is training into {output_dir} (it holds {lock.lock_file}): wait for it to end or choose "
            "another --output-dir"
        ) from None
    try:
        yield
    finally:
        lock.release()


RUN_FILES = ("trainer_state.json", DATA_SETTINGS_FILE)


def _is_training_run(folder: Path) -> bool:
    """Whether `folder` holds what `train` writes (so that --overwrite may replace it)."""
    if any((folder / name).is_file() for name in RUN_FILES) or any(folder.glob("checkpoint-*")):
        return True
    config = folder / "config.json"
    return config.is_file() and json.loads(config.read_text(encoding="utf-8")).get("model_type") in MODEL_TYPES


def check_output_dir(output_dir: Path, resume: bool, overwrite: bool, inputs: Sequence[str | None] = ()) -> str | None:
    """Check `output_dir` against the run's intent (nothing is deleted here); the checkpoint to resume, if any (the
    newest complete one, in the staging folder of a cut-off --overwrite run first).

    `inputs` are the paths the run reads (model, tokenizer, data): --overwrite must not delete them.
    """
    if is_staging_dir(output_dir):
        raise OutputExistsError(
            f"{output_dir} is the staging folder of a run into {_replaced_by(output_dir)}: choose another --output-dir"
        )
    if resume:
        staging = staging_dir(output_dir)
        for folder in ([staging] if is_staging_dir(staging) else []) + [output_dir]:
            checkpoint = last_complete_checkpoint(folder) if folder.is_dir() else None
            if checkpoint is not None:
                return checkpoint
        raise InputNotFoundError(f"--resume: no complete checkpoint-* folder in {output_dir} to resume from")
    if output_dir.is_dir() and any(output_dir.iterdir()):
        if not overwrite:
            raise OutputExistsError(
                f"output directory {output_dir} exists and is not empty: pass --overwrite to replace it or --resume "
                "to continue its last checkpoint"
            )
        target = output_dir.resolve()
        if target in (Path.cwd(), *Path.cwd().parents, Path.home()) or not _is_training_run(output_dir):
            raise OutputExistsError(f"--overwrite: {output_dir} does not hold a training run; choose a new directory")
        check_inputs_kept(output_dir, inputs)
    return None


def check_inputs_kept(output_dir: Path, inputs: Sequence[str | None]) -> None:
    """Refuse an --overwrite of `output_dir` that would delete one of `inputs`, paths the run reads (a model, a
    tokenizer, a corpus, a --config file)."""
    target = output_dir.resolve()
    for path in filter(None, inputs):
        if Path(path).exists() and Path(path).resolve().is_relative_to(target):
            raise OutputExistsError(
                f"--overwrite would delete {path}, which this run reads: choose another --output-dir"
            )


def check_resume_steps(checkpoint: str, max_steps: int) -> None:
    """Refuse a --resume that would end with an older model than its folder has: from a checkpoint past
    `max_steps`, or in a folder whose saved model trained for more than `max_steps` steps."""
    if max_steps <= 0:  # the epochs decide; the Trainer counts the steps
        return
    folder, step = Path(checkpoint).parent, int(Path(checkpoint).name.rpartition("-")[2])
    try:
        saved = json.loads((folder / "trainer_state.json").read_text(encoding="utf-8"))["global_step"]
    except (OSError, ValueError, KeyError, TypeError):
        saved = None  # no finished model in the folder
    if isinstance(saved, int) and saved > max_steps:
        raise InputError(
            f"--resume: {folder} holds a model trained for {saved} steps; resuming to --max_steps {max_steps} "
            "would replace it with an earlier one"
        )
    if step > max_steps:
        raise InputError(f"--resume: {checkpoint} is at step {step}, past --max_steps {max_steps}")


def choose_work_dir(output_dir: Path, checkpoint: str | None, is_main: bool) -> Path:
    """The folder this run trains into: the resumed checkpoint's, a fresh staging folder when it replaces a
    non-empty `output_dir` (the old run stays intact until the new one is saved), else `output_dir` itself."""
    staging = staging_dir(output_dir)
    if checkpoint is not None:
        return Path(checkpoint).parent
    if not is_main:  # the main process has decided (and made the folder) already
        return staging if is_staging_dir(staging) else output_dir
    _check_not_a_users(staging)
    if staging.is_dir():  # left by a cut-off --overwrite run that is not resumed
        shutil.rmtree(staging)
    if not (output_dir.is_dir() and any(output_dir.iterdir())):
        return output_dir
    staging.mkdir()
    (staging / STAGING_MARKER).write_text(str(output_dir), encoding="utf-8")
    return staging


def replace_folder(output_dir: Path, staging: Path) -> None:
    """Put the finished run in `staging` in the place of the old run in `output_dir`."""
    (staging / STAGING_MARKER).unlink(missing_ok=True)
    replace_with(output_dir, staging)
    logger.info("replaced the previous run in %s", output_dir)


def write_run_files(
    output_dir: Path, tokenizer: PreTrainedTokenizerBase, settings: dict[str, Any], resuming: bool
) -> None:
    """Start the run's folder (new, empty or staging): save the tokenizer and the corpus settings. A resumed run
    keeps its files, and must use the corpus settings it started with."""
    if resuming:
        recorded = read_data_settings(output_dir)
        unchecked = {"data_path": None, "max_source_length": None}  # the corpus may move; a length may change
        if recorded and {**recorded, **unchecked} != {**settings, **unchecked}:
            raise InputError(
                f"--resume with other corpus settings than the run started with: {settings} instead of {recorded}"
            )
        return
    output_dir.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(output_dir)  # an interrupted run resumes with the same vocabulary
    (output_dir / DATA_SETTINGS_FILE).write_text(json.dumps(settings, indent=2), encoding="utf-8")


__all__ = [
    "CHECKPOINT_MANIFEST",
    "CheckpointManifest",
    "check_inputs_kept",
    "check_output_dir",
    "check_output_place",
    "check_resume_steps",
    "choose_work_dir",
    "is_complete_checkpoint",
    "is_staging_dir",
    "last_complete_checkpoint",
    "locked_output_dir",
    "replace_folder",
    "staging_dir",
    "unreadable_part",
    "write_failure",
    "write_run_files",
]
