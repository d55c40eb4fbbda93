"""Model cards and publishing to the Hugging Face Hub, for any model type of this package.

A card is made from what a trained folder knows, never typed by hand: `config.json` (architecture, sizes), the
safetensors weights (parameter count), `translation_data.json` (corpus, languages), `trainer_state.json` (steps,
time, best validation BLEU), `training_command.json` (the `hf-bahdanau train` command) and `eval_results.json`
(what `hf-bahdanau evaluate` scored). It is rendered by `huggingface_hub.ModelCard` from the Jinja template
`model_card_template.md` shipped beside this file.

`publish` uploads only what a user needs (`files_to_upload`). The token is the one `huggingface_hub` resolves
(`HF_TOKEN`, then `hf auth login`); it goes to `HfApi` and nowhere else: never written, logged or printed.
"""

from __future__ import annotations

import json
import logging
import math
import re
import shlex
import sys
from dataclasses import dataclass, field
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

import httpx
from huggingface_hub import EvalResult, HfApi, ModelCard, ModelCardData, get_token
from huggingface_hub.errors import HfHubHTTPError, HFValidationError, OfflineModeIsEnabled
from huggingface_hub.utils import validate_repo_id
from safetensors import safe_open
from transformers import TrainingArguments
from transformers.dynamic_module_utils import get_relative_imports

from .data import normalize_d2l, read_data_settings
from .pipelines import TASK
from .redaction import redact_argv, redact_config

logger = logging.getLogger(__name__)

TEMPLATE = Path(__file__).resolve().parent / "model_card_template.md"
CARD_FILE = "README.md"
EVAL_RESULTS_FILE = "eval_results.json"  # written by `hf-bahdanau evaluate`
COMMAND_FILE = "training_command.json"  # written at the end of `hf-bahdanau train`
DEFAULT_LICENSE = "apache-2.0"

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
    "*.png",  # training curves, attention heatmaps
)

# model_type -> what the card says the model is; one entry per model type of the package, and a fallback.
_D2L = "https://d2l.ai/chapter_attention-mechanisms-and-transformers"
MODEL_DESCRIPTIONS: dict[str, dict[str, str]] = {
    "bahdanau": {
        "name": "An RNN encoder-decoder with Bahdanau (additive) attention",
        "chapter": "Bahdanau Attention",
        "chapter_url": f"{_D2L}/bahdanau-attention.html",
        "paper": "Bahdanau, Cho and Bengio (2015), [Neural Machine Translation by Jointly Learning to Align and "
        "Translate](https://arxiv.org/abs/1409.0473)",
        "bibtex": "@inproceedings{bahdanau2015neural,\n  title={Neural Machine Translation by Jointly Learning to "
        "Align and Translate},\n  author={Bahdanau, Dzmitry and Cho, Kyunghyun and Bengio, Yoshua},\n"
        "  booktitle={ICLR},\n  year={2015}\n}",
    },
    "d2l_transformer": {
        "name": "A Transformer encoder-decoder",
        "chapter": "The Transformer Architecture",
        "chapter_url": f"{_D2L}/transformer.html",
        "paper": "Vaswani et al. (2017), [Attention Is All You Need](https://arxiv.org/abs/1706.03762)",
        "bibtex": "@inproceedings{vaswani2017attention,\n  title={Attention Is All You Need},\n  author={Vaswani, "
        "Ashish and Shazeer, Noam and Parmar, Niki and Uszkoreit, Jakob and Jones, Llion and Gomez, Aidan N. and "
        "Kaiser, Lukasz and Polosukhin, Illia},\n  booktitle={NeurIPS},\n  year={2017}\n}",
    },
}
GENERIC_DESCRIPTION = {
    "name": "An attention-based encoder-decoder",
    "chapter": "Attention Mechanisms and Transformers",
    "chapter_url": f"{_D2L}/index.html",
}
LANGUAGE_NAMES = {"de": "German", "en": "English", "fr": "French", "cs": "Czech", "es": "Spanish"}
EXAMPLES = {  # the usage snippet's sentence, by source language
    "de": "Ein Mann fährt mit dem Fahrrad die Straße entlang.",
    "en": "A man is riding a bicycle down the street.",
    "fr": "Un homme descend la rue à vélo.",
}
# config.json entries that are bookkeeping, not architecture (the card shows the other scalar entries)
_NOT_ARCHITECTURE = {"transformers_version", "model_type", "dtype", "is_encoder_decoder", "use_cache"}
MAX_REPO_ID_LENGTH = 96  # the Hub's limit on OWNER/NAME
_REPO_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*")


# ---- evaluation results -----------------------------------------------------------------------------------


def dataset_label(data: str) -> str:
    """How cards and `eval_results.json` name a corpus: a file or folder by its name (no local path), else as is."""
    return Path(data).name if Path(data).exists() else data


def read_evaluations(folder: str | Path) -> list[dict[str, Any]]:
    """The scores `hf-bahdanau evaluate` stored in `folder` (empty when never evaluated)."""
    path = Path(folder) / EVAL_RESULTS_FILE
    return json.loads(path.read_text(encoding="utf-8"))["results"] if path.is_file() else []


def decoding_name(num_beams: int) -> str:
    """How an evaluation decoded: "greedy" or "beam N"."""
    return "greedy" if num_beams == 1 else f"beam {num_beams}"


def record_evaluation(
    folder: str | Path,
    scores: dict[str, Any],
    *,
    data: str,
    split: str,
    languages: tuple[str, str],
    num_beams: int,
    samples: int,
) -> Path:
    """Store sacreBLEU and chrF (2 decimals, as sacreBLEU prints them) with their signatures in `eval_results.json`.

    A new result replaces the one of the same corpus, split, languages and beams; the others are kept (so a greedy
    evaluation does not replace the beam-search one).
    """
    result = {
        "dataset": dataset_label(data),
        "split": split,
        "source_language": languages[0],
        "target_language": languages[1],
        "num_beams": num_beams,
        "samples": samples,
        "bleu": round(float(scores["bleu"]), 2),
        "bleu_signature": scores["bleu_signature"],
        "chrf": round(float(scores["chrf"]), 2),
        "chrf_signature": scores["chrf_signature"],
    }
    key = ("dataset", "split", "source_language", "target_language", "num_beams")
    kept = [old for old in read_evaluations(folder) if any(old[name] != result[name] for name in key)]
    path = Path(folder) / EVAL_RESULTS_FILE
    path.write_text(json.dumps({"results": [*kept, result]}, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    logger.info("scores stored in %s", path)
    return path


# ---- what the folder knows --------------------------------------------------------------------------------


def _read_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def check_model_folder(folder: str | Path) -> Path:
    """`folder` as a Path if it holds a trained model (config, safetensors weights, tokenizer), else ValueError."""
    folder = Path(folder)
    config = _read_json(folder / "config.json")
    if not config.get("model_type"):
        raise ValueError(f"{folder} is not a trained model folder (no config.json with a model_type)")
    if not any(folder.glob("*.safetensors")):
        raise ValueError(f"{folder} is not a trained model folder (no safetensors weights)")
    if not (folder / "tokenizer_config.json").is_file():
        raise ValueError(f"{folder} is not a trained model folder (no tokenizer)")
    return folder


def check_repo_id(repo_id: str | None) -> str:
    """`repo_id` if it is `owner/name` and the Hub takes it (`huggingface_hub.utils.validate_repo_id`: at most 96
    characters, no `--` or `..`), else a one-line ValueError saying why."""
    if not repo_id or not _REPO_ID.fullmatch(repo_id) or ".." in repo_id or repo_id.endswith((".git", "-", ".")):
        raise ValueError(f"repo id {repo_id!r} is not of the form OWNER/NAME")
    if len(repo_id) > MAX_REPO_ID_LENGTH:
        raise ValueError(f"repo id {repo_id!r} has {len(repo_id)} characters; the Hub takes {MAX_REPO_ID_LENGTH}")
    try:
        validate_repo_id(repo_id)
    except HFValidationError as error:  # "Cannot have -- or .. in repo_id: 'x'."
        raise ValueError(f"repo id {repo_id!r}: {str(error).rsplit(': ', 1)[0]}") from None
    return repo_id


def count_parameters(folder: Path) -> int:
    """The number of stored parameters, from the safetensors headers (no weight is loaded)."""
    total = 0
    for path in sorted(folder.glob("*.safetensors")):
        with safe_open(str(path), framework="pt") as weights:
            total += sum(math.prod(weights.get_slice(name).get_shape()) for name in weights.keys())
    return total


def _training_summary(state: dict[str, Any]) -> dict[str, Any] | None:
    """Steps, epochs, time, batch size and best validation BLEU from a `trainer_state.json`."""
    if not state:
        return None
    history = state.get("log_history", [])
    runtime = sum(entry.get("train_runtime", 0.0) for entry in history)  # one entry per (resumed) run
    bleus = [entry["eval_bleu"] for entry in history if "eval_bleu" in entry]
    minutes, seconds = divmod(round(runtime), 60)
    hours, minutes = divmod(minutes, 60)
    return {
        "steps": state.get("global_step"),
        "epochs": round(state.get("epoch") or 0.0, 2),
        "time": f"{hours} h {minutes:02d} min" if hours else f"{minutes} min {seconds:02d} s",
        "batch_size": state.get("train_batch_size"),
        "best_bleu": f"{max(bleus):.2f}" if bleus else None,
    }


def _figures(folder: Path) -> list[dict[str, str]]:
    """The PNG figures of the folder's root, with captions."""
    attention = {  # the files `hf-bahdanau translate --heatmap attention.png` writes
        "attention": "Encoder-decoder attention",
        "attention-encoder": "Encoder self-attention",
        "attention-decoder": "Decoder self-attention",
    }
    figures = []
    for path in sorted(folder.glob("*.png"), key=lambda path: (path.stem not in attention, path.stem)):
        caption = "Training curves" if path.stem == "training_curves" else path.stem.replace("_", " ").capitalize()
        if path.stem in attention:
            caption = f"{attention[path.stem]} of an example sentence (`hf-bahdanau translate --heatmap`)"
        figures.append({"path": path.name, "caption": caption})
    return figures


def _config_rows(config: dict[str, Any]) -> list[tuple[str, Any]]:
    """The architecture entries of a config.json: scalar values that are not bookkeeping or special tokens."""
    return [
        (name, value)
        for name, value in sorted(config.items())
        if isinstance(value, (bool, int, float, str))
        and name not in _NOT_ARCHITECTURE
        and not name.endswith("_token_id")
        and not name.endswith("_language")
        and not name.startswith("_")
    ]


def card_data(folder: str | Path, repo_id: str, license: str = DEFAULT_LICENSE) -> ModelCardData:
    """The card's metadata: languages, license, tags, datasets and a `model-index` from `eval_results.json`."""
    folder = Path(folder)
    config = _read_json(folder / "config.json")
    settings = read_data_settings(folder)
    src = settings.get("src_lang") or config.get("source_language")
    tgt = settings.get("tgt_lang") or config.get("target_language")
    dataset = dataset_label(settings["data"]) if settings.get("data") else None
    name = repo_id.split("/")[-1]
    results = [
        EvalResult(
            task_type="translation",
            task_name="Translation",
            dataset_type=result["dataset"],
            dataset_name=f"{result['dataset']} {result['source_language']}-{result['target_language']}",
            dataset_split=result["split"],
            metric_type=metric,
            metric_name=f"{metric_name} ({decoding_name(result['num_beams'])})",
            metric_value=result[metric],
            metric_config=result[f"{metric}_signature"],
        )
        for result in read_evaluations(folder)
        for metric, metric_name in (("bleu", "BLEU"), ("chrf", "chrF"))
    ]
    return ModelCardData(
        language=[lang for lang in (src, tgt) if lang],
        license=license,
        library_name="transformers",
        pipeline_tag="translation",
        tags=["translation", "seq2seq", config["model_type"], "d2l"],
        datasets=[dataset] if dataset and not Path(settings["data"]).exists() else None,
        model_name=name,
        eval_results=results or None,
    )


def _recorded_command(folder: Path) -> tuple[str | None, dict[str, str] | None]:
    """The recorded `hf-bahdanau train` command and --config file, secrets redacted (again: a folder may have been
    recorded before redaction)."""
    recorded = _read_json(folder / COMMAND_FILE)
    command, config_file = recorded.get("command"), recorded.get("config_file")
    if command:
        try:
            command = shlex.join(redact_argv(shlex.split(command)))
        except ValueError:  # not a shell command line (edited by hand)
            command = redact_config(command)
    if config_file:
        config_file = {**config_file, "text": redact_config(config_file.get("text", ""))}
    return command, config_file


def make_card(folder: str | Path, repo_id: str, license: str = DEFAULT_LICENSE) -> ModelCard:
    """The model card of a trained folder, to be published as `repo_id`."""
    folder = check_model_folder(folder)
    data = card_data(folder, repo_id, license)
    config = _read_json(folder / "config.json")
    settings = read_data_settings(folder)
    src, tgt = (data.language + ["?", "?"])[:2]
    generation = _read_json(folder / "generation_config.json")
    command, config_file = _recorded_command(folder)
    example = EXAMPLES.get(src, "Hello!")
    pipelines = config.get("custom_pipelines") or {}
    if settings.get("d2l_normalize"):
        example = normalize_d2l(example)
    evaluations = read_evaluations(folder)
    return ModelCard.from_template(
        data,
        template_path=str(TEMPLATE),
        title=repo_id.split("/")[-1],
        repo_id=repo_id,
        about=MODEL_DESCRIPTIONS.get(config["model_type"], GENERIC_DESCRIPTION),
        model_type=config["model_type"],
        architecture=", ".join(config.get("architectures") or [config["model_type"]]),
        parameters=f"{count_parameters(folder):,}",
        config_rows=_config_rows(config),
        src_lang=src,
        tgt_lang=tgt,
        src_name=LANGUAGE_NAMES.get(src, src),
        tgt_name=LANGUAGE_NAMES.get(tgt, tgt),
        dataset=dataset_label(settings["data"]) if settings.get("data") else None,
        test_split=settings.get("test_split") if settings.get("data") and Path(settings["data"]).is_dir() else None,
        d2l_normalize=settings.get("d2l_normalize", False),
        training=_training_summary(_read_json(folder / "trainer_state.json")),
        command=command,
        config_file=config_file,
        evaluations=evaluations,
        signatures=list(dict.fromkeys((result["bleu_signature"], result["chrf_signature"]) for result in evaluations)),
        figures=_figures(folder),
        task=TASK if TASK in pipelines else next(iter(pipelines), None),
        example=example,
        num_beams=generation.get("num_beams", 1),
    )


def write_card(folder: str | Path, repo_id: str, license: str = DEFAULT_LICENSE) -> Path:
    """Write (or refresh) the folder's `README.md` card; its path."""
    path = Path(folder) / CARD_FILE
    make_card(folder, repo_id, license).save(path)
    logger.info("model card written to %s", path)
    return path


def remote_code_files(folder: str | Path) -> list[str]:
    """The Python files of `folder` that the model's remote code consists of: the modules that config.json's
    `auto_map` and `custom_pipelines` (and tokenizer_config.json's `auto_map`) name, and the modules they import
    relatively, followed as transformers follows them when it copies the code (`get_relative_imports`). Code of
    another repo (`repo--module.Class`) is not the folder's."""
    folder = Path(folder)
    config = _read_json(folder / "config.json")
    references = [
        *(config.get("auto_map") or {}).values(),
        *(_read_json(folder / "tokenizer_config.json").get("auto_map") or {}).values(),
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


# ---- publishing -------------------------------------------------------------------------------------------


@dataclass
class Publication:
    """What `publish` did: the card it wrote, the files it uploaded (or would, in a dry run), the repo URL."""

    repo_id: str
    card: Path
    files: list[str]
    url: str | None = None


def _upload(
    folder: Path,
    repo_id: str,
    files: list[str],
    private: bool,
    revision: str | None,
    commit_message: str,
    token: str | None,
) -> str:
    """Create the repo (and branch) if needed and upload exactly `files`; the repo URL."""
    token = token or get_token()
    if not token:
        raise ValueError("no Hugging Face token: set HF_TOKEN or run `hf auth login`")
    api = HfApi(token=token)
    try:
        url = api.create_repo(repo_id, private=private, exist_ok=True)
        if revision:
            api.create_branch(repo_id, branch=revision, exist_ok=True)
        api.upload_folder(
            repo_id=repo_id,
            folder_path=folder,
            allow_patterns=files,  # plain names: each matches that one file of the folder's root
            revision=revision,
            commit_message=commit_message,
        )
    except OfflineModeIsEnabled as error:
        raise ConnectionError("the Hub is offline (HF_HUB_OFFLINE is set): unset it to publish") from error
    except (HfHubHTTPError, httpx.HTTPError) as error:
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ConnectionError(f"publishing to {repo_id} failed: {reason}") from error
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
) -> Publication:
    """Write the folder's card, then (unless `dry_run`) create `repo_id` if needed and upload `files_to_upload`.

    Raises ValueError for a bad repo id, a folder that is not a trained model or no token, and ConnectionError
    when the Hub cannot be reached (offline mode, network or HTTP errors). `token` defaults to `get_token()`.
    """
    check_repo_id(repo_id)
    folder = check_model_folder(folder)
    card = write_card(folder, repo_id, license)
    publication = Publication(repo_id=repo_id, card=card, files=files_to_upload(folder))
    if not dry_run:
        message = commit_message or f"Upload {repo_id.split('/')[-1]} with hf-bahdanau publish"
        publication.url = _upload(folder, repo_id, publication.files, private, revision, message, token)
        logger.info("uploaded %d files to %s", len(publication.files), publication.url)
    return publication


# ---- `hf-bahdanau train --push_to_hub` --------------------------------------------------------------------


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
        raise ValueError("--push_to_hub: no Hugging Face token: set HF_TOKEN or run `hf auth login`")
    training_args.push_to_hub = False
    return HubPush(training_args.hub_model_id, bool(training_args.hub_private_repo), training_args.hub_revision, token)


def _record_command(output_dir: Path) -> None:
    """Keep the `hf-bahdanau train` command of this process (and its --config file) for the card."""
    argv = sys.argv[1:]
    if not argv or argv[0] != "train":  # train() called from Python: there is no command to show
        return
    recorded: dict[str, Any] = {"command": shlex.join(["hf-bahdanau", *redact_argv(argv)])}  # no secret kept
    config = next((arg.split("=", 1)[1] for arg in argv if arg.startswith("--config=")), None)
    if "--config" in argv[:-1]:
        config = argv[argv.index("--config") + 1]
    if config and Path(config).is_file():
        text = redact_config(Path(config).read_text(encoding="utf-8").strip())
        recorded["config_file"] = {"path": config, "text": text}
    (output_dir / COMMAND_FILE).write_text(json.dumps(recorded, indent=2) + "\n", encoding="utf-8")


def finish_training(output_dir: str | Path, push: HubPush | None) -> str | None:
    """At the end of `train()` (main process): record the command and, with `push` (`take_push_from_trainer`),
    publish the folder as `hf-bahdanau publish` does; the repo URL."""
    output_dir = Path(output_dir)
    _record_command(output_dir)
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


__all__ = [
    "DEFAULT_LICENSE",
    "EVAL_RESULTS_FILE",
    "HubPush",
    "MODEL_DESCRIPTIONS",
    "Publication",
    "card_data",
    "check_model_folder",
    "check_repo_id",
    "files_to_upload",
    "finish_training",
    "make_card",
    "publish",
    "read_evaluations",
    "remote_code_files",
    "record_evaluation",
    "take_push_from_trainer",
    "write_card",
]
