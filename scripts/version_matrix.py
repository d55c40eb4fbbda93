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
"""

from __future__ import annotations

import argparse
import gzip
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
            timeout=900,
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


def passed(report: dict) -> bool:
    return "error" not in report and all(cell(checks).startswith("ok") for checks in report.values())


def table(results: dict[str, dict]) -> str:
    """Markdown table: one row per release, one column per variant ("ok" = every check passed)."""
    lines = ["| transformers | " + " | ".join(VARIANTS) + " |", "|---" * (len(VARIANTS) + 1) + "|"]
    for release, report in results.items():
        if "error" in report:
            row = [report["error"][:300]] + [""] * (len(VARIANTS) - 1)
        else:
            row = [cell(report.get(name, {"run": "not run"})) for name in VARIANTS]
        lines.append(f"| {release} | " + " | ".join(row) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--releases", nargs="*", help="transformers releases (default: every 5.x minor's latest patch, "
                        "and 4.57.6)")  # fmt: skip
    parser.add_argument("--cache", type=Path, default=Path("~/.cache/hf_bahdanau/version-matrix").expanduser())
    parser.add_argument(
        "--data-dir", type=Path, default=Path(os.environ.get("HF_BAHDANAU_DATA_DIR", REPO.parent / "shared" / "data"))
    )
    parser.add_argument("--jobs", type=int, default=2, help="releases probed at once")
    args = parser.parse_args(argv)
    releases = args.releases or available_releases()
    args.cache.mkdir(parents=True, exist_ok=True)
    start = time.time()
    torch_venv = ensure_torch(args.cache)
    venvs = {release: ensure_release(args.cache, release, torch_venv) for release in releases}
    print(f"{len(venvs)} venvs ready ({time.time() - start:.0f} s)", flush=True)
    work = Path(tempfile.mkdtemp(prefix="folders-", dir=args.cache))
    try:
        results = probe_all(work, venvs, args, start)
    finally:
        shutil.rmtree(work)
    (args.cache / "results.json").write_text(json.dumps(results, indent=1))
    print(table(results))
    # transformers 4 passes when it refuses at load with one line naming the release needed.
    return 0 if all(passed(report) for report in results.values()) else 1


def probe_all(work: Path, venvs: dict[str, Path], args: argparse.Namespace, start: float) -> dict[str, dict]:
    """Save the folders into `work`, then probe every release's venv (`args.jobs` at once)."""
    make_folders(work, sentences(args.data_dir))
    print(f"folders saved ({time.time() - start:.0f} s)", flush=True)

    def one(release: str) -> tuple[str, dict]:
        report = probe(venvs[release], work, release)
        print(
            f"transformers {release}: {'ok' if passed(report) else 'FAILED'} ({time.time() - start:.0f} s)", flush=True
        )
        return release, report

    with ThreadPoolExecutor(args.jobs) as pool:
        return dict(pool.map(one, venvs))


if __name__ == "__main__":
    sys.exit(main())
