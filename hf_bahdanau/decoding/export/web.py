"""Translation in the browser (`hf-bahdanau export --format web`): a static folder that translates with no server
beyond a static file server and no network.

The folder holds the page (`index.html`, `app.js`, `search.js`: the package data in `web_app/` beside this module),
the model in `model/` (the ONNX encoder and decoder of `export --format onnx` in the chosen quantization, what both
hold alike stored once in `onnx/shared_weights.onnx_data`, `onnx/decoding.json`, the tokenizer without indentation,
the generation config, and `page.json`: what the page shows and the files it loads) and, in `runtime/`, only what
the page loads: tokenizers.js (transformers.js's tokenizer) and ONNX Runtime Web (its JavaScript and its one WASM
build, SIMD, one thread), copied from the npm packages installed by `npm ci --ignore-scripts --prefix web` in the
repository (`web/package.json`). Both families run the page's own greedy and beam search (`search.js`):
transformers.js's `generate` has no beam search. transformers.js reads the ONNX export itself (`export --format
onnx`), whose graphs these are.
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
from .shared_weights import share_weights

logger = logging.getLogger(__name__)

FORMAT = "web"  # `export --format`
QUANTIZATIONS = ("int8", "float32")  # of the page's ONNX graphs; int8 first: the default
PAGE_FILES = ("index.html", "app.js", "search.js")  # package data beside this module, in web/
PAGE_DIR = Path(__file__).with_name("web_app")
RUNTIME_ENV = "HF_BAHDANAU_WEB_RUNTIME"  # a node_modules folder holding the runtime's packages
DEFAULT_RUNTIME = Path(__file__).resolve().parents[3] / "web" / "node_modules"  # the repository's web/ folder
INSTALL_STEP = "npm ci --ignore-scripts --prefix web"  # run in the repository
RUNTIME_FILES = {  # the page's runtime/ file -> its path in node_modules
    "tokenizers.min.mjs": "@huggingface/tokenizers/dist/tokenizers.min.mjs",
    "ort.wasm.bundle.min.mjs": "onnxruntime-web/dist/ort.wasm.bundle.min.mjs",
    "ort-wasm-simd-threaded.wasm": "onnxruntime-web/dist/ort-wasm-simd-threaded.wasm",
}
SHARED_WEIGHTS = "shared_weights.onnx_data"  # in model/onnx/: the tensors both graphs hold, stored once
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
            f"point --runtime (or {RUNTIME_ENV}) at a node_modules folder holding onnxruntime-web and "
            f"@huggingface/tokenizers"
        )
    return folder


def graph_key(quantization: str) -> str:
    """The key of `decoding.json`'s graph entries that names the graph file of `quantization`."""
    return "int8_file" if quantization == "int8" else "file"


def page_settings(folder: Path, description: dict[str, Any], quantization: str) -> dict[str, Any]:
    """What `model/page.json` tells the page: the model's name, type and languages, the quantization of its graphs,
    their paths in `model/` and the beams it searches by default (and, as the graphs are written, `shared_weights`:
    the path of the tensors both graphs read, or None)."""
    config = read_json(folder / "config.json")
    return {
        "name": folder.name,
        "model_type": config.get("model_type"),
        "source_language": config.get("source_language") or "source",
        "target_language": config.get("target_language") or "target",
        "quantization": quantization,
        "graphs": {part: f"onnx/{description[part][graph_key(quantization)]}" for part in ("encoder", "decoder")},
        "num_beams": min(max(int(description.get("num_beams") or 1), 1), MAX_PAGE_BEAMS),
    }


def _copy_model(onnx_folder: Path, model: Path, description: dict[str, Any], quantization: str) -> str | None:
    """The files the page reads of an ONNX export into `model`: the graphs of `quantization` only, what both hold
    alike (a shared embedding, the position tables) once, in `SHARED_WEIGHTS`; its path in `model`, if any."""
    (model / "onnx").mkdir(parents=True)
    for name in MODEL_FILES:
        if (onnx_folder / name).is_file():
            shutil.copy2(onnx_folder / name, model / name)
    if (model / "tokenizer.json").is_file():  # without its indentation: the same JSON in less than half the bytes
        tokenizer = json.dumps(read_json(model / "tokenizer.json"), ensure_ascii=False, separators=(",", ":"))
        (model / "tokenizer.json").write_text(tokenizer, encoding="utf-8")
    graphs = [model / "onnx" / description[part][graph_key(quantization)] for part in ("encoder", "decoder")]
    for graph in graphs:
        shutil.copy2(onnx_folder / "onnx" / graph.name, graph)
    shutil.copy2(onnx_folder / "onnx" / "decoding.json", model / "onnx" / "decoding.json")
    return f"onnx/{SHARED_WEIGHTS}" if share_weights(graphs, SHARED_WEIGHTS) else None


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
            shared = _copy_model(onnx_folder, staging / "model", description, quantization)
            text = json.dumps({**settings, "shared_weights": shared}, indent=2, ensure_ascii=False) + "\n"
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
