"""Shared fixtures: the shared corpora beside the repo (skipped cleanly when absent), tiny tokenizers and folders, the
session's trained tiny models (`trained_folder`), and around every test what it changes in the process put back
(`kept_state`)."""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
_DEFAULT_DATA_DIR = REPO_ROOT.parent / "shared" / "data"

# Tests never download: point named corpora at the shared copy and keep the Hub offline.
os.environ.setdefault("HF_BAHDANAU_DATA_DIR", str(_DEFAULT_DATA_DIR))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
# Tiny models compute on one thread, here and in every process a test starts: on tensors this small a second
# thread costs more in synchronisation than it gains (several times more on a busy machine of two cores).
os.environ.setdefault("OMP_NUM_THREADS", "1")
# Every Hugging Face cache (datasets, evaluate modules, remote code, trackio's store) goes to a throw-away folder of the
# run, not the home: one for all its processes (pytest-xdist's workers inherit it from the process that starts them).
os.environ.setdefault("HF_BAHDANAU_TEST_HF_HOME", tempfile.mkdtemp(prefix="hf_bahdanau_tests_"))
os.environ["HF_HOME"] = os.environ["HF_BAHDANAU_TEST_HF_HOME"]
# Python keeps compiled modules (in the git-ignored __pycache__ folders) even where the environment says not to: each
# process a test starts, and each pytest-xdist worker's rewritten asserts, would otherwise compile them again.
sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)


def made_once(tmp_path_factory: pytest.TempPathFactory, name: str, make: Callable[[Path], None]) -> Path:
    """The folder `name` that `make(folder)` fills, made once a test run: under pytest-xdist its workers share the
    run's base temporary folder, and the first to ask makes it (under a file lock) while the others wait, then read
    it; without xdist, a folder of this session's. Callers only read the folder."""
    from filelock import FileLock

    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        folder = tmp_path_factory.mktemp(name)
        make(folder)
        return folder
    root = tmp_path_factory.getbasetemp().parent  # the run's folder, shared by its workers
    folder, made = root / name, root / f"{name}.made"
    with FileLock(str(root / f"{name}.lock")):
        if not made.is_file():  # (a worker that failed part way leaves a folder to start again)
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            make(folder)
            made.touch()
    return folder


@pytest.fixture(autouse=True)
def kept_state() -> Iterator[None]:
    """What a test changes in this process - environment, folder, signal handlers, the root logger's own handlers,
    torch's thread count, the libraries' progress bars - is as it was after it (`helpers.kept_process_state`): a
    command run in-process (`main(argv)`) leaves the next test nothing, in any order and in any worker."""
    from helpers import kept_process_state

    with kept_process_state():
        yield


@pytest.fixture(scope="session")
def cli_command() -> list[str]:
    """`hf-bahdanau` as a process of its own (`python -m hf_bahdanau.cli`), for the tests whose behaviour is the
    process's: signals, pipes, a terminal, server workers. Any other test calls `main(argv)` in-process."""
    return [sys.executable, "-m", "hf_bahdanau.cli"]


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The shared data folder (`$HF_BAHDANAU_DATA_DIR`); skips the test when it is absent."""
    path = Path(os.environ["HF_BAHDANAU_DATA_DIR"])
    if not path.is_dir():
        pytest.skip(f"shared data not found at {path}")
    return path


@pytest.fixture(scope="session")
def multi30k_dir(data_dir: Path) -> Path:
    path = data_dir / "multi30k"
    if not path.is_dir():
        pytest.skip(f"{path} not found")
    return path


@pytest.fixture(scope="session")
def tatoeba_tsv(data_dir: Path) -> Path:
    path = data_dir / "tatoeba-fra-eng" / "fra-eng.tsv"
    if not path.is_file():
        pytest.skip(f"{path} not found")
    return path


@pytest.fixture(scope="module")
def tokenizer(request: pytest.FixtureRequest):
    """A tokenizer of 120 tokens learnt from the test module's `CORPUS` (else `helpers.TINY_CORPUS`)."""
    from helpers import TINY_CORPUS

    from hf_bahdanau.data.tokenization import train_tokenizer

    return train_tokenizer(getattr(request.module, "CORPUS", TINY_CORPUS), 120, min_freq=1)


@pytest.fixture(scope="module")
def folder(model, tokenizer, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The test module's `model` fixture and `tokenizer` saved as a model folder (`save_for_pipeline`)."""
    from hf_bahdanau.models.pipelines import save_for_pipeline

    return save_for_pipeline(model, tokenizer, tmp_path_factory.mktemp("tiny") / "model")


def load_script(name: str) -> ModuleType:
    """`scripts/<name>.py` imported as a module."""
    spec = importlib.util.spec_from_file_location(name, REPO_ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def run_script(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> Callable[..., str]:
    """`run_script(name, *args)`: `scripts/<name>.py`'s `main()` run in this process on the command line `args` (with
    scripts/ on `sys.path`, as when it runs as a script); what it logged at INFO and above, one record a line as
    `caplog` formats them."""
    monkeypatch.syspath_prepend(str(REPO_ROOT / "scripts"))

    def run(name: str, *args: str) -> str:
        monkeypatch.setattr("sys.argv", [f"{name}.py", *args])
        caplog.clear()
        with caplog.at_level(logging.INFO):
            load_script(name).main()
        return caplog.text

    return run


@pytest.fixture(scope="session")
def d2l() -> ModuleType:
    """`scripts/d2l_reference.py`: d2l's own code, the reference our maths is checked against."""
    return load_script("d2l_reference")


@pytest.fixture(scope="session")
def trained_folder(tmp_path_factory: pytest.TempPathFactory, tatoeba_tsv: Path) -> Callable[..., Path]:
    """`trained_folder(model_type)`: a tiny model of that type (`helpers.TINY_MODEL`: "bahdanau" or
    "d2l_transformer") trained by `hf-bahdanau train` on 300 Tatoeba en-fr pairs for 60 steps, evaluated and saved
    at steps 30 and 60, the best evaluation's weights kept. Each type is trained once a test run (`made_once`), when
    a test first asks for it; tests only read that folder. `trained_folder(model_type, into)`: a copy of it at
    `into`, checkpoints too, for a test or module that changes it (`evaluate` records its scores there, `--engine
    ctranslate2` keeps its export there)."""
    from helpers import TINY_MODEL, TINY_RUN, kept_process_state

    from hf_bahdanau.cli import main

    folders: dict[str, Path] = {}

    def train(model_type: str, root: Path) -> None:
        with kept_process_state():  # (a session fixture: made before the test's own state is kept)
            status = main(
                ["train", "--data", str(tatoeba_tsv), "--output-dir", str(root / "model"), *TINY_RUN,
                 *TINY_MODEL[model_type], "--max_steps", "60", "--eval_steps", "30", "--save_steps", "30"]
            )  # fmt: skip
        assert status == 0

    def trained(model_type: str, into: Path | None = None) -> Path:
        if model_type not in folders:
            root = made_once(tmp_path_factory, f"trained-{model_type}", lambda root: train(model_type, root))
            folders[model_type] = root / "model"
        return folders[model_type] if into is None else Path(shutil.copytree(folders[model_type], into))

    return trained


@pytest.fixture(scope="session")
def rnn_folder(trained_folder: Callable[..., Path]) -> Path:
    """The session's trained tiny RNN (`trained_folder("bahdanau")`); tests change only copies of it."""
    return trained_folder("bahdanau")


# Run where `hf_bahdanau` cannot be imported: each folder loaded from its own remote code, by the Auto classes and by
# the pipeline of each task name.
_WITHOUT_THE_PACKAGE = """
import json, sys
sys.modules["hf_bahdanau"] = None  # as if the package were not installed
import torch
from transformers import AutoModel, AutoModelForSeq2SeqLM, pipeline
found = {}
for model_type, folder in json.loads(sys.argv[1]).items():
    inputs = torch.load(f"{folder}/inputs.pt")
    head = AutoModelForSeq2SeqLM.from_pretrained(f"{folder}/model", trust_remote_code=True)
    base = AutoModel.from_pretrained(f"{folder}/model", trust_remote_code=True)
    with torch.no_grad():
        generated = head.generate(inputs["ids"], max_new_tokens=6).tolist()
        states = base(input_ids=inputs["src"], attention_mask=inputs["mask"], decoder_input_ids=inputs["tgt"])
    torch.save(states.last_hidden_state, f"{folder}/states.pt")
    modules = [type(model).__module__ for model in (head, base)]
    found[model_type] = {"modules": modules, "classes": [type(m).__name__ for m in (base, head, head.model)],
                         "generated": generated, "translations": [], "pipeline_modules": []}
    for task in json.loads(sys.argv[2]):
        pipe = pipeline(task, model=f"{folder}/pipeline", trust_remote_code=True, max_new_tokens=int(sys.argv[4]))
        found[model_type]["pipeline_modules"].append([type(pipe).__module__.split(".")[0],
                                                      type(pipe.model).__module__.split(".")[0]])
        found[model_type]["translations"].append(pipe(json.loads(sys.argv[3]), batch_size=2))
print(json.dumps(found))
"""


@pytest.fixture(scope="session")
def without_the_package(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    """Each model type's tiny model (`helpers.make_model`) saved with its remote code, and one with a word tokenizer
    saved for the pipeline, then loaded in one process where `hf_bahdanau` cannot be imported: by
    `AutoModelForSeq2SeqLM` and `AutoModel` (`trust_remote_code=True`), and by `pipeline(task, trust_remote_code=True)`
    for each of the package's task names. By model type: `model` and its `folder` (in-process), the `inputs` given
    there (`ids` to generate 6 tokens from; `src`, `mask` and `tgt` for the base model), `pipeline_model` and the
    `pipeline_texts` it translated (batches of 2), and what that process found: `modules` and `classes` of the loaded
    models, the `generated` ids, the base model's `states` (last hidden states), each pipeline's `translations` and
    the top-level `pipeline_modules` of its class and of its model's class."""
    import json

    import torch
    from helpers import MODEL_TYPES, PIPELINE_NEW_TOKENS, WORD_CORPUS, WORD_TEXTS, make_model, random_ids

    from hf_bahdanau.data.tokenization import train_tokenizer
    from hf_bahdanau.models.pipelines import TASK, TASK_ALIASES, save_for_pipeline

    words = train_tokenizer(WORD_CORPUS, None, model="word", min_freq=1)
    texts = [WORD_TEXTS[0], "", WORD_TEXTS[2], WORD_TEXTS[3]]
    results = {}
    for model_type in MODEL_TYPES:
        model = make_model(model_type)
        src, mask = random_ids(3, 6, seed=3), torch.ones(3, 6, dtype=torch.long)
        mask[1, :2] = 0  # row 1 left-padded
        inputs = {"ids": random_ids(2, 6), "src": src.masked_fill(mask == 0, 0), "mask": mask,
                  "tgt": random_ids(3, 4, seed=4)}  # fmt: skip
        results[model_type] = {"model": model, "inputs": inputs, "pipeline_texts": texts,
                               "pipeline_model": make_model(model_type, vocab_size=len(words))}  # fmt: skip

    def load_without_the_package(root: Path) -> None:
        for model_type, made in results.items():
            made["model"].save_pretrained(root / model_type / "model")
            save_for_pipeline(made["pipeline_model"], words, root / model_type / "pipeline")
            torch.save(made["inputs"], root / model_type / "inputs.pt")
        folders = json.dumps({model_type: str(root / model_type) for model_type in MODEL_TYPES})
        tasks = json.dumps([TASK, *TASK_ALIASES])  # "translation", as transformers v4 users type it
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(root / "hf_home"), "PYTHONPATH": ""}
        process = subprocess.run([sys.executable, "-c", _WITHOUT_THE_PACKAGE, folders, tasks, json.dumps(texts),
                                  str(PIPELINE_NEW_TOKENS)], cwd=root, env=env, capture_output=True, text=True,
                                 timeout=600)  # fmt: skip
        assert process.returncode == 0, process.stderr[-3000:]
        (root / "found.json").write_text(process.stdout.strip().splitlines()[-1], encoding="utf-8")

    root = made_once(tmp_path_factory, "without_the_package", load_without_the_package)
    for model_type, found in json.loads((root / "found.json").read_text(encoding="utf-8")).items():
        states = torch.load(root / model_type / "states.pt")
        results[model_type].update(found, folder=root / model_type / "model", states=states)
    return results


@pytest.fixture
def saved(tmp_path: Path) -> Path:
    """A tiny untrained en->fr model saved as `train` saves it (model, tokenizer, remote code, pipeline)."""
    from helpers import EN_FR_SENTENCES, make_model

    from hf_bahdanau.data.tokenization import train_tokenizer
    from hf_bahdanau.models.pipelines import save_for_pipeline

    tokenizer = train_tokenizer(EN_FR_SENTENCES * 5, None, model="word", min_freq=1)
    ids = dict(pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
               bos_token_id=tokenizer.bos_token_id, decoder_start_token_id=tokenizer.bos_token_id)  # fmt: skip
    model = make_model("bahdanau", vocab_size=len(tokenizer), source_language="en", target_language="fr", **ids)
    return save_for_pipeline(model, tokenizer, tmp_path / "model")
