"""Translation in the browser (`hf-bahdanau export --format web`): a static folder that translates with no server
beyond a static file server and no network.

The folder holds the page (`index.html`, `app.js`, `search.js`: the package data in `web/` beside this module),
the model in `model/` (the ONNX encoder and decoder of `onnx_export` in the chosen quantization, `onnx/decoding.json`,
the tokenizer and generation config, and `page.json`, what the page shows) and, in `runtime/`, transformers.js (the
tokenizer) and ONNX Runtime Web (its JavaScript and WASM), copied from the npm packages installed by
`npm ci --ignore-scripts --prefix web` in the repository (`web/package.json`). Both families run the page's own
greedy and beam search (`search.js`): transformers.js's `generate` has no beam search. A Transformer's `model/`
keeps transformers.js's layout (the standard `config.json`, `onnx/encoder_model*.onnx`,
`onnx/decoder_model_merged*.onnx`), so its `pipeline("translation", "model")` loads it too.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from hf_bahdanau.errors import InputError
from hf_bahdanau.json_files import read_json

from .folders import check_export_output, check_outside_model_folders, local_folder, source_fingerprint, write_export

logger = logging.getLogger(__name__)

FORMAT = "web"  # `export --format`
QUANTIZATIONS = ("int8", "float32")  # of the page's ONNX graphs; int8 first: the default
PAGE_FILES = ("index.html", "app.js", "search.js")  # package data beside this module, in web/
PAGE_DIR = Path(__file__).with_name("web_app")
RUNTIME_ENV = "HF_BAHDANAU_WEB_RUNTIME"  # a node_modules folder holding the runtime's packages
DEFAULT_RUNTIME = Path(__file__).resolve().parents[3] / "web" / "node_modules"  # the repository's web/ folder
INSTALL_STEP = "npm ci --ignore-scripts --prefix web"  # run in the repository
RUNTIME_FILES = {  # the page's runtime/ file -> its path in node_modules
    "transformers.min.js": "@huggingface/transformers/dist/transformers.min.js",
    "ort.wasm.bundle.min.mjs": "onnxruntime-web/dist/ort.wasm.bundle.min.mjs",
    "ort-wasm-simd-threaded.wasm": "onnxruntime-web/dist/ort-wasm-simd-threaded.wasm",
}
MODEL_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json")  # where present
MAX_PAGE_BEAMS = 5  # the page's beam choices: 1 to 5


def runtime_folder(runtime: str | os.PathLike | None = None) -> Path:
    """The node_modules folder with the runtime's files: `runtime`, else `$HF_BAHDANAU_WEB_RUNTIME`, else the
    repository's `web/node_modules`; an InputError that says what to run where a file is missing."""
    folder = Path(runtime or os.environ.get(RUNTIME_ENV) or DEFAULT_RUNTIME)
    missing = [path for path in RUNTIME_FILES.values() if not (folder / path).is_file()]
    if missing:
        raise InputError(
            f"the page's runtime is not in {folder} (no {missing[0]}): run `{INSTALL_STEP}` in the repository, or "
            f"point --runtime (or {RUNTIME_ENV}) at a node_modules folder holding @huggingface/transformers"
        )
    return folder


def page_settings(folder: Path, description: dict[str, Any], quantization: str) -> dict[str, Any]:
    """What `model/page.json` tells the page: the model's name, type and languages, the quantization of its graphs
    and the beams it searches by default."""
    config = read_json(folder / "config.json")
    return {
        "name": folder.name,
        "model_type": config.get("model_type"),
        "source_language": config.get("source_language") or "source",
        "target_language": config.get("target_language") or "target",
        "quantization": quantization,
        "num_beams": min(max(int(description.get("num_beams") or 1), 1), MAX_PAGE_BEAMS),
    }


def _copy_model(onnx_folder: Path, model: Path, description: dict[str, Any], quantization: str) -> None:
    """The files the page reads of an ONNX export into `model`: the graphs of `quantization` only."""
    (model / "onnx").mkdir(parents=True)
    for name in MODEL_FILES:
        if (onnx_folder / name).is_file():
            shutil.copy2(onnx_folder / name, model / name)
    key = "int8_file" if quantization == "int8" else "file"
    for graph in (description["encoder"], description["decoder"]):
        shutil.copy2(onnx_folder / "onnx" / graph[key], model / "onnx" / graph[key])
    shutil.copy2(onnx_folder / "onnx" / "decoding.json", model / "onnx" / "decoding.json")


def export_web(
    model_dir_or_repo_id: str | os.PathLike,
    output_dir: str | os.PathLike,
    quantization: str = "int8",
    runtime: str | os.PathLike | None = None,
    overwrite: bool = False,
) -> Path:
    """Write the static translation page of a model folder (or Hub repo) of either family to `output_dir`; its path.

    `quantization`: the ONNX graphs' weights (`QUANTIZATIONS`). `runtime`: the node_modules folder holding the
    runtime's files (`runtime_folder`). `output_dir` is a new or empty folder outside any model folder, or (with
    `overwrite`) an earlier export; it is written beside it and moved into place at the end.
    """
    from .onnx import DESCRIPTION, SUBFOLDER, export_onnx, require_onnx

    if quantization not in QUANTIZATIONS:
        raise InputError(f"--quantization of a web export is one of {', '.join(QUANTIZATIONS)}, got {quantization!r}")
    modules = runtime_folder(runtime)
    require_onnx()
    output = Path(output_dir)
    check_outside_model_folders(output)
    folder = local_folder(model_dir_or_repo_id)
    check_export_output(output, folder, overwrite)
    fingerprint = source_fingerprint(folder)
    with tempfile.TemporaryDirectory(prefix="hf_bahdanau_web_") as scratch:
        onnx_folder = export_onnx(folder, Path(scratch) / "onnx")
        description = read_json(onnx_folder / SUBFOLDER / DESCRIPTION)
        settings = page_settings(folder, description, quantization)

        def write(staging: Path) -> None:
            for name in PAGE_FILES:
                shutil.copy2(PAGE_DIR / name, staging / name)
            (staging / "runtime").mkdir()
            for name, path in RUNTIME_FILES.items():
                shutil.copy2(modules / path, staging / "runtime" / name)
            _copy_model(onnx_folder, staging / "model", description, quantization)
            text = json.dumps(settings, indent=2, ensure_ascii=False) + "\n"
            (staging / "model" / "page.json").write_text(text, encoding="utf-8")

        info = {"format": FORMAT, "family": description["family"], "quantization": quantization,
                "source_fingerprint": fingerprint, "model_config": read_json(folder / "config.json")}  # fmt: skip
        write_export(output, info, write)
    logger.info("wrote the translation page of %s (ONNX %s) to %s", folder, quantization, output)
    return output


def is_web_folder(folder: str | os.PathLike) -> bool:
    """Whether `folder` holds a page written by `export_web`."""
    return (Path(folder) / "index.html").is_file() and (Path(folder) / "model" / "page.json").is_file()


__all__ = ["FORMAT", "QUANTIZATIONS", "RUNTIME_ENV", "export_web", "is_web_folder", "runtime_folder"]
