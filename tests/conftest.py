"""Shared fixtures: the shared corpora beside the repo, skipped cleanly when absent."""

from __future__ import annotations

import importlib.util
import os
import tempfile
from pathlib import Path
from types import ModuleType

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
_DEFAULT_DATA_DIR = REPO_ROOT.parent / "shared" / "data"

# Tests never download: point named corpora at the shared copy and keep the Hub offline.
os.environ.setdefault("HF_BAHDANAU_DATA_DIR", str(_DEFAULT_DATA_DIR))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
# Every Hugging Face cache (datasets, evaluate modules, remote code) goes to a throw-away folder, not the home.
os.environ["HF_HOME"] = tempfile.mkdtemp(prefix="hf_bahdanau_tests_")


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


@pytest.fixture(scope="session")
def d2l() -> ModuleType:
    """`scripts/d2l_reference.py`: d2l's own code, the reference our maths is checked against."""
    return load_script("d2l_reference")


@pytest.fixture(scope="session")
def rnn_folder(tmp_path_factory: pytest.TempPathFactory, tatoeba_tsv: Path) -> Path:
    """A tiny RNN trained by `hf-bahdanau train` for 10 steps (no evaluation); tests change only copies of it."""
    from helpers import TINY_MODEL, TINY_RUN

    from hf_bahdanau.cli import main

    output = tmp_path_factory.mktemp("trained") / "rnn"
    status = main(
        ["train", "--data", str(tatoeba_tsv), "--output-dir", str(output), *TINY_RUN, *TINY_MODEL["bahdanau"],
         "--max_steps", "10", "--eval_strategy", "no", "--load_best_model_at_end", "false", "--save_steps", "10"]
    )  # fmt: skip
    assert status == 0
    return output


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
