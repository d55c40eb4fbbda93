"""Run saved model folders on every transformers 5 release, as a downloader would (the package not installed).

    python3 scripts/version_matrix.py                      # every 5.x minor release's latest patch, and 4.57.6
    python3 scripts/version_matrix.py --releases 5.0.0 5.24.0

One virtual environment per release under `--cache` (default `~/.cache/hf_bahdanau/version-matrix`): torch lives
once in `torch/` and reaches every release's venv through a `.pth` line. With this package (run from the repo), the
script saves a tiny model folder of every variant and its reference outputs (greedy and beam 5 token ids, logits);
then, for each release, `version_matrix_probe.py` runs in that release's venv from a folder where `hf_bahdanau`
cannot be imported and checks: `AutoModelForSeq2SeqLM`, `AutoModel` and `AutoTokenizer` with
`trust_remote_code=True`, greedy and beam 5 token-identical to the reference, logits within 1e-5,
`pipeline("translation", model=folder, trust_remote_code=True)` and one `Seq2SeqTrainer` step. The standard
folders of `hf-bahdanau export --format transformers` (MarianMT, Blenderbot) go through the same checks with no remote
code, against the outputs of the d2l Transformer they were exported from (logits within 1e-4). It prints a table
(release x variant) and writes it, with the details, to `--cache`/results.json.

    python3 scripts/version_matrix.py --models runs/quick-de-en --sentences 100

`--models` adds a column per trained d2l Transformer folder: its standard folder (`export --format transformers`)
and the outputs of its d2l model on the first `--sentences` test_2016_flickr sources (all 1,000 by default; the
model's source language) in padded batches of 50 of like length, greedy and beam 5 with the folder's generation
settings; each release loads the standard folder without remote code, translates the same batches with the same
settings and counts the sentences whose token ids differ ("ok" only when none does; the logits of the first 5
sentences within 1e-4).
"""

from __future__ import annotations

import argparse
import gzip
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
PROBE = HERE / "version_matrix_probe.py"
TORCH = "torch==2.13.0"
LAST_V4 = "4.57.6"
# What a downloader needs beside transformers: accelerate for Seq2SeqTrainer.
EXTRAS = ("accelerate",)


def run(command: list[str]) -> subprocess.CompletedProcess:
    result = subprocess.run(command, text=True, capture_output=True)
    if result.returncode:
        raise SystemExit(f"{' '.join(command)} failed:\n{result.stderr.strip()}")
    return result


def available_releases() -> list[str]:
    """The latest patch of every transformers 5.x minor release (`pip index versions`), and the last v4."""
    listing = run([sys.executable, "-m", "pip", "index", "versions", "transformers"]).stdout
    versions = re.search(r"Available versions: (.*)", listing).group(1).split(", ")
    latest: dict[tuple[int, int], str] = {}
    for version in versions:
        parts = version.split(".")
        if len(parts) == 3 and all(part.isdigit() for part in parts) and parts[0] == "5":
            key = (int(parts[0]), int(parts[1]))
            if key not in latest or tuple(map(int, parts)) > tuple(map(int, latest[key].split("."))):
                latest[key] = version
    return [LAST_V4] + [latest[key] for key in sorted(latest)]


def python_of(venv: Path) -> Path:
    return venv / "bin" / "python"


def site_packages(venv: Path) -> Path:
    return next((venv / "lib").glob("python3*/site-packages"))


def ensure_torch(cache: Path) -> Path:
    """The venv holding torch (CPU) that every release's venv shares."""
    venv = cache / "torch"
    if not (venv / "ok").exists():
        run([sys.executable, "-m", "venv", "--clear", str(venv)])
        run([str(python_of(venv)), "-m", "pip", "install", "-q", TORCH, "numpy"])
        (venv / "ok").write_text(TORCH)
    return venv


def ensure_release(cache: Path, release: str, torch_venv: Path) -> Path:
    """The venv of one transformers release with accelerate (as a downloader installs them), torch shared through a
    `.pth` line. With `uv` on the PATH it takes seconds; else pip. accelerate goes in without its dependencies (they
    come with transformers, but torch, which it names too, is in the shared venv where the installers do not look)."""
    venv = cache / f"transformers-{release}"
    if (venv / "ok").exists():
        return venv
    shutil.rmtree(venv, ignore_errors=True)  # an unfinished build (no "ok" mark) of this script's own
    python = str(python_of(venv))
    uv = shutil.which("uv")
    if uv:
        run([uv, "venv", "-q", "--python", sys.executable, str(venv)])
        install = [uv, "pip", "install", "-q", "--python", python]
    else:
        run([sys.executable, "-m", "venv", "--clear", str(venv)])
        install = [python, "-m", "pip", "install", "-q"]
    (site_packages(venv) / "shared_torch.pth").write_text(f"{site_packages(torch_venv)}\n")
    run([*install, f"transformers=={release}", "psutil"])
    run([*install, "--no-deps", *EXTRAS])
    (venv / "ok").write_text(release)
    return venv


TIED = {"tie_word_embeddings": True, "tie_encoder_decoder_embeddings": True}
VARIANTS = {  # name -> (model type, config settings): every model variant a user can train
    "GRU": ("bahdanau", {}),
    "LSTM": ("bahdanau", {"rnn_type": "lstm"}),
    "bidirectional": ("bahdanau", {"bidirectional_encoder": True}),
    "shared embeddings": ("bahdanau", TIED),
    "cGRU": ("bahdanau", {"decoder_type": "cgru"}),
    "Transformer": ("d2l_transformer", {"max_position_embeddings": 128}),
    # the standard folders (`export --format transformers`) of a post-norm, a pre-norm and a tied pre-norm Transformer
    "MarianMT": ("d2l_transformer", {"max_position_embeddings": 128, "norm_first": False}),
    "Blenderbot": ("d2l_transformer", {"max_position_embeddings": 128, "norm_first": True}),
    "Blenderbot tied": ("d2l_transformer", {"max_position_embeddings": 128, "norm_first": True, **TIED}),
}
STANDARD = ("MarianMT", "Blenderbot", "Blenderbot tied")  # saved as standard folders, loaded without remote code
WIDTH = {"bahdanau": {"embedding_size": 32, "hidden_size": 32}, "d2l_transformer": {"d_model": 32, "ffn_dim": 64}}
SENTENCES = 50
MAX_NEW_TOKENS = 20
TEST_SPLIT = "test_2016_flickr"  # the split a trained model's standard folder translates
BATCH = 50  # sentences a generate() call, on both sides of a trained model's check
LOGIT_SENTENCES = 5  # the first sentences whose logits are compared
# A trained folder's search settings, passed to generate() explicitly on both sides (no release default between them)
SEARCH_SETTINGS = ("max_new_tokens", "max_length", "min_new_tokens", "min_length", "length_penalty", "early_stopping",
                   "no_repeat_ngram_size", "repetition_penalty")  # fmt: skip


def sentences(data_dir: Path) -> list[str]:
    """`SENTENCES` German test sentences of Multi30k from `data_dir`, else generated ones."""
    path = data_dir / "multi30k" / "test_2016_flickr.de.gz"
    if path.is_file():
        with gzip.open(path, "rt", encoding="utf-8") as lines:
            return [next(lines).strip() for _ in range(SENTENCES)]
    words = "ein mann eine frau zwei hunde spielen im schnee am strand liest ein buch".split()
    return [" ".join(words[(i * 7 + j * 3) % len(words)] for j in range(3 + i % 9)) for i in range(SENTENCES)]


def make_folders(work: Path, texts: list[str]) -> None:
    """With this package (and the transformers it runs on): a tiny random model folder per variant and its
    reference outputs (greedy and beam 5 ids, logits, the pipeline's translations); a `STANDARD` variant's folder
    is the standard export of the model, its references those of the model itself."""
    import torch

    sys.path.insert(0, str(REPO))
    from transformers import pipeline

    from hf_bahdanau import get_model_type
    from hf_bahdanau.data.tokenization import train_tokenizer
    from hf_bahdanau.decoding.export.standard_folder import export_transformers
    from hf_bahdanau.models.pipelines import TASK, save_for_pipeline

    tokenizer = train_tokenizer(texts, 200, min_freq=1)
    inputs = tokenizer(texts, padding=True, return_tensors="pt")
    for index, (name, (model_type, settings)) in enumerate(VARIANTS.items()):
        config_class, model_class = get_model_type(model_type)
        torch.manual_seed(index)
        config = config_class(vocab_size=len(tokenizer), dropout=0.0, **WIDTH[model_type], **settings)
        model = model_class(config).eval()
        folder = save_for_pipeline(model, tokenizer, work / "folders" / name.replace(" ", "_"))
        if name in STANDARD:
            ours, folder = folder, folder.with_name(folder.name + ".ours")
            ours.rename(folder)
            export_transformers(folder, ours)
        with torch.no_grad():
            greedy = model.generate(**inputs, num_beams=1, do_sample=False, max_new_tokens=MAX_NEW_TOKENS)
            beam = model.generate(**inputs, num_beams=5, do_sample=False, max_new_tokens=MAX_NEW_TOKENS)
            logits = model(**inputs, decoder_input_ids=beam).logits
        translate = pipeline(TASK, model=str(folder), max_new_tokens=MAX_NEW_TOKENS)
        texts_out = [result["translation_text"] for result in translate(texts[:5])]
        stem = folder.parent / name.replace(" ", "_")
        torch.save({"greedy": greedy, "beam": beam, "logits": logits}, f"{stem}.reference.pt")
        Path(f"{stem}.pipeline.json").write_text(json.dumps(texts_out, ensure_ascii=False))
    (work / "sentences.json").write_text(json.dumps(texts, ensure_ascii=False))


def read_probe() -> ModuleType:
    """`version_matrix_probe.py` as a module: its `translate` and `logits_of` make a trained model's reference."""
    spec = importlib.util.spec_from_file_location("version_matrix_probe", PROBE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def source_sentences(model_dir: Path, data_dir: Path, count: int | None = None) -> list[str]:
    """The first `count` (default: all) test_2016_flickr sources of Multi30k under `data_dir`, in the model folder's
    source language (its config's `source_language`, else the `src_lang` its training run recorded)."""
    if not (model_dir / "config.json").is_file():
        raise SystemExit(f"{model_dir} is no model folder: it has no config.json")
    config = json.loads((model_dir / "config.json").read_text())
    run_file = model_dir / "translation_data.json"
    language = config.get("source_language") or (json.loads(run_file.read_text()) if run_file.is_file() else {}).get(
        "src_lang"
    )
    if not language:
        raise SystemExit(f"{model_dir} names no source language (config.json's source_language)")
    path = data_dir / "multi30k" / f"{TEST_SPLIT}.{language}.gz"
    if not path.is_file():
        raise SystemExit(f"{path} not found: --data-dir must hold multi30k/{path.name}")
    with gzip.open(path, "rt", encoding="utf-8") as lines:
        return [line.strip() for line in lines][:count]


def generation_settings(generation: object) -> dict:
    """The search settings (`SEARCH_SETTINGS`) a generation config sets: max length etc."""
    settings = {name: getattr(generation, name, None) for name in SEARCH_SETTINGS}
    if settings["max_new_tokens"] is not None:
        settings.pop("max_length")  # max_new_tokens wins; both given, generate() warns
    return {name: value for name, value in settings.items() if value is not None}


def make_model_case(model_dir: Path, case: Path, texts: list[str]) -> None:
    """With this package: the standard folder of the trained `model_dir` in `case/export`, and what its d2l model
    gives on `texts` in `case/reference.json` (the batches, `BATCH` sentences of like length each; the generation
    settings; the input ids, greedy and beam-5 ids) and `case/reference.logits.pt` (the logits of the first
    `LOGIT_SENTENCES` beam outputs)."""
    import torch

    sys.path.insert(0, str(REPO))
    from hf_bahdanau.decoding.export.folders import load_exportable
    from hf_bahdanau.decoding.export.standard_folder import export_transformers
    from hf_bahdanau.errors import InputError

    probe_module = read_probe()
    try:
        export_transformers(model_dir, case / "export")
    except InputError as error:
        raise SystemExit(f"{model_dir}: {error}") from None
    model, tokenizer = load_exportable(model_dir)
    lengths = [len(ids) for ids in tokenizer(texts)["input_ids"]]
    order = sorted(range(len(texts)), key=lambda index: lengths[index])  # less padding, fewer steps past an end
    batches = [order[start : start + BATCH] for start in range(0, len(texts), BATCH)]
    settings = generation_settings(model.generation_config)
    found = probe_module.translate(model, tokenizer, texts, batches, settings)
    first = min(LOGIT_SENTENCES, len(texts))
    torch.save(probe_module.logits_of(model, tokenizer, texts[:first], found["beam 5"][:first]),
               case / "reference.logits.pt")  # fmt: skip
    reference = {"sentences": texts, "batches": batches, "generation": settings, "logit_sentences": first, **found}
    (case / "reference.json").write_text(json.dumps(reference, ensure_ascii=False))


def model_columns(models: list[Path]) -> dict[str, Path]:
    """The table's column of each trained model folder: its folder's name (numbered where two share one)."""
    columns: dict[str, Path] = {}
    for model in models:
        name = model.resolve().name
        column, number = name, 2
        while column in columns:
            column, number = f"{name} ({number})", number + 1
        columns[column] = model
    return columns


def probe(venv: Path, work: Path, release: str) -> dict:
    """Run `version_matrix_probe.py` in the release's venv from an empty folder (no `hf_bahdanau` to import);
    returns its report `{variant: {check: "ok" | error}}` or `{"error": ...}`."""
    with tempfile.TemporaryDirectory(prefix=f"matrix-{release}-") as home:
        env = {key: value for key, value in os.environ.items() if not key.startswith(("PYTHON", "HF_"))}
        env.update(HF_HOME=home, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false", OMP_NUM_THREADS="1")
        report = Path(home) / "report.json"
        result = subprocess.run(
            [str(python_of(venv)), str(PROBE), str(work), str(report)],
            cwd=home,
            env=env,
            text=True,
            capture_output=True,
            timeout=900 + 3600 * len(list((work / "models").glob("*"))),
        )
        if report.is_file():
            return json.loads(report.read_text())
        return {"error": (result.stderr.strip().splitlines() or ["no output"])[-1]}


def cell(checks: dict) -> str:
    """The cell of one folder: "ok" when every check passed (those that do not apply, "n/a: why", in brackets);
    else the failures."""
    failed = [f"{check}: {error}" for check, error in checks.items() if error != "ok" and not error.startswith("n/a")]
    skipped = [f"{check} {error}" for check, error in checks.items() if error.startswith("n/a")]
    if failed:
        return "; ".join(failed)[:300]
    return "ok" + (f" ({'; '.join(skipped)})" if skipped else "")


def model_cell(entry: dict) -> str:
    """The cell of a trained model's standard folder: "ok (0 of N differ ...)" when every check passed (no sentence
    differs), else the failures; then the probe's time."""
    text = cell(entry["checks"])
    if text.startswith("ok"):
        text = f"ok: 0 of {entry['sentences']} differ, greedy and beam 5; logits within {entry['logits']:.1e}"
    return f"{text} ({entry['seconds']:.0f} s)" if "seconds" in entry else text


def cells(report: dict, models: list[str]) -> list[str]:
    """One release's cells: the tiny variants', then each trained model's."""
    return [cell(report.get(name, {"run": "not run"})) for name in VARIANTS] + [
        model_cell(report.get(name, {"checks": {"run": "not run"}})) for name in models
    ]


def passed(report: dict, models: list[str]) -> bool:
    return "error" not in report and all(text.startswith("ok") for text in cells(report, models))


def table(results: dict[str, dict], models: list[str]) -> str:
    """Markdown table: one row per release, one column per variant and per trained model ("ok" = every check
    passed)."""
    columns = [*VARIANTS, *models]
    lines = ["| transformers | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
    for release, report in results.items():
        row = [report["error"][:300]] + [""] * (len(columns) - 1) if "error" in report else cells(report, models)
        lines.append(f"| {release} | " + " | ".join(row) + " |")
    return "\n".join(lines)


def positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"a whole number of sentences, at least 1, not {text!r}")
    return int(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--releases", nargs="*", help="transformers releases (default: every 5.x minor's latest patch, "
                        "and 4.57.6)")  # fmt: skip
    parser.add_argument("--cache", type=Path, default=Path("~/.cache/hf_bahdanau/version-matrix").expanduser())
    parser.add_argument(
        "--data-dir", type=Path, default=Path(os.environ.get("HF_BAHDANAU_DATA_DIR", REPO.parent / "shared" / "data"))
    )
    parser.add_argument("--jobs", type=int, default=2, help="releases probed at once")
    parser.add_argument(
        "--models",
        nargs="+",
        type=Path,
        default=[],
        metavar="FOLDER",
        help="trained d2l_transformer model folders whose standard folders are checked too",
    )
    parser.add_argument(
        "--sentences",
        type=positive,
        metavar="N",
        help=f"the first N {TEST_SPLIT} sources a trained model translates (default: all)",
    )
    args = parser.parse_args(argv)
    models = {column: (model, source_sentences(model, args.data_dir, args.sentences))
              for column, model in model_columns(args.models).items()}  # fmt: skip
    releases = args.releases or available_releases()
    args.cache.mkdir(parents=True, exist_ok=True)
    start = time.time()
    torch_venv = ensure_torch(args.cache)
    venvs = {release: ensure_release(args.cache, release, torch_venv) for release in releases}
    print(f"{len(venvs)} venvs ready ({time.time() - start:.0f} s)", flush=True)
    work = Path(tempfile.mkdtemp(prefix="folders-", dir=args.cache))
    try:
        results = probe_all(work, venvs, sentences(args.data_dir), models, args.jobs, start)
    finally:
        shutil.rmtree(work)
    (args.cache / "results.json").write_text(json.dumps(results, indent=1))
    print(table(results, list(models)))
    print(f"{time.time() - start:.0f} s in all")
    # transformers 4 passes when it refuses at load with one line naming the release needed.
    return 0 if all(passed(report, list(models)) for report in results.values()) else 1


def probe_all(
    work: Path,
    venvs: dict[str, Path],
    texts: list[str],
    models: dict[str, tuple[Path, list[str]]],
    jobs: int,
    start: float,
) -> dict[str, dict]:
    """Save the folders into `work`: the tiny ones (with `texts`), and the case of each trained model (column: its
    folder and the sentences it translates) in `work/models`; then probe every release's venv (`jobs` at once)."""
    make_folders(work, texts)
    print(f"folders saved ({time.time() - start:.0f} s)", flush=True)
    for column, (model, sources) in models.items():
        make_model_case(model, work / "models" / column, sources)
        print(f"{column}: standard folder and references of {len(sources)} sentences ({time.time() - start:.0f} s)",
              flush=True)  # fmt: skip

    def one(release: str) -> tuple[str, dict]:
        report = probe(venvs[release], work, release)
        state = "ok" if passed(report, list(models)) else "FAILED"
        print(f"transformers {release}: {state} ({time.time() - start:.0f} s)", flush=True)
        return release, report

    with ThreadPoolExecutor(jobs) as pool:
        return dict(pool.map(one, venvs))


if __name__ == "__main__":
    sys.exit(main())
