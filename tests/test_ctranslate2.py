"""The CTranslate2 engine's n-best lists and scores against the torch engine, on a tiny exported Transformer: the same
hypotheses where the searches agree, each scored as torch scores it (the mean token log-probability, `</s>`
included), through the Translator and `translate --engine ctranslate2 --n-best K --scores`."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers import TINY_CORPUS, make_model

from hf_bahdanau.cli import main
from hf_bahdanau.decoding.translator import Translator
from hf_bahdanau.models.pipelines import save_for_pipeline

pytest.importorskip("ctranslate2")

TEXTS = [*TINY_CORPUS, "", "Hund"]


def eager_folder(tokenizer, folder: Path, **config) -> Path:
    """A tiny random Transformer whose `</s>` logit is raised, so that hypotheses end at different lengths (some cut
    by their length bound), saved with `tokenizer` in `folder`."""
    model = make_model("d2l_transformer", width=32, vocab_size=len(tokenizer), **config)
    with torch.no_grad():
        model.lm_head.weight[2] += 0.5 * model.lm_head.weight.mean(0)
        model.lm_head.weight[2] *= 8.0
    return save_for_pipeline(model, tokenizer, folder)


@pytest.fixture(scope="module")
def folder(tokenizer, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return eager_folder(tokenizer, tmp_path_factory.mktemp("ct2") / "model")


def both_engines(folder: Path) -> dict[str, Translator]:
    return {engine: Translator.from_folder(folder, engine=engine) for engine in ("torch", "ctranslate2")}


@pytest.fixture(scope="module")
def engines(folder) -> dict[str, Translator]:
    return both_engines(folder)


def teacher_forced_score(translator: Translator, text: str, ids: list[int]) -> float:
    """The mean log-probability of the generated `ids` given `text` (cut to the model's limit), by one forward pass
    of the torch translator's model."""
    model = translator.model
    source = torch.tensor(translator.source_ids([text]))
    decoder = torch.tensor([[model.config.decoder_start_token_id, *ids[:-1]]])
    with torch.no_grad():
        logits = model(input_ids=source, decoder_input_ids=decoder).logits[0]
    return logits.log_softmax(-1).gather(1, torch.tensor(ids)[:, None]).mean().item()


@pytest.mark.parametrize(
    "options, agreeing",
    [
        (dict(num_beams=5, n_best=3), 1.0),
        (dict(num_beams=5, n_best=3, length_penalty=0.6), 1.0),
        (dict(num_beams=1), 1.0),
        (dict(num_beams=3, n_best=3, max_new_tokens=6), 0.9),
        (dict(num_beams=4, n_best=2, prefix="A"), 0.0),  # CTranslate2 leaves the prefix out of its beam scores
    ],
    ids=["n-best", "length-penalty", "greedy", "max-new-tokens", "prefix"],
)
def test_n_best_lists_and_scores_are_the_torch_engine_s(engines, options, agreeing):
    assert_scored_as_torch(engines, options, agreeing)


@pytest.mark.parametrize("prefix", [None, "A"])
def test_hypotheses_that_fill_the_position_table_are_scored_as_torch_s(tokenizer, tmp_path, prefix, caplog):
    """Sources whose length bound (3 tokens a source token) passes the table of 12 positions: their hypotheses stop
    at the table without `</s>`, as torch's do."""
    engines = both_engines(eager_folder(tokenizer, tmp_path / "model", max_position_embeddings=12))
    found = assert_scored_as_torch(engines, dict(num_beams=3, n_best=2, prefix=prefix), 0.3)
    assert max(len(h.ids) for translation in found for h in translation.hypotheses) == 12


def assert_scored_as_torch(engines: dict[str, Translator], options: dict, agreeing: float) -> list:
    """CTranslate2's translations of TEXTS with `options`: n-best lists as long as asked, at least `agreeing` of
    their hypotheses torch's, and each scored as torch scores it."""
    found = {engine: translator.translate(TEXTS, **options) for engine, translator in engines.items()}
    n = options.get("n_best", 1)
    assert [len(translation.hypotheses) for translation in found["ctranslate2"]] == [n] * len(TEXTS)
    assert [h.score for h in found["ctranslate2"][-2].hypotheses] == [None] * n  # a blank source: unscored
    pairs = [pair for a, b in zip(found["torch"], found["ctranslate2"], strict=True)
             for pair in zip(a.hypotheses, b.hypotheses, strict=True) if pair[0].ids]  # fmt: skip
    same = [(ours, theirs) for ours, theirs in pairs if ours.ids == theirs.ids]
    assert len(same) >= agreeing * len(pairs)
    assert all(theirs.text == ours.text and theirs.score == pytest.approx(ours.score, abs=1e-4)
               for ours, theirs in same)  # fmt: skip
    for text, translation in zip(TEXTS, found["ctranslate2"], strict=True):
        for hypothesis in translation.hypotheses if text else []:  # every score is its hypothesis's, by hand
            by_hand = teacher_forced_score(engines["torch"], text, hypothesis.ids)
            assert hypothesis.score == pytest.approx(by_hand, abs=1e-4)
    return found["ctranslate2"]


def test_translate_prints_torch_s_n_best_lists_and_scores(folder, capsys):
    printed = {}
    for engine in ("torch", "ctranslate2"):
        assert main(["translate", "--model", str(folder), *TEXTS, "--engine", engine, "--num-beams", "5",
                     "--n-best", "3", "--scores"]) == 0  # fmt: skip
        printed[engine] = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    assert len(printed["ctranslate2"]) == 3 * len(TEXTS)
    for ours, theirs in zip(printed["torch"], printed["ctranslate2"], strict=True):
        assert (theirs[0], theirs[2]) == (ours[0], ours[2])  # the source's index and the translation
        if ours[1]:
            assert float(theirs[1]) == pytest.approx(float(ours[1]), abs=2e-4)
        else:  # a blank source: not scored
            assert theirs[1] == ""
