"""`scripts/version_matrix.py --models`: a trained Transformer's standard folder against its d2l model, run here in
the current environment (no venv): the reference (`make_model_case`) and one release's probe (`probe_trained`)
agree on every sentence of an exact export, and count the sentences a perturbed export translates otherwise."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
import torch
from conftest import load_script
from helpers import TINY_CORPUS, make_model
from safetensors.torch import load_file, save_file

from hf_bahdanau.models.pipelines import save_for_pipeline

SOURCES = [*TINY_CORPUS[::2], *(f"{a} {b}" for a, b in zip(TINY_CORPUS[::2], TINY_CORPUS[2::2], strict=False))]


@pytest.fixture(scope="module")
def matrix():
    return load_script("version_matrix")


@pytest.fixture(scope="module")
def probe():
    return load_script("version_matrix_probe")


@pytest.fixture(scope="module")
def trained(tokenizer, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny pre-norm Transformer from German, saved with its tokenizer as training saves a model folder; its
    generation config stops at 10 new tokens."""
    model = make_model("d2l_transformer", width=32, vocab_size=len(tokenizer), init_std=0.18, source_language="de")
    model.generation_config.max_new_tokens = 10
    return save_for_pipeline(model, tokenizer, tmp_path_factory.mktemp("trained") / "model")


def test_the_sources_are_the_test_split_in_the_models_source_language(matrix, trained, tmp_path):
    (tmp_path / "multi30k").mkdir()
    for language, lines in (("de", SOURCES), ("en", TINY_CORPUS[1::2])):
        with gzip.open(tmp_path / "multi30k" / f"test_2016_flickr.{language}.gz", "wt", encoding="utf-8") as file:
            file.write("".join(f"{line}\n" for line in lines))
    assert matrix.source_sentences(trained, tmp_path) == SOURCES
    assert matrix.source_sentences(trained, tmp_path, 3) == SOURCES[:3]


def test_an_exact_standard_folder_translates_every_sentence_as_its_model(
    matrix, probe, trained, tokenizer, tmp_path, monkeypatch
):
    monkeypatch.setattr(matrix, "BATCH", 4)  # three batches, the last one short
    case = tmp_path / "case"
    matrix.make_model_case(trained, case, SOURCES)
    reference = json.loads((case / "reference.json").read_text())
    order = [index for batch in reference["batches"] for index in batch]
    assert [len(batch) for batch in reference["batches"]] == [4, 4, 3] and sorted(order) == list(range(len(SOURCES)))
    lengths = [len(tokenizer(SOURCES[index])["input_ids"]) for index in order]
    assert lengths == sorted(lengths) and lengths[0] < lengths[-1]  # batched by source length
    assert reference["generation"]["max_new_tokens"] == 10
    assert len({tuple(ids) for ids in reference["beam 5"]}) > len(SOURCES) // 2  # the sentences translate differently

    exact = probe.probe_trained(case)
    assert exact["checks"] == dict.fromkeys(["load", "input ids (AutoTokenizer)", "greedy", "beam 5", "logits"], "ok")
    assert exact["differing"] == {"input_ids": 0, "greedy": 0, "beam 5": 0}
    assert matrix.model_cell(exact).startswith(f"ok: 0 of {len(SOURCES)} differ")

    weights = load_file(case / "export" / "model.safetensors")
    bias = weights["final_logits_bias"]
    weights["final_logits_bias"] = bias + 2 * torch.randn(bias.shape, generator=torch.Generator().manual_seed(0))
    save_file(weights, case / "export" / "model.safetensors", metadata={"format": "pt"})
    perturbed = probe.probe_trained(case)
    assert perturbed["differing"]["input_ids"] == 0
    assert perturbed["differing"]["greedy"] > 0 and perturbed["differing"]["beam 5"] > 0
    assert perturbed["checks"]["greedy"].startswith(f"{perturbed['differing']['greedy']} of {len(SOURCES)} sentences")
    assert not matrix.model_cell(perturbed).startswith("ok")
