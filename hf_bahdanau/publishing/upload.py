"""Uploading a trained folder to the Hugging Face Hub (`hf-bahdanau publish`), and the Trainer's push at the end
of `train --push_to_hub`.

`publish` uploads only what a user needs (`files_to_upload`). The token is the one `huggingface_hub` resolves
(`HF_TOKEN`, then `hf auth login`); it goes to `HfApi` and nowhere else: never written, logged or printed.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatch
from pathlib import Path

import httpx
from huggingface_hub import HfApi, get_token
from huggingface_hub.errors import HfHubHTTPError, HFValidationError, OfflineModeIsEnabled
from huggingface_hub.utils import validate_repo_id
from transformers import TrainingArguments
from transformers.dynamic_module_utils import get_relative_imports

from hf_bahdanau.choices import DEFAULT_LICENSE
from hf_bahdanau.decoding.quality.estimator import ESTIMATOR_FILE
from hf_bahdanau.errors import InputError, UnreachableError
from hf_bahdanau.json_files import read_json

from .card import CARD_FILE, is_generated_card, make_card
from .evaluations import EVAL_RESULTS_FILE
from .model_folder import check_model_folder
from .recorded_command import record_command

logger = logging.getLogger(__name__)

# What a user of the model needs, in the folder's root only: never checkpoint-*/, optimizer or scheduler states,
# training_args.bin, logs, hypotheses, or translation_data.json (its corpus path is a path on the training machine;
# the card says what the corpus was). Besides these, the model's remote code (`remote_code_files`), and no other
# Python file.
UPLOAD_PATTERNS = (
    "config.json",
    "generation_config.json",
    "*.safetensors",
    "model.safetensors.index.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    CARD_FILE,
    EVAL_RESULTS_FILE,
    ESTIMATOR_FILE,  # the quality estimator `translate --quality` reads
    "*.png",  # training curves, attention heatmaps
)
MAX_REPO_ID_LENGTH = 96  # the Hub's limit on OWNER/NAME
_REPO_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*")


def check_repo_id(repo_id: str | None) -> str:
    """`repo_id` if it is `owner/name` and the Hub takes it (`huggingface_hub.utils.validate_repo_id`: at most 96
    characters, no `--` or `..`), else a one-line InputError saying why."""
    if not repo_id or not _REPO_ID.fullmatch(repo_id) or ".." in repo_id or repo_id.endswith((".git", "-", ".")):
        raise InputError(f"repo id {repo_id!r} is not of the form OWNER/NAME")
    if len(repo_id) > MAX_REPO_ID_LENGTH:
        raise InputError(f"repo id {repo_id!r} has {len(repo_id)} characters; the Hub takes {MAX_REPO_ID_LENGTH}")
    try:
        validate_repo_id(repo_id)
    except HFValidationError as error:  # "Cannot have -- or .. in repo_id: 'x'."
        raise InputError(f"repo id {repo_id!r}: {str(error).rsplit(': ', 1)[0]}") from None
    return repo_id


def remote_code_files(folder: str | Path) -> list[str]:
    """The Python files of `folder` that the model's remote code consists of: the modules that config.json's
    `auto_map` and `custom_pipelines` (and tokenizer_config.json's `auto_map`) name, and the modules they import
    relatively, followed as transformers follows them when it copies the code (`get_relative_imports`). Code of
    another repo (`repo--module.Class`) is not the folder's."""
    folder = Path(folder)
    config = read_json(folder / "config.json")
    references = [
        *(config.get("auto_map") or {}).values(),
        *(read_json(folder / "tokenizer_config.json").get("auto_map") or {}).values(),
        *(pipeline.get("impl") for pipeline in (config.get("custom_pipelines") or {}).values()),
    ]
    flat = [name for reference in references for name in (reference if isinstance(reference, list) else [reference])]
    pending = [name.rsplit(".", 1)[0] for name in flat if isinstance(name, str) and "--" not in name and "." in name]
    found: set[str] = set()
    while pending:
        path = folder / f"{pending.pop()}.py"
        if path.name not in found and path.is_file():
            found.add(path.name)
            pending.extend(get_relative_imports(path))
    return sorted(found)


def files_to_upload(folder: str | Path) -> list[str]:
    """The names of the files of `folder` that a user of the model needs: `UPLOAD_PATTERNS` (root only) and the
    model's remote code (`remote_code_files`); never another Python file (a user's script)."""
    listed = {
        path.name
        for path in Path(folder).iterdir()
        if path.is_file() and any(fnmatch(path.name, pattern) for pattern in UPLOAD_PATTERNS)
    }
    return sorted(listed | set(remote_code_files(folder)))


@dataclass
class Publication:
    """What `publish` did: the card's path (written, kept, or where a dry run would write it), the files it
    uploaded (or would, in a dry run), the repo URL; the generated card's text, and whether the folder's own card
    was kept instead."""

    repo_id: str
    card: Path
    files: list[str]
    url: str | None = None
    card_text: str = ""
    card_kept: bool = False


def upload_files(
    folder: Path,
    repo_id: str,
    files: list[str],
    private: bool,
    revision: str | None,
    commit_message: str,
    token: str | None,
    repo_type: str = "model",
    space_sdk: str = "gradio",
) -> str:
    """Create the repo (and branch) if needed and upload exactly `files`; the repo URL. A `repo_type="space"` is
    created as a Space of `space_sdk` (a Gradio app, or `static` files)."""
    token = token or get_token()
    if not token:
        raise InputError("no Hugging Face token: set HF_TOKEN or run `hf auth login`")
    api = HfApi(token=token)
    try:
        kind = {} if repo_type == "model" else {"repo_type": repo_type}  # the Hub's default: a model
        sdk = {"space_sdk": space_sdk} if repo_type == "space" else {}
        url = api.create_repo(repo_id, private=private, exist_ok=True, **kind, **sdk)
        if revision:
            api.create_branch(repo_id, branch=revision, exist_ok=True, **kind)
        api.upload_folder(
            repo_id=repo_id,
            **kind,
            folder_path=folder,
            allow_patterns=files,  # relative paths (root files, ctranslate2/*): each matches that one file
            revision=revision,
            commit_message=commit_message,
        )
    except OfflineModeIsEnabled as error:
        raise UnreachableError("the Hub is offline (HF_HUB_OFFLINE is set): unset it to publish") from error
    except (HfHubHTTPError, httpx.HTTPError) as error:
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise UnreachableError(f"publishing to {repo_id} failed: {reason}") from error
    return str(url)


def publish(
    folder: str | Path,
    repo_id: str,
    *,
    private: bool = False,
    revision: str | None = None,
    commit_message: str | None = None,
    license: str = DEFAULT_LICENSE,
    dry_run: bool = False,
    token: str | None = None,
    overwrite_card: bool = False,
    with_ctranslate2: bool = False,
) -> Publication:
    """Write the folder's card, then create `repo_id` if needed and upload `files_to_upload`.

    The card (`README.md`) is written where there is none or the one there is ours (`is_generated_card`); a card
    written by hand is kept, and uploaded as it is, unless `overwrite_card`. A `dry_run` renders the card and lists
    the files, and writes nothing. Raises ValueError for a bad repo id, a folder that is not a trained model or no
    token, and ConnectionError when the Hub cannot be reached (offline mode, network or HTTP errors). `token`
    defaults to `get_token()`. `with_ctranslate2`: the float32 CTranslate2 export goes to the repo's `ctranslate2/`
    folder too (`export.published_export`), and the card says how to use it.
    """
    check_repo_id(repo_id)
    folder = check_model_folder(folder)
    path = folder / CARD_FILE
    exported = []
    if with_ctranslate2:
        from hf_bahdanau.decoding.export.ctranslate2 import published_export

        exported = published_export(folder, dry_run=dry_run)
    card = make_card(folder, repo_id, license, ctranslate2=with_ctranslate2)
    kept = path.is_file() and not overwrite_card and not is_generated_card(path)
    publication = Publication(repo_id=repo_id, card=path, files=[], card_text=str(card), card_kept=kept)
    if kept:
        logger.info("keeping the model card %s: it was not made by hf-bahdanau (--overwrite-card replaces it)", path)
    if dry_run:
        publication.files = sorted({*files_to_upload(folder), CARD_FILE, *exported})
        return publication
    if not kept:
        card.save(path)
        logger.info("model card written to %s", path)
    publication.files = [*files_to_upload(folder), *exported]
    message = commit_message or f"Upload {repo_id.split('/')[-1]} with hf-bahdanau publish"
    publication.url = upload_files(folder, repo_id, publication.files, private, revision, message, token)
    logger.info("uploaded %d files to %s", len(publication.files), publication.url)
    return publication


STANDARD_FILES = ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
                  "tokenizer_config.json")  # what a standard folder's repo holds, besides its card  # fmt: skip


def publish_standard(
    folder: str | Path,
    repo_id: str,
    *,
    private: bool = False,
    revision: str | None = None,
    commit_message: str | None = None,
    license: str = DEFAULT_LICENSE,
    dry_run: bool = False,
    token: str | None = None,
) -> Publication:
    """Publish a d2l Transformer of `folder` as its standard transformers folder (`export --format transformers`:
    MarianMT or Blenderbot), which loads with no remote code, with a card made from `folder` that says so. The
    export and its card are written in a temporary folder (a dry run writes nothing else either). Errors as
    `publish`'s, and an InputError for a model no standard architecture holds."""
    import tempfile

    from hf_bahdanau.decoding.export.standard_folder import export_transformers

    check_repo_id(repo_id)
    folder = check_model_folder(folder)
    with tempfile.TemporaryDirectory(prefix="hf_bahdanau_standard_") as scratch:
        export = export_transformers(folder, Path(scratch) / "standard")
        architecture = read_json(export / "config.json")["architectures"][0]
        card = make_card(folder, repo_id, license, standard=architecture)
        files = sorted({*(name for name in STANDARD_FILES if (export / name).is_file()), CARD_FILE})
        publication = Publication(repo_id=repo_id, card=export / CARD_FILE, files=files, card_text=str(card))
        if dry_run:
            return publication
        card.save(export / CARD_FILE)
        message = commit_message or f"Upload {repo_id.split('/')[-1]} ({architecture}) with hf-bahdanau publish"
        publication.url = upload_files(export, repo_id, files, private, revision, message, token)
    logger.info("uploaded the standard %s folder of %s to %s", architecture, folder, publication.url)
    return publication


@dataclass
class HubPush:
    """Where `train --push_to_hub` publishes at its end, and with which token (kept here only: not in the
    TrainingArguments, which the Trainer saves into every checkpoint)."""

    repo_id: str
    private: bool
    revision: str | None
    token: str | None = field(default=None, repr=False)


def take_push_from_trainer(training_args: TrainingArguments) -> HubPush | None:
    """Where the run is to be published at its end, by `finish_training` rather than by the Trainer (whose push
    writes a generic card); None when it is not. Turns the Trainer's `push_to_hub` off and takes `hub_token` out of
    `training_args` (it would be pickled into `training_args.bin`); checks `hub_model_id` and the token now, before
    any training."""
    token, training_args.hub_token = training_args.hub_token, None
    if not training_args.push_to_hub:
        return None
    check_repo_id(training_args.hub_model_id)
    if not (token or get_token()):
        raise InputError("--push_to_hub: no Hugging Face token: set HF_TOKEN or run `hf auth login`")
    training_args.push_to_hub = False
    return HubPush(training_args.hub_model_id, bool(training_args.hub_private_repo), training_args.hub_revision, token)


def finish_training(output_dir: str | Path, push: HubPush | None, command: Sequence[str] | None) -> str | None:
    """At the end of `train()` (main process): record the `hf-bahdanau` arguments `command` (`record_command`) and,
    with `push` (`take_push_from_trainer`), publish the folder as `hf-bahdanau publish` does; the repo URL."""
    output_dir = Path(output_dir)
    record_command(output_dir, command)
    if push is None:
        return None
    publication = publish(
        output_dir,
        push.repo_id,
        private=push.private,
        revision=push.revision,
        commit_message="End of training",
        token=push.token,
    )
    return publication.url
